"""Real TRL GRPO steps on a tiny model: GDPO components, task weighting, checkpoints."""

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from configs.recipe import LoraConfig, TrainingConfig
from rewards.review_evidence import star_sentiment
from tasks.core.store import ArtifactStore
from tasks.training.grpo_callbacks import TASK_WEIGHTING_FILE
from tasks.training.train import RECORD_FILE, split_heldout, train_seed
from tasks.training.untrained_tasks import untrained_rows, untrained_scores

from .conftest import small_training_inputs

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    store = ArtifactStore(tmp_path_factory.mktemp("train-store"))
    data, base = small_training_inputs(store)
    training = TrainingConfig(
        learning_rate=1e-3,
        num_generations=4,
        prompts_per_step=2,
        max_completion_length=16,
        max_steps=6,
        save_steps=2,
        multi_objective_aggregation="normalize_then_sum",
        task_weighting={"enabled": True, "window": 1},
        heldout_prompts=4,
        num_generations_eval=2,
        eval_steps=2,
        # The first eval (before step 1) is a best; no later one can beat it by 10: stop at
        # the third eval.
        early_stopping_patience=2,
        min_improvement=10.0,
    )
    adapter = train_seed(training, LoraConfig(), data, base, seed=7, store=store)
    return store, adapter


def test_gdpo_trains_on_each_reward_component(small_run) -> None:
    store, adapter = small_run
    history = store.read_json(adapter.log_history)
    keys = {key for entry in history for key in entry}
    assert "rewards/sql_qa_match/mean" in keys and "rewards/extraction_json/mean" in keys
    assert "rewards/sql_qa_reward/mean" not in keys


def test_gdpo_counts_the_groups_whose_completions_all_tie(small_run) -> None:
    """TRL's frac_reward_zero_std tests the whole batch's spread under GDPO; the report's
    tied-groups column needs the share of groups. A random tiny model never writes JSON, so its
    extraction groups all score 0 while other tasks' answers earn length credit."""
    store, adapter = small_run
    tied = [e["frac_reward_zero_std"] for e in store.read_json(adapter.log_history) if "loss" in e]
    assert tied and all(share in (0.0, 0.5, 1.0) for share in tied)  # two groups a step
    # A step where one group tied and the other did not: the batch's rewards spread all the same.
    assert 0.5 in tied


def test_task_weighting_state_is_saved_with_each_checkpoint(small_run) -> None:
    store, adapter = small_run
    run = adapter.folder.rsplit("/", 1)[0]
    states = []
    for step in (2, 4):
        checkpoint = f"{run}/checkpoints/checkpoint-{step}"
        assert store.is_complete(checkpoint)
        states.append(store.read_json(f"{checkpoint}/{TASK_WEIGHTING_FILE}"))
    for state in states:
        assert sum(state["weights"].values()) == pytest.approx(1.0)
    recorded = [sum(len(v) for v in state["history"].values()) for state in states]
    assert 0 < recorded[0] < recorded[1]  # one mean per task seen at each logging step


def test_early_stopping_keeps_the_best_adapter(small_run) -> None:
    store, adapter = small_run
    run = adapter.run_key
    summary = store.read_json(f"runs/{run}/summary.json")
    assert summary["final_step"] == adapter.global_step == 4  # of max_steps 6
    assert summary["stop_reason"].startswith("early stopping")
    # The held-out eval before the first step is the start GRPO must beat: when nothing beats
    # it, the exported adapter is the untrained one, and the tuned model equals its base.
    assert adapter.best_step == 0 == store.read_json(f"runs/{run}/best.json")["step"]
    assert adapter.folder == f"runs/{run}/best" and store.is_complete(adapter.folder)
    history = store.read_json(adapter.log_history)
    eval_steps = [entry["step"] for entry in history if "eval_reward" in entry]
    assert eval_steps == [0, 2, 4]
    assert adapter.best_eval_reward == next(e["eval_reward"] for e in history if "eval_reward" in e)


def test_adapter_has_the_recipes_lora(small_run) -> None:
    store, adapter = small_run
    config = json.loads(Path(store.local_dir(adapter.folder), "adapter_config.json").read_text())
    assert (config["r"], config["lora_alpha"]) == (16, 32)


def test_the_lora_initialisation_follows_the_seed_not_the_process_history(tmp_path) -> None:
    import torch

    from tasks.training.train import build_trainer

    store = ArtifactStore(tmp_path / "store")
    data, base = small_training_inputs(store)
    training = TrainingConfig(max_steps=1, save_steps=1, heldout_prompts=0)
    adapters = []
    for history, seed in ((1, 5), (2, 5), (1, 6)):
        torch.manual_seed(history)  # what earlier work in the process left in the generator
        run = build_trainer(
            training, LoraConfig(), data, base, seed, store, tmp_path / str(history)
        )
        adapters.append(
            torch.cat(
                [p.flatten() for n, p in run.trainer.model.named_parameters() if "lora_A" in n]
            )
        )
    assert torch.equal(adapters[0], adapters[1])
    assert not torch.equal(adapters[0], adapters[2])


def test_grpo_trains_and_holds_out_only_the_recipe_s_tasks(tmp_path) -> None:
    from tasks.training.train import build_trainer

    store = ArtifactStore(tmp_path / "store")
    data, base = small_training_inputs(store)
    training = TrainingConfig(max_steps=1, save_steps=1, heldout_prompts=2, tasks=["sql_qa"])
    run = build_trainer(training, LoraConfig(), data, base, 3, store, tmp_path / "work")
    sql_rows = [row for row in store.read_jsonl(data.train) if row["task"] == "sql_qa"]
    assert len(sql_rows) > 2
    assert [row["prompt_id"] for row in run.trainer.train_dataset] == [
        row["prompt_id"] for row in sql_rows[:-2]
    ]
    assert [row["prompt_id"] for row in run.trainer.eval_dataset] == [
        row["prompt_id"] for row in sql_rows[-2:]
    ]


def test_stratified_steps_take_their_prompts_in_the_stratified_order(tmp_path) -> None:
    """TRL's sampler shuffles the dataset it is given unless told not to: each step's groups
    must be the stratified order's next prompts, each repeated for its samples."""
    from tasks.training.prompt_order import stratified_stream
    from tasks.training.train import build_trainer

    store = ArtifactStore(tmp_path / "store")
    data, base = small_training_inputs(store)
    training = TrainingConfig(
        max_steps=4,
        save_steps=4,
        heldout_prompts=0,
        num_generations=2,
        prompts_per_step=3,
        tasks=["extraction", "sql_qa"],
        prompt_order="stratified",
    )
    run = build_trainer(training, LoraConfig(), data, base, 3, store, tmp_path / "work")
    rows = [row for row in store.read_jsonl(data.train) if row["task"] in training.tasks]
    expected = [row["prompt_id"] for row in stratified_stream(rows, "3/steps", 12)]
    batches = iter(run.trainer.get_train_dataloader())
    taken = [row["prompt_id"] for _ in range(4) for row in next(batches)]
    assert taken == [prompt for prompt in expected for _ in range(2)]
    assert {star_sentiment(row["review_score"]) for row in rows if row.get("review_score")} == {
        "negativo",
        "neutro",
        "positivo",
    }


def test_the_heldout_eval_samples_at_its_own_temperature(tmp_path) -> None:
    """Near-greedy held-out sampling gives a prompt the same answer twice; the rollouts' hot
    sampling does not, and training samples hot again after the eval."""

    def heldout_answers(heldout_temperature: float | None) -> tuple[list[str], float]:
        run = _hot_trainer_with_heldout(tmp_path, heldout_temperature)
        run.trainer.evaluate()
        return list(run.trainer._logs["completion"]), run.trainer.generation_config.temperature

    def pairs(answers: list[str]) -> list[tuple[str, str]]:
        return list(zip(answers[::2], answers[1::2], strict=True))

    cold, after_cold = heldout_answers(1e-3)
    hot, _ = heldout_answers(None)
    assert len(cold) == len(hot) == 6
    assert all(first == second for first, second in pairs(cold))
    assert any(first != second for first, second in pairs(hot))
    assert after_cold == 5.0


def test_every_heldout_eval_draws_the_same_random_numbers(tmp_path) -> None:
    """Sampled hot, the same model answers the held-out prompts the same way at every eval, so
    two evals differ only where the model did; and an eval leaves training's random stream
    where it was."""
    import torch

    run = _hot_trainer_with_heldout(tmp_path, None)
    torch.manual_seed(11)
    untouched = torch.rand(4)
    torch.manual_seed(11)
    evals = []
    for _ in range(2):
        metrics = run.trainer.evaluate()
        # TRL's log keeps adding; the eval's own answers are its last six (3 prompts x 2).
        evals.append((list(run.trainer._logs["completion"])[-6:], metrics["eval_reward"]))
    assert torch.equal(torch.rand(4), untouched)
    (answers, reward), (again, reward_again) = evals
    assert answers == again and reward == reward_again
    # Hot enough that fresh draws would answer differently (the test above).
    assert len(set(answers)) > 1


def test_the_heldout_eval_answers_in_passes_of_heldout_batch_prompts(tmp_path) -> None:
    """By default a pass answers a step's worth of prompts (2 here); heldout_batch_prompts
    widens it, so the 3 held-out prompts, twice each, are answered in one pass."""
    passes = {}
    for batch in (None, 3):
        trainer = _hot_trainer_with_heldout(tmp_path / str(batch), 1e-3, batch).trainer
        generate, rows = trainer._generate_single_turn, []

        def counted(prompt_ids, *args, generate=generate, rows=rows):
            rows.append(len(prompt_ids))
            return generate(prompt_ids, *args)

        trainer._generate_single_turn = counted
        trainer.evaluate()
        passes[batch] = rows
    assert passes == {None: [4, 2], 3: [6]}


def _hot_trainer_with_heldout(
    tmp_path: Path,
    heldout_temperature: float | None,
    heldout_batch_prompts: int | None = None,
    **training_fields: Any,
) -> Any:
    """A trainer whose rollouts sample at 5.0, with 3 held-out prompts answered twice each."""
    from tasks.training.train import build_trainer

    store = ArtifactStore(tmp_path / "store")
    data, base = small_training_inputs(store)
    training = TrainingConfig(
        max_steps=1,
        save_steps=1,
        max_completion_length=12,
        temperature=5.0,
        heldout_prompts=3,
        num_generations_eval=2,
        heldout_temperature=heldout_temperature,
        heldout_batch_prompts=heldout_batch_prompts,
        **training_fields,
    )
    return build_trainer(training, LoraConfig(), data, base, 3, store, tmp_path / "work")


def test_the_untrained_tasks_are_the_train_file_s_last_prompts_of_each() -> None:
    rows = [{"task": task, "n": n} for n, task in enumerate(["sql_qa", "push", "extraction"] * 3)]
    training = TrainingConfig(tasks=["extraction"], untrained_heldout_prompts=2)
    assert [(r["task"], r["n"]) for r in untrained_rows(rows, training)] == [
        ("sql_qa", 3), ("push", 4), ("sql_qa", 6), ("push", 7),
    ]  # fmt: skip
    assert untrained_rows(rows, TrainingConfig(tasks=["extraction"])) == []


def test_each_heldout_eval_scores_the_tasks_the_run_does_not_train(tmp_path) -> None:
    """The untrained tasks' means are logged with every eval, from the same draws each time, and
    answering them changes neither the held-out answers nor training's random stream."""
    import torch

    def two_evals(untrained_prompts: int) -> tuple[list[Any], list[str], float, Any]:
        run = _hot_trainer_with_heldout(
            tmp_path / str(untrained_prompts),
            None,
            tasks=["extraction"],
            untrained_heldout_prompts=untrained_prompts,
        )
        torch.manual_seed(11)
        metrics = [run.trainer.evaluate() for _ in range(2)]
        logged = [untrained_scores(e) for e in run.trainer.state.log_history if "eval_reward" in e]
        answers = list(run.trainer._logs["completion"])[-6:]
        return logged, answers, metrics[-1]["eval_reward"], torch.rand(4)

    plain, guarded = two_evals(0), two_evals(2)
    assert plain[0] == [None, None]
    first, second = guarded[0]
    assert set(first) == {"sql_qa", "insights", "push"} and first == second
    assert all(0.0 <= score <= 1.0 for score in first.values())
    assert guarded[1:3] == plain[1:3]
    assert torch.equal(guarded[3], plain[3])


def test_each_heldout_eval_logs_how_its_sentiments_read_the_stars(small_run) -> None:
    store, adapter = small_run
    evals = [e for e in store.read_json(adapter.log_history) if "eval_reward" in e]
    prepared = store.read_json(f"runs/{adapter.run_key}/{RECORD_FILE}")["prepared"]
    heldout = split_heldout(store.read_jsonl(prepared["train"]), 4)[1]
    judged = Counter(star_sentiment(r["review_score"]) for r in heldout if r["review_score"])
    assert judged  # some of the four held-out prompts are reviews
    for entry in evals:
        # Counts averaged over the eval's batches: none agrees (a random model writes no JSON),
        # and each held-out review is counted in its group, and only there.
        for group in ("negativo", "positivo"):
            assert entry[f"eval_stars_{group}/agreed"] == 0
            assert (entry[f"eval_stars_{group}/reviews"] > 0) is (group in judged), group
    best = store.read_json(f"runs/{adapter.run_key}/best.json")
    assert best["star_agreement"] == 0.0


def test_a_step_updated_in_passes_is_the_step_updated_at_once(tmp_path: Path) -> None:
    """`update_rows` splits a step's completions into forward and backward passes whose
    gradients accumulate into one optimizer step: the same completions, the same adapter (up to
    float rounding), only the time differs."""
    from safetensors.torch import load_file

    weights, losses = [], []
    for rows in (None, 2):
        store = ArtifactStore(tmp_path / f"rows-{rows}")
        data, base = small_training_inputs(store)
        training = TrainingConfig(
            learning_rate=1e-3, num_generations=4, prompts_per_step=2, max_completion_length=16,
            max_steps=2, save_steps=2, update_rows=rows, heldout_prompts=0,
        )  # fmt: skip
        adapter = train_seed(training, LoraConfig(), data, base, seed=7, store=store)
        weights.append(
            load_file(str(Path(store.path(adapter.folder)) / "adapter_model.safetensors"))
        )
        losses.append([e for e in store.read_json(adapter.log_history) if "loss" in e])
    whole, passes = weights
    assert whole.keys() == passes.keys()
    assert max((whole[k] - passes[k]).abs().max().item() for k in whole) < 1e-6
    assert max(w.abs().max().item() for w in whole.values()) > 1e-3  # the adapter did move
    assert [e["step"] for e in losses[0]] == [e["step"] for e in losses[1]] == [1, 2]


def test_a_run_stopped_after_its_last_checkpoint_is_loaded_there_not_trained_past_it(
    tmp_path: Path, monkeypatch, caplog
) -> None:
    """transformers resumed at max_steps trains one step more (its stop check follows a step): a
    run whose final adapter never reached the store (a stop, a crash) is loaded from its last
    checkpoint instead, and hands back the adapter a run never stopped does."""
    training = TrainingConfig(
        num_generations=2, prompts_per_step=1, max_completion_length=8, max_steps=4,
        save_steps=2, heldout_prompts=0, learning_rate=5e-4,
    )  # fmt: skip
    lora = LoraConfig(r=4, alpha=8)
    store = ArtifactStore(tmp_path / "stopped")
    data, base = small_training_inputs(store)
    put_dir = ArtifactStore.put_dir

    def final_write_fails(self, local_dir, rel):
        if rel.endswith("/final"):
            raise OSError("simulated: the store went away")
        return put_dir(self, local_dir, rel)

    monkeypatch.setattr(ArtifactStore, "put_dir", final_write_fails)
    with pytest.raises(OSError, match="simulated"):
        train_seed(training, lora, data, base, seed=5, store=store)
    monkeypatch.setattr(ArtifactStore, "put_dir", put_dir)
    with caplog.at_level("INFO", logger="tucano"):
        resumed = train_seed(training, lora, data, base, seed=5, store=store)
    assert "checkpoint-4 is the run's last step" in caplog.text
    assert resumed.global_step == 4
    assert [h["step"] for h in store.read_json(resumed.log_history) if "loss" in h][-1] == 4
    never_stopped = ArtifactStore(tmp_path / "never-stopped")
    data, base = small_training_inputs(never_stopped)
    adapter = train_seed(training, lora, data, base, seed=5, store=never_stopped)
    # The same weights (the folders' configs name their own store's paths).
    weights = "adapter_model.safetensors"
    assert (store.local_dir(resumed.folder) / weights).read_bytes() == (
        never_stopped.local_dir(adapter.folder) / weights
    ).read_bytes()
