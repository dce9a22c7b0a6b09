"""GRPO's own callbacks: its line per step (rewards, entropy, the held-out readings), the dynamic
task weights applied to TRL's reward functions, and the stop rules applied after each held-out
eval, which export a new best adapter and stop the run. The stateful ones write their state into
every checkpoint and read it back on resume, so a resumed run behaves exactly like an
uninterrupted one.
"""

from __future__ import annotations

import json
import logging
import tempfile
from pathlib import Path
from typing import Any

import torch
from transformers import TrainerCallback

from rewards import SCORERS, RewardFunction
from tasks.core.store import ArtifactStore
from tasks.training.checkpoint_callbacks import checkpoint_dir, saved_state
from tasks.training.checkpoints import RunCheckpoints
from tasks.training.heldout_readings import (
    agreement_words,
    balanced_agreement,
    ruled_out_flagged_share,
    stated_flagged_share,
    task_means,
    task_rewards_words,
)
from tasks.training.stopping import (
    ENTROPY_UNMEASURED,
    HELDOUT_TRUNCATED,
    HeldoutEval,
    StopRules,
)
from tasks.training.task_weighting import TaskWeighting
from tasks.training.untrained_tasks import untrained_scores

log = logging.getLogger("tucano.train")

TASK_WEIGHTING_FILE = "task_weighting.json"
STOP_RULES_FILE = "stop_rules.json"
BEST_FOLDER, BEST_RECORD = "best", "best.json"


class LogSteps(TrainerCallback):
    """One line per logging step with what tells a healthy GRPO run from a dead one."""

    def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **_: Any) -> None:
        if logs and "reward" in logs:
            log.info(
                "step %d/%d reward %.3f (std %.3f) frac_reward_zero_std %.2f entropy %.3f "
                "clip_high %.3f lr %.2e%s",
                state.global_step,
                state.max_steps,
                logs["reward"],
                logs.get("reward_std", float("nan")),
                logs.get("frac_reward_zero_std", float("nan")),
                logs.get("entropy", float("nan")),
                logs.get("clip_ratio/high_mean", float("nan")),
                logs.get("learning_rate", float("nan")),
                agreement_words(logs, prefix=""),
            )
        if logs and "eval_reward" in logs:
            log.info(
                "eval at step %d: held-out reward %.4f%s, entropy %.3f%s",
                state.global_step,
                logs["eval_reward"],
                task_rewards_words(logs),
                logs.get("eval_entropy", float("nan")),
                agreement_words(logs),
            )


def heldout_eval(step: int, logs: dict[str, Any]) -> HeldoutEval:
    """The stop rules' record of the held-out eval an eval log carries."""
    return HeldoutEval(
        step=step,
        reward=logs["eval_reward"],
        entropy=logs.get("eval_entropy"),
        truncated=logs.get(HELDOUT_TRUNCATED),
        agreement=balanced_agreement(logs),
        stated_flagged=stated_flagged_share(logs),
        ruled_out_flagged=ruled_out_flagged_share(logs),
        task_means=task_means(logs),
        untrained=untrained_scores(logs) or {},
    )


class ApplyTaskWeights(TrainerCallback):
    """Each logging step: feed the tasks' mean rewards to IWU and reweight TRL's reward
    functions; each checkpoint: save IWU's state beside the model's."""

    def __init__(
        self, weighting: TaskWeighting, functions: list[RewardFunction], resume: Path | None
    ):
        saved = saved_state(resume, TASK_WEIGHTING_FILE)
        self.weighting = TaskWeighting.from_state_dict(saved) if saved else weighting
        self.functions = functions
        self.trainer: Any = None

    def attach(self, trainer: Any) -> None:
        self.trainer = trainer
        self._apply()

    def _apply(self) -> None:
        multipliers = self.weighting.multipliers()
        self.trainer.reward_weights = torch.tensor(
            [multipliers[fn.task] for fn in self.functions], dtype=torch.float32
        )

    def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **_: Any) -> None:
        means: dict[str, float] = {}
        for fn in self.functions:
            value = (logs or {}).get(f"rewards/{fn.__name__}/mean")
            if value is not None:
                means[fn.task] = means.get(fn.task, 0.0) + value
        if not means:
            return
        self.weighting.update(means)
        self._apply()
        log.info("task weights %s", {t: round(w, 3) for t, w in self.weighting.weights.items()})

    def on_save(self, args: Any, state: Any, control: Any, **_: Any) -> None:
        state_file = checkpoint_dir(args, state) / TASK_WEIGHTING_FILE
        state_file.write_text(json.dumps(self.weighting.state_dict()))


class KeepBest(TrainerCallback):
    """After each periodic eval: export a new best adapter to the store (protected from pruning)
    and stop when the stop rules say so."""

    def __init__(
        self,
        rules: StopRules,
        checkpoints: RunCheckpoints,
        store: ArtifactStore,
        folder: str,
        resume: Path | None,
    ):
        saved = saved_state(resume, STOP_RULES_FILE)
        self.rules = StopRules.from_state_dict(saved) if saved else rules
        self.checkpoints, self.store, self.folder = checkpoints, store, folder
        if self.rules.best_step is not None:
            checkpoints.protected = {self.rules.best_step}

    def on_log(
        self, args: Any, state: Any, control: Any, logs: Any = None, model: Any = None, **_: Any
    ) -> None:
        if not logs or logs.get("eval_reward") is None:
            return
        held = heldout_eval(state.global_step, logs)
        for breach in self.rules.breaches(held):
            log.warning(breach.words(held.step))
        blind = self.rules.entropy_unmeasured
        improved = self.rules.observe(held)
        if self.rules.entropy_unmeasured and not blind:
            log.warning("step %d: %s", held.step, ENTROPY_UNMEASURED)
        if improved:
            with tempfile.TemporaryDirectory(prefix="tucano-best-") as tmp:
                model.save_pretrained(tmp)
                self.store.put_dir(tmp, f"{self.folder}/{BEST_FOLDER}")
            self.store.write_json(
                f"{self.folder}/{BEST_RECORD}",
                {
                    "step": held.step,
                    "eval_reward": held.reward,
                    "star_agreement": held.agreement,
                    "stated_flagged": held.stated_flagged,
                    "ruled_out_flagged": held.ruled_out_flagged,
                    "task_means": held.task_means,
                    "untrained": held.untrained or None,
                },
            )
            self.checkpoints.protected = {held.step}
            log.info("new best adapter at step %d (held-out reward %.4f)", held.step, held.reward)
        if self.rules.stop_reason:
            log.warning("stopping at step %d: %s", held.step, self.rules.stop_reason)
            control.should_training_stop = True

    def on_save(self, args: Any, state: Any, control: Any, **_: Any) -> None:
        state_file = checkpoint_dir(args, state) / STOP_RULES_FILE
        state_file.write_text(json.dumps(self.rules.state_dict()))


def task_weighting(
    config: Any, functions: list[RewardFunction], resume: Path | None
) -> ApplyTaskWeights:
    fresh = TaskWeighting(tuple(SCORERS), config.eta, config.window, config.min_weight)
    return ApplyTaskWeights(fresh, functions, resume)
