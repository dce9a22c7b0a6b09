"""When to stop GRPO, and which step was best: early stopping and the entropy-collapse guard.

The seed's V4.2 run peaked at step 1,100 and collapsed by 1,500 (entropy fell, reward crashed):
without early stopping the post-collapse model would have shipped. Each periodic eval reports the
held-out reward and the policy's entropy; these rules keep the best step, stop after `patience`
evals without improvement, and stop when entropy stays below a fraction of its first value for
`entropy_evals` evals in a row. An eval whose held-out answers run to the token limit more often
than `max_truncated` is never best while one within it exists, and among evals beyond it the one
that cuts fewer answers is best: GRPO's rewards do not see an answer that goes on after it is done,
and such an adapter scored well (seed 1 of cpu_tiny: every SQL answer cut at the limit,
CHANGELOG.md; SmolLM2 after 20 steps at 5e-4: held-out reward up from 0.30 to 0.49 while
its cut share rose from 1 of 8 to 7 of 8, which a start just beyond the limit must not let through).
An eval whose answers read the reviews' stars worse than the start's did (reading_counts.py), by
more than `max_agreement_drop` (one review of a handful is noise, a swing to one sentiment is not),
is never best: the start is, at worst. So is one that flags fewer of the problems the held-out
reviews state than the start did, by more than `max_flagging_drop` (an issue flag turned off for
every review), and one that makes a task the run does not train
worse than the start did, by more than `max_untrained_drop` (untrained.py). The state
round-trips through a dict, so it is saved with every checkpoint and a resumed run decides
exactly as an uninterrupted one.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

# TRL's log key for the share of held-out answers cut at max_completion_length.
HELDOUT_TRUNCATED = "eval_completions/clipped_ratio"
ENTROPY_UNMEASURED = (
    "entropy guard blind: the held-out evals reported no entropy (Unsloth computes none), so no "
    "entropy collapse could stop this run"
)
# A drop of exactly the tolerance (an agreement 100% -> 90%, a mean reward by max_untrained_drop)
# is within it, whatever the float rounding of the two values.
TOLERANCE_SLACK = 1e-9


@dataclass
class StopRules:
    patience: int
    min_improvement: float = 0.0
    entropy_fraction: float | None = None
    entropy_evals: int = 2
    max_truncated: float | None = None
    max_agreement_drop: float = 0.0
    # None: the stated problems' flags are not held to the start's.
    max_flagging_drop: float | None = None
    max_untrained_drop: float = 0.0
    best_reward: float = -math.inf
    # The best eval's share of answers cut beyond `max_truncated` (0 within it): lower wins first.
    best_cut: float = 0.0
    best_step: int | None = None
    # The first eval's (the start's) agreement of the sentiment with the stars.
    start_agreement: float | None = None
    # The start's share of the problems the held-out reviews state that its answers flag.
    start_flagging: float | None = None
    # The start's mean reward on each task the run does not train.
    start_untrained: dict[str, float] | None = None
    evals_since_best: int = 0
    entropy_start: float | None = None
    low_entropy_evals: int = 0
    # An eval that reported no entropy while the guard is on: Unsloth's GRPO computes none (its
    # log-prob pass returns `entropies = None`, TRL logs nan), and a nan start makes every
    # later comparison false, so the guard would never fire and never say so.
    entropy_unmeasured: bool = False
    stop_reason: str | None = None

    def observe(
        self,
        step: int,
        reward: float,
        entropy: float | None,
        truncated: float | None = None,
        agreement: float | None = None,
        untrained: dict[str, float] | None = None,
        flagging: float | None = None,
    ) -> bool:
        """Record one eval (`truncated`: the share of its answers cut at the token limit;
        `agreement`: how its sentiments read the stars; `untrained`: its mean reward on each task
        the run does not train; `flagging`: the share of the stated problems its answers flag);
        True when it is a new best."""
        if self.best_step is None:
            self.start_agreement, self.start_untrained = agreement, untrained
            self.start_flagging = flagging
        within = self.max_truncated is None or truncated is None or truncated <= self.max_truncated
        cut = 0.0 if within else truncated
        improved = self.best_step is None or (
            self.reads_stars(agreement)
            and self.flags_problems(flagging)
            and not self.worse_untrained(untrained)
            and (
                cut < self.best_cut
                or (cut == self.best_cut and reward > self.best_reward + self.min_improvement)
            )
        )
        if improved:
            self.best_reward, self.best_step, self.evals_since_best = reward, step, 0
            self.best_cut = cut
        else:
            self.evals_since_best += 1
            if self.evals_since_best >= self.patience:
                self.stop_reason = (
                    f"early stopping: no eval-reward gain over {self.best_reward:.4f} "
                    f"(step {self.best_step}) in {self.patience} evals"
                )
        if self.entropy_fraction is not None:
            if entropy is None or math.isnan(entropy):
                self.entropy_unmeasured = True
            else:
                self._watch_entropy(entropy)
        return improved

    def outcome(self) -> str:
        """Why the run stopped, and whether the entropy guard could have stopped it."""
        reason = self.stop_reason or "max_steps reached"
        if self.entropy_unmeasured:
            reason += f"; {ENTROPY_UNMEASURED}"
        return reason

    def reads_stars(self, agreement: float | None) -> bool:
        """Whether an eval's sentiments agree with the stars as often as the start's, give or
        take `max_agreement_drop`."""
        return (
            agreement is None
            or self.start_agreement is None
            or agreement >= self.start_agreement - self.max_agreement_drop - TOLERANCE_SLACK
        )

    def flags_problems(self, flagging: float | None) -> bool:
        """Whether an eval flags the problems the reviews state as often as the start's, give or
        take `max_flagging_drop`."""
        return (
            self.max_flagging_drop is None
            or flagging is None
            or self.start_flagging is None
            or flagging >= self.start_flagging - self.max_flagging_drop - TOLERANCE_SLACK
        )

    def worse_untrained(self, untrained: dict[str, float] | None) -> dict[str, float]:
        """The untrained tasks on which an eval scores more than `max_untrained_drop` below the
        start, with their scores."""
        start = self.start_untrained or {}
        return {
            task: score
            for task, score in (untrained or {}).items()
            if task in start and score < start[task] - self.max_untrained_drop - TOLERANCE_SLACK
        }

    def _watch_entropy(self, entropy: float) -> None:
        if self.entropy_start is None:
            self.entropy_start = entropy
            return
        floor = self.entropy_fraction * self.entropy_start
        self.low_entropy_evals = self.low_entropy_evals + 1 if entropy < floor else 0
        if self.low_entropy_evals >= self.entropy_evals:
            self.stop_reason = (
                f"entropy collapse: {entropy:.4f} < {self.entropy_fraction} x start "
                f"{self.entropy_start:.4f} for {self.entropy_evals} evals"
            )

    def state_dict(self) -> dict[str, Any]:
        state = asdict(self)
        state["best_reward"] = None if math.isinf(self.best_reward) else self.best_reward
        return state

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> StopRules:
        best = state.get("best_reward")
        return cls(**{**state, "best_reward": -math.inf if best is None else best})
