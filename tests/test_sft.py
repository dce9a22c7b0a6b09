"""Supervised fine-tuning for real (TRL's SFTTrainer on the smallest Qwen2): it learns the train
split's reference answers only, its result is a plain model (the adapter merged in), and a run
cut short resumes from its checkpoint in the store to the same weights."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest

from configs.recipe import LoraConfig, SftConfig
from tasks.core.store import ArtifactStore
from tasks.prep.build import prepare_data
from tasks.prep.olist import fingerprint_source
from tasks.training import step_log
from tasks.training.sft import SftError, sft_examples, sft_key, train_sft

from .conftest import small_training_inputs

pytestmark = pytest.mark.slow

SMALL_SFT = SftConfig(
    enabled=True, max_steps=4, save_steps=2, batch_size=4, learning_rate=1e-3, max_length=1024
)


def test_sft_learns_the_train_split_s_references_only(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path)
    data, _ = small_training_inputs(store)
    train, eval_ = store.read_jsonl(data.train), store.read_jsonl(data.eval)
    examples = sft_examples(train)
    assert [e["completion"][0]["content"] for e in examples] == [r["reference"] for r in train]
    eval_prompts = {repr(r["prompt"]) for r in eval_}
    assert not any(repr(e["prompt"]) in eval_prompts for e in examples)


@pytest.mark.parametrize("full_finetune", [False, True])
def test_sft_gives_plain_weights_and_a_crashed_run_resumes_to_the_same_model(
    tmp_path: Path, monkeypatch, caplog, full_finetune: bool
) -> None:
    from transformers import AutoModelForCausalLM

    config = SMALL_SFT.model_copy(update={"full_finetune": full_finetune})
    store = ArtifactStore(tmp_path / "a")
    data, base = small_training_inputs(store)
    uninterrupted = train_sft(config, LoraConfig(), data, base, store)
    # A plain model, the adapter (if any) merged in: it loads without PEFT.
    assert uninterrupted.source == "sft" and uninterrupted.fingerprint != base.fingerprint
    folder = store.local_dir(uninterrupted.location)
    assert not (folder / "adapter_config.json").exists()
    assert not hasattr(AutoModelForCausalLM.from_pretrained(folder), "peft_config")
    run = uninterrupted.location.rsplit("/", 1)[0]
    history = store.read_json(f"{run}/log_history.json")
    assert [h["step"] for h in history if "loss" in h][-1] == 4
    # Its checkpoints resume nothing once the model is complete (a full fine-tune's are 3x it).
    assert not store.exists(f"{run}/checkpoints")

    again = ArtifactStore(tmp_path / "b")
    data, base = small_training_inputs(again)
    original = step_log.LogLoss.on_log

    def crash_at_step_3(self, args, state, control, logs=None, **kwargs):
        if state.global_step == 3:
            raise RuntimeError("simulated crash at step 3")
        return original(self, args, state, control, logs=logs, **kwargs)

    monkeypatch.setattr(step_log.LogLoss, "on_log", crash_at_step_3)
    with pytest.raises(RuntimeError, match="simulated crash"):
        train_sft(config, LoraConfig(), data, base, again)
    assert again.listdir(f"{run}/checkpoints") == ["checkpoint-2"]
    monkeypatch.setattr(step_log.LogLoss, "on_log", original)
    with caplog.at_level("INFO", logger="tucano.sft"):
        resumed = train_sft(config, LoraConfig(), data, base, again)
    assert "resuming at step 2" in caplog.text
    assert resumed.fingerprint == uninterrupted.fingerprint
    assert not again.exists(f"{run}/checkpoints")
    # A finished run started again (the task retried, a cache lost) hands back the same weights,
    # not a reloaded variant of them, and removes the checkpoints of a run stopped between its
    # model and their removal.
    again.put_dir(again.local_dir(f"{run}/model"), f"{run}/checkpoints/checkpoint-4")
    assert train_sft(config, LoraConfig(), data, base, again).fingerprint == resumed.fingerprint
    assert not again.exists(f"{run}/checkpoints")


def test_checkpoints_go_only_after_the_model_is_in_the_store(
    tmp_path: Path, monkeypatch, caplog
) -> None:
    """A run that fails writing its model keeps every checkpoint and resumes at its last; a store
    that then refuses their delete leaves the run finished, with a warning."""
    store = ArtifactStore(tmp_path)
    data, base = small_training_inputs(store)
    put_dir, remove = ArtifactStore.put_dir, ArtifactStore.remove

    def model_write_fails(self, local_dir, rel):
        if rel.endswith("/model"):
            raise OSError("simulated: the store went away")
        return put_dir(self, local_dir, rel)

    monkeypatch.setattr(ArtifactStore, "put_dir", model_write_fails)
    with pytest.raises(OSError, match="simulated"):
        train_sft(SMALL_SFT, LoraConfig(), data, base, store)
    run = f"sft/{sft_key(SMALL_SFT, LoraConfig(), data, base)}"
    assert store.listdir(f"{run}/checkpoints") == ["checkpoint-2", "checkpoint-4"]

    def delete_refused(self, rel):
        if rel.endswith("/checkpoints"):
            raise PermissionError("simulated: no delete permission")
        return remove(self, rel)

    monkeypatch.setattr(ArtifactStore, "put_dir", put_dir)
    monkeypatch.setattr(ArtifactStore, "remove", delete_refused)
    with caplog.at_level("INFO", logger="tucano"):
        finished = train_sft(SMALL_SFT, LoraConfig(), data, base, store)
    assert "resuming at step 4" in caplog.text
    assert store.is_complete(finished.location)
    assert "could not remove" in caplog.text and "no delete permission" in caplog.text
    # Resumed at its last step, the run is loaded, not trained a step past it (transformers
    # would), and its model is the one a run never stopped makes.
    assert store.listdir(f"{run}/checkpoints") == ["checkpoint-2", "checkpoint-4"]
    assert [h["step"] for h in store.read_json(f"{run}/log_history.json")][-1] == 4
    uninterrupted = ArtifactStore(tmp_path / "uninterrupted")
    data, base = small_training_inputs(uninterrupted)
    monkeypatch.setattr(ArtifactStore, "remove", remove)
    assert train_sft(SMALL_SFT, LoraConfig(), data, base, uninterrupted).fingerprint == (
        finished.fingerprint
    )


def test_the_sft_run_key_follows_its_recipe(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path)
    data, base = small_training_inputs(store)
    key = sft_key(SMALL_SFT, LoraConfig(), data, base)
    assert key == sft_key(SMALL_SFT, LoraConfig(), data, base)
    assert key != sft_key(SMALL_SFT.model_copy(update={"max_steps": 5}), LoraConfig(), data, base)
    # A full fine-tune has no adapter: the LoRA section does not name it.
    full = SMALL_SFT.model_copy(update={"full_finetune": True})
    assert sft_key(full, LoraConfig(), data, base) == sft_key(full, LoraConfig(r=8), data, base)


def test_sft_on_4bit_weights_is_refused_naming_the_fields(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path)
    data, base = small_training_inputs(store)
    nf4 = base.model_copy(update={"load_in_4bit": True})
    with pytest.raises(SftError, match=r"model\.load_in_4bit"):
        train_sft(SMALL_SFT, LoraConfig(), data, nf4, store)


def test_sft_targets_end_with_the_end_of_turn_and_the_loss_covers_it(tmp_path: Path) -> None:
    """A model only learns to stop if the token that stops generation is a target: each example's
    supervised tokens are the reference followed by the chat template's end of turn, which is
    the tokenizer's eos, the token evaluation and rollouts stop on."""
    from datasets import Dataset
    from trl import SFTTrainer

    from tasks.models.model import IM_END, load_model_and_tokenizer
    from tasks.training.sft import sft_args

    store = ArtifactStore(tmp_path)
    data, base = small_training_inputs(store)
    model, tokenizer = load_model_and_tokenizer(base, store)
    assert tokenizer.eos_token == IM_END
    rows = store.read_jsonl(data.train)
    trainer = SFTTrainer(
        model=model,
        # Long enough for every example: one cut at max_length loses its end of turn.
        args=sft_args(SMALL_SFT.model_copy(update={"max_length": 4096}), tmp_path / "out"),
        train_dataset=Dataset.from_list(sft_examples(rows)),
        processing_class=tokenizer,
    )
    for row, example in zip(rows, trainer.train_dataset, strict=True):
        target = [label for label in example["labels"] if label != -100]
        reference = tokenizer(row["reference"], add_special_tokens=False)["input_ids"]
        assert target[: len(reference)] == reference
        assert target[len(reference)] == tokenizer.eos_token_id


def test_references_longer_than_the_generation_limit_are_named(tmp_path: Path) -> None:
    from tasks.models.model import load_tokenizer
    from tasks.training.sft import answers_too_long

    store = ArtifactStore(tmp_path)
    data, base = small_training_inputs(store)
    tokenizer = load_tokenizer(base, store)
    rows = store.read_jsonl(data.train)
    lengths: dict[str, list[int]] = {}
    for row in rows:
        ids = tokenizer(row["reference"] + tokenizer.eos_token, add_special_tokens=False)
        lengths.setdefault(row["task"], []).append(len(ids["input_ids"]))
    longest = max(max(n) for n in lengths.values())
    assert answers_too_long(rows, tokenizer, longest) == {}
    limit = sorted(n for ns in lengths.values() for n in ns)[len(rows) // 2]
    expected = {
        task: (sum(n > limit for n in ns), len(ns), max(ns))
        for task, ns in lengths.items()
        if max(ns) > limit
    }
    assert expected and answers_too_long(rows, tokenizer, limit) == expected


def test_examples_longer_than_sft_max_length_are_refused_before_training(tmp_path: Path) -> None:
    """TRL would cut them where their end of turn is: refused, naming the field and the length
    that fits, before a step runs or a checkpoint is written."""
    from tasks.models.model import load_tokenizer
    from tasks.training.sft import example_lengths, examples_too_long

    store = ArtifactStore(tmp_path)
    data, base = small_training_inputs(store)
    examples = sft_examples(store.read_jsonl(data.train))
    over, longest = examples_too_long(example_lengths(examples, load_tokenizer(base, store)), 4096)
    assert over == 0
    config = SMALL_SFT.model_copy(update={"max_length": longest - 1})
    with pytest.raises(
        SftError, match=rf"longer than sft\.max_length={longest - 1} .* least {longest}"
    ):
        train_sft(config, LoraConfig(), data, base, store)
    assert not list(tmp_path.glob("sft/*/checkpoints/*"))


def test_the_smoke_recipe_lets_every_reference_answer_end(tmp_path: Path) -> None:
    """The tiny model's tokenizer, references and generation limits agree: no answer SFT
    teaches is longer than rollouts and evaluation may generate (its end of turn included), and
    no example is cut at sft.max_length (the default recipe's: tests/test_packaged.py)."""
    from configs.recipe import CONFIG_DIR, load_recipe
    from tasks.models.model import load_tokenizer, prepare_base_model

    from .conftest import SHIPPED_DATA

    recipe = load_recipe(CONFIG_DIR / "cpu_tiny.yaml")
    store = ArtifactStore(tmp_path)
    data = prepare_data(fingerprint_source(str(SHIPPED_DATA)), recipe.data, store)
    tokenizer = load_tokenizer(prepare_base_model(recipe.model, data, store), store)
    assert_every_reference_ends(recipe, store.read_jsonl(data.train), tokenizer)


def assert_every_reference_ends(recipe: Any, rows: list[dict], tokenizer: Any) -> None:
    from tasks.training.sft import answers_too_long, example_lengths, examples_too_long

    assert answers_too_long(rows, tokenizer, recipe.answer_limit()) == {}
    lengths = example_lengths(sft_examples(rows), tokenizer)
    assert examples_too_long(lengths, recipe.sft.max_length)[0] == 0


@pytest.mark.parametrize("schedule", ["constant_with_warmup", "linear"])
def test_the_recipe_s_sft_schedule_reaches_trl(tmp_path: Path, schedule: str) -> None:
    from tasks.training.sft import sft_args

    args = sft_args(SMALL_SFT.model_copy(update={"lr_scheduler_type": schedule}), tmp_path)
    assert args.lr_scheduler_type.value == schedule


def test_sft_task_mix_deals_its_examples_over_the_tasks(tmp_path: Path, monkeypatch) -> None:
    """A task of a tenth of the split is seen a few dozen times in a short SFT: the mix deals
    max_steps x batch_size examples by its shares, a small task's rows taken again, and those are
    what the real SFT run trains on."""
    from collections import Counter

    from tasks.training import sft

    store = ArtifactStore(tmp_path)
    data, base = small_training_inputs(store)
    train = store.read_jsonl(data.train)
    assert Counter(r["task"] for r in train)["insights"] == 4
    mix = {"extraction": 0.25, "sql_qa": 0.25, "insights": 0.4, "push": 0.1}
    rows = sft.mixed_rows(train, mix, 20, seed=3)
    assert Counter(r["task"] for r in rows) == {
        "extraction": 5,
        "sql_qa": 5,
        "insights": 8,
        "push": 2,
    }
    insights = Counter(r["prompt_id"] for r in rows if r["task"] == "insights")
    assert sorted(insights.values()) == [2, 2, 2, 2]  # each of the 4 rows twice
    assert all(row in train for row in rows)
    assert rows == sft.mixed_rows(train, mix, 20, seed=3)
    assert rows != sft.mixed_rows(train, mix, 20, seed=4)

    trained: list[dict] = []
    examples = sft.sft_examples
    monkeypatch.setattr(sft, "sft_examples", lambda rs: (trained.extend(rs), examples(rs))[1])
    only_push = {"extraction": 0.0, "sql_qa": 0.0, "insights": 0.0, "push": 1.0}
    config = SMALL_SFT.model_copy(update={"max_steps": 2, "batch_size": 3, "task_mix": only_push})
    train_sft(config, LoraConfig(), data, base, store)
    assert len(trained) == 6 and {r["task"] for r in trained} == {"push"}


def test_balance_issues_deals_extraction_equally_over_the_problems_references_flag() -> None:
    from collections import Counter

    from tasks.training import sft

    def review(number: int, **flags: bool) -> dict:
        reference = {"delivery_issue": False, "product_issue": False, "seller_issue": False}
        return {"task": "extraction", "prompt_id": f"r{number}", **{
            "reference": json.dumps({**reference, **flags})}}  # fmt: skip

    # As a split comes: mostly none and delivery, one product and two seller complaints; a
    # review of the product and the delivery counts as a product one.
    train = [review(i) for i in range(20)] + [review(20 + i, delivery_issue=True) for i in range(9)]
    train += [review(40, product_issue=True, delivery_issue=True)]
    train += [review(50 + i, seller_issue=True) for i in range(2)]
    only_extraction = {"extraction": 1.0, "sql_qa": 0.0, "insights": 0.0, "push": 0.0}
    dealt = sft.mixed_rows(train, only_extraction, 16, seed=0, balance_issues=True)
    problems = Counter(sft.reference_problem(row) for row in dealt)
    assert problems == {"none": 4, "delivery_issue": 4, "product_issue": 4, "seller_issue": 4}
    assert Counter(row["prompt_id"] for row in dealt)["r40"] == 4
    assert len({row["prompt_id"] for row in dealt if int(row["prompt_id"][1:]) < 20}) == 4
    as_it_comes = Counter(
        sft.reference_problem(row) for row in sft.mixed_rows(train, only_extraction, 16, seed=0)
    )
    assert as_it_comes["product_issue"] + as_it_comes["seller_issue"] < 8


def test_balance_issues_without_a_task_mix_is_refused() -> None:
    with pytest.raises(ValueError, match=r"sft\.balance_issues needs sft\.task_mix"):
        SftConfig(balance_issues=True)


def test_an_sft_task_mix_must_name_every_task() -> None:
    with pytest.raises(ValueError, match=r"sft\.task_mix must name every task"):
        SftConfig(task_mix={"extraction": 1.0})


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_batched_by_length_keeps_every_example_in_batches_of_one_length(seed: int) -> None:
    import random

    from tasks.training.sft import batched_by_length

    rng = random.Random(seed)
    lengths = [rng.randint(50, 700) for _ in range(41)]
    examples = [{"id": index} for index in range(len(lengths))]
    ordered = batched_by_length(examples, lengths, 4, seed)
    assert sorted(example["id"] for example in ordered) == list(range(len(lengths)))
    batches = [ordered[at : at + 4] for at in range(0, len(ordered), 4)]
    spans = sorted(
        (min(lengths[e["id"]] for e in batch), max(lengths[e["id"]] for e in batch))
        for batch in batches
    )
    # Batches of one stretch of the sorted lengths: no batch reaches into another's span.
    assert all(low <= high <= next_low for (low, high), (next_low, _) in itertools.pairwise(spans))
    # In a seeded order, not shortest first: the last steps are not all of one task.
    by_first = [lengths[batch[0]["id"]] for batch in batches]
    assert by_first != sorted(by_first)
    assert ordered == batched_by_length(examples, lengths, 4, seed)


def test_sft_trains_on_the_batches_by_length_in_their_order(tmp_path: Path) -> None:
    """With sft.batches_by_length the trainer's batches are the ones dealt, in the order dealt,
    each padded to its own longest example: fewer padded tokens than drawn at random."""
    from datasets import Dataset
    from trl import SFTTrainer

    from tasks.models.model import load_model_and_tokenizer
    from tasks.training.sft import batched_by_length, conversations, example_lengths, sft_args

    store = ArtifactStore(tmp_path)
    data, base = small_training_inputs(store)
    model, tokenizer = load_model_and_tokenizer(base, store)
    examples = sft_examples(store.read_jsonl(data.train))
    lengths = example_lengths(examples, tokenizer)

    def padded_tokens(config: SftConfig, dealt: list[dict[str, Any]]) -> int:
        trainer = SFTTrainer(
            model=model,
            args=sft_args(config, tmp_path / "out"),
            train_dataset=Dataset.from_list(dealt),
            processing_class=tokenizer,
        )
        batches = list(trainer.get_train_dataloader())
        if config.batches_by_length:
            fed = [row for batch in batches for row in batch["input_ids"].tolist()]
            expected = tokenizer.apply_chat_template(
                conversations(dealt), tokenize=True, return_dict=True
            )["input_ids"]
            assert [row[: len(ids)] for row, ids in zip(fed, expected, strict=True)] == expected
        return sum(batch["input_ids"].numel() for batch in batches)

    config = SMALL_SFT.model_copy(update={"max_length": 4096, "batch_size": 4})
    grouped = config.model_copy(update={"batches_by_length": True})
    by_length = padded_tokens(grouped, batched_by_length(examples, lengths, 4, grouped.seed))
    at_random = padded_tokens(config, examples)
    assert sum(lengths) <= by_length < at_random
