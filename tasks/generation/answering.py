"""How a model answers prompts outside GRPO's rollouts, and how an answer is scored.

Evaluation, `tucano analyze` and the held-out eval of the tasks a run does not train
(untrained_tasks.py) answer and score through these functions, so each judges an answer as the
others do. Generation settings come from an `EvalConfig` and are passed explicitly, never read
from the model's generation_config.json.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from tqdm.auto import tqdm

from configs.recipe import EvalConfig
from rewards import score
from rewards.common import completion_text
from rewards.context import CONTEXT_KEYS
from tasks.core.progress import Progress
from tasks.generation.decoding import decode_side_by_side
from tasks.generation.rollout import RolloutModel, completions_until_eos


def _generation_config(config: EvalConfig, tokenizer: Any) -> Any:
    from transformers import GenerationConfig

    sampling = {"temperature": config.temperature, "top_p": config.top_p, "top_k": 0}
    return GenerationConfig(
        max_new_tokens=config.max_new_tokens,
        do_sample=config.do_sample,
        **(sampling if config.do_sample else {}),
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )


def generate(
    model: Any,
    tokenizer: Any,
    prompts: list[list[dict[str, str]]],
    config: EvalConfig,
    *,
    stage: str | None = None,
) -> list[dict[str, Any]]:
    """Completions for chat prompts, batched, reproducible for a given `config.seed`; `stage`
    names the progress to report (tasks/core/progress.py), if any."""
    batches = generate_batches(model, tokenizer, prompts, config, stage=stage)
    return [row for batch in batches for row in batch]


def generate_batches(
    model: Any,
    tokenizer: Any,
    prompts: list[list[dict[str, str]]],
    config: EvalConfig,
    *,
    done: int = 0,
    stage: str | None = None,
) -> Iterator[list[dict[str, Any]]]:
    """`generate`, one batch at a time, for callers that keep each batch as it comes; `done`
    prompts were handled earlier (the progress starts there). With a `stage`, each batch is that
    stage's progress in the terminal and the Prefect UI; without, a bar where there is a
    terminal."""
    tokenizer.padding_side = "left"
    generation_config = _generation_config(config, tokenizer)
    model.eval()
    rollout = RolloutModel(model, config.rollout_engine)
    texts = [
        tokenizer.apply_chat_template(p, tokenize=False, add_generation_prompt=True)
        for p in prompts
    ]
    total = done + len(prompts)
    if stage is None:
        bar = tqdm(total=total, initial=done, desc="generating", unit="prompt", disable=None)
    else:
        reported = Progress(stage, total, "prompts", done=done)
    # Each batch is sampled from a seed of its own, whichever way it is decoded.
    batches = (
        (
            tokenizer(
                texts[start : start + config.batch_size],
                return_tensors="pt",
                padding=True,
                add_special_tokens=False,
            ).to(model.device),
            config.seed + done + start,
        )
        for start in range(0, len(prompts), config.batch_size)
    )
    if rollout.fast and not rollout.static_cache:
        answers = decode_side_by_side(
            rollout.model,
            ((encoded["input_ids"], encoded["attention_mask"], seed) for encoded, seed in batches),
            generation_config,
            config.decode_rows,
        )
    else:
        # One shape for every batch, so a compiled engine compiles once.
        width = max(
            (len(ids) for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]),
            default=0,
        )
        answers = (
            _generated(rollout, encoded, seed, generation_config, width, config.batch_size)
            for encoded, seed in batches
        )
    answered = done
    for batch in answers:
        answered += len(batch)
        if stage is None:
            bar.update(len(batch))
        else:
            reported.advance(answered)
        yield [
            {
                "completion": tokenizer.decode(row, skip_special_tokens=True),
                "tokens": len(row),
                "truncated": row[-1] != tokenizer.eos_token_id,
            }
            for row in batch
        ]
    if stage is None:
        bar.close()


def _generated(
    rollout: RolloutModel, encoded: Any, seed: int, generation_config: Any, width: int, rows: int
) -> list[list[int]]:
    """One batch's answers through the rollout engine's `generate`, seeded with `seed`."""
    import torch

    torch.manual_seed(seed)
    generated = rollout.generate(
        encoded["input_ids"], encoded["attention_mask"], generation_config, width=width, rows=rows
    )
    completions = generated[:, encoded["input_ids"].shape[1] :]
    return completions_until_eos(completions, [generation_config.eos_token_id])


def score_row(
    prompt_row: dict[str, Any], generation: dict[str, Any], database: str | None
) -> dict[str, Any]:
    """The reward of a generated answer (`completion`, and whether it was `truncated`), through
    the same code path as training's."""
    context = {key: prompt_row[key] for key in CONTEXT_KEYS}
    result = score(
        prompt_row["task"],
        completion_text(generation["completion"]),
        database=database,
        truncated=generation["truncated"],
        **context,
    )
    return {"total": result.total, "components": result.components}
