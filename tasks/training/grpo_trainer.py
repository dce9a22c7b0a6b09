"""GRPO's trainer: TRL's `GRPOTrainer` with every override the project makes of it, listed here.

Each override is a class whose methods call `super()`, so the trainer is a stack: the first
below is the outermost (its method runs first and wraps those under it), TRL's class the last.
2, 3 and 4 are left out where a recipe does not ask for them (no untrained task answered, the
plain rollout engine, no dynamic sampling).

1. `HeldoutSampling` (heldout.py), `evaluate`: the held-out eval samples at
   `training.heldout_temperature`, from draws the seed fixes.
2. `UntrainedHeldout` (untrained_tasks.py), `evaluate` and `log`: each eval also answers the
   tasks the run does not train, and their mean rewards go into the eval's log.
3. `FastRollouts` (rollout.py), `_generate_single_turn`: rollouts through
   `training.rollout_engine`.
4. `DynamicSamplingGRPOTrainer` (dynamic_sampling.py), `__init__` and
   `_generate_and_score_completions`: groups whose rewards all tie are dropped and the batch
   refilled (`training.dynamic_sampling`).
5. `GroupTiesGRPOTrainer` (dynamic_sampling.py), `_generate_and_score_completions` and
   `_get_train_sampler`: ties counted group by group; each pass over the train prompts in the
   order an uninterrupted run takes it.

The class is built when a run asks for it, not at import: Unsloth replaces TRL's trainer class
when it is imported.
"""

from __future__ import annotations

from configs.recipe import TrainingConfig
from tasks.generation.rollout import with_engine
from tasks.training.heldout import with_heldout_sampling
from tasks.training.untrained_tasks import UntrainedTasks, with_untrained_heldout


def grpo_trainer_class(
    training: TrainingConfig, untrained: UntrainedTasks | None, prompt_width: int, seed: int
) -> type:
    """The trainer class of a seed's run: the stack above, from TRL's class up."""
    from tasks.training import dynamic_sampling

    trainer_class: type = (
        dynamic_sampling.DynamicSamplingGRPOTrainer
        if training.dynamic_sampling.enabled
        else dynamic_sampling.GroupTiesGRPOTrainer
    )
    trainer_class = with_engine(trainer_class, training.rollout_engine, prompt_width)
    trainer_class = with_untrained_heldout(trainer_class, untrained)
    return with_heldout_sampling(trainer_class, training.heldout_temperature, seed)
