"""Scheduled retraining on the shipped data, with real training and evaluation: a changed source
trains and decides, an unchanged one does not train, and a challenger replaces the champion only
when it is significantly better. The champions are controlled models: one that ends every answer
at once (so any real model beats it), and the challenger of the previous run (so a retrain that
yields the same model cannot beat it)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from configs.recipe import RetrainingConfig
from flows.deployment_flows import scheduled_retraining
from flows.parameters import RetrainingRun
from tasks.core.manifests import BaseModelArtifact
from tasks.core.store import ArtifactStore
from tasks.evaluation import champion as champions
from tasks.models.model import build_tiny_model

from .conftest import SMALLEST_QWEN2
from .test_pipeline import SMALL_RECIPE

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("prefect_api")]


def silent_model(store: ArtifactStore, tmp: Path) -> BaseModelArtifact:
    """A real Qwen2 whose only answer is end-of-turn: every block adds nothing to the residual
    stream and every embedding points one way, with end-of-turn's three times as long, so it
    wins every next-token choice."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    build_tiny_model(SMALLEST_QWEN2, ["Olá! Tudo certo com o pedido?"] * 20, tmp)
    model = AutoModelForCausalLM.from_pretrained(tmp)
    eos = AutoTokenizer.from_pretrained(tmp).eos_token_id
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        direction = torch.ones(model.config.hidden_size)
        model.model.embed_tokens.weight.copy_(direction.expand_as(model.model.embed_tokens.weight))
        model.model.embed_tokens.weight[eos] = 3 * direction
    model.save_pretrained(tmp)
    folder = "models/silent"
    store.put_dir(tmp, folder)
    return BaseModelArtifact(
        fingerprint=store.dir_digest(folder), source="tiny", location=folder, in_store=True
    )


@pytest.fixture
def retraining(tmp_path: Path, olist_copy: Path):
    recipe = json.loads(json.dumps(SMALL_RECIPE))
    recipe["seeds"] = [1]
    recipe["training"].update(max_steps=2, save_steps=2, heldout_prompts=4, eval_steps=2)
    # Sampled answers of a random-weight model are varied enough to earn partial rewards.
    recipe["evaluation"].update(temperature=1.0)
    (tmp_path / "recipe.yaml").write_text(yaml.safe_dump(recipe))
    store = ArtifactStore(tmp_path / "store")
    run = RetrainingRun(
        recipe=str(tmp_path / "recipe.yaml"),
        data=str(olist_copy),
        artifacts=str(store.root),
        training_deployment=None,
    )
    return run, store, olist_copy


def test_retraining_promotes_only_a_better_model_and_skips_unchanged_data(
    retraining, tmp_path: Path
) -> None:
    run, store, olist = retraining
    silent = champions.Champion(
        base=silent_model(store, tmp_path / "silent"),
        adapter=None,
        promoted_at=champions.timestamp(),
        data_fingerprint="none",
        recipe="hand-made",
    )
    champions.promote(silent, store)

    # Changed data (first run): a trained model beats a silent champion and replaces it.
    first = scheduled_retraining(run)
    assert first["outcome"] == "promoted", first["reason"]
    assert first["significantly_better"] == ["overall"] and first["significantly_worse"] == []
    champion = champions.read_champion(store)
    assert champion.adapter is not None and champion.adapter.seed == 1
    assert [c.adapter for c in champions.champion_history(store)] == [None, champion.adapter]

    # Unchanged data: nothing trains, the decision says so.
    runs_before = sorted(p.name for p in (Path(store.root) / "runs").iterdir())
    second = scheduled_retraining(run)
    assert second["outcome"] == "unchanged"
    assert sorted(p.name for p in (Path(store.root) / "runs").iterdir()) == runs_before

    # Changed bytes, same tables (a trailing blank line): it retrains, gets the same model,
    # which is not significantly better than itself, so the champion stays.
    with (olist / "olist_sellers_dataset.csv").open("a", encoding="utf-8") as handle:
        handle.write("\n")
    third = scheduled_retraining(run)
    assert third["outcome"] == "kept champion"
    assert third["reason"] == "not significantly better on overall"
    assert third["data_fingerprint"] != first["data_fingerprint"]
    assert champions.read_champion(store) == champion

    # A new split rule (a larger eval share) moves orders the champion trained on into the eval
    # split: scoring it there would flatter it, so nothing trains and the decision says why.
    recipe = yaml.safe_load(Path(run.recipe).read_text())
    recipe["data"]["eval_share"] = 0.3
    Path(run.recipe).write_text(yaml.safe_dump(recipe))
    fourth = scheduled_retraining(run)
    assert fourth["outcome"] == "refused"
    assert fourth["reason"].startswith("the new eval split may hold prompts a champion trained")
    assert list(fourth["trained_on_eval_prompts"]) == [champion.label]
    assert sorted(p.name for p in (Path(store.root) / "runs").iterdir()) == runs_before
    assert champions.read_champion(store) == champion
    decisions = sorted((Path(store.root) / champions.DECISIONS).iterdir())
    assert [json.loads(p.read_text())["outcome"] for p in decisions] == [
        "promoted",
        "unchanged",
        "kept champion",
        "refused",
    ]


def _rows(totals: dict[str, list[float]]) -> list[dict]:
    return [
        {"prompt_id": f"{task}-{i}", "task": task, "total": total}
        for task, values in totals.items()
        for i, total in enumerate(values)
    ]


@pytest.mark.parametrize(
    ("challenger_shift", "promote_on", "outcome", "reason"),
    [
        ({"push": 0.3, "sql_qa": 0.3}, ["overall"], True, "significantly better on overall"),
        ({"push": 0.3, "sql_qa": -0.3}, ["push"], False, "significantly worse on sql_qa"),
        ({"push": 0.3}, ["sql_qa"], False, "not significantly better on sql_qa"),
        ({}, ["overall"], False, "not significantly better on overall"),
    ],
)
def test_promotion_rule(challenger_shift, promote_on, outcome, reason) -> None:
    base = {"push": [0.5 + 0.01 * i for i in range(10)], "sql_qa": [0.5] * 10}
    challenger = {
        task: [v + challenger_shift.get(task, 0.0) * (1 + 0.01 * i) for i, v in enumerate(values)]
        for task, values in base.items()
    }
    verdict = champions.decide(
        _rows(base), _rows(challenger), RetrainingConfig(promote_on=promote_on), alpha=0.05
    )
    assert verdict["promote"] is outcome
    assert verdict["reason"].startswith(reason)
