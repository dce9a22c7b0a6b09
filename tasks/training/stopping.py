"""When to stop GRPO, and which step was best: early stopping and the entropy-collapse guard.

A GRPO run can peak and then collapse (entropy falls, reward crashes), and without early stopping
the collapsed model ships (CHANGELOG.md, "The runs behind the training code"). Each periodic eval
reports the held-out reward and the policy's entropy; these rules keep the best step, stop after
`patience` evals without improvement, and stop when entropy stays below a fraction of its first
value for `entropy_evals` evals in a row. An eval whose held-out answers run to the token limit
more often than `max_truncated` is never best while one within it exists, and among evals beyond
it the one that cuts fewer answers is best: GRPO's rewards do not see an answer that goes on after
it is done, so a cut answer can score well.

Each eval is read into one record, `HeldoutEval`, and `GUARDS` holds it to the start's, one
measure a guard: an eval is never best (the start is, at worst) whose answers read the reviews'
stars worse than the start's did (heldout_readings.py) by more than `max_agreement_drop` (one
review of a handful is noise, a swing to one sentiment is not); that flags fewer of the problems
the held-out reviews state by more than `max_flagging_drop` (an issue flag turned off for every
review), or more of those they rule out by more than `max_ruled_out_rise` (a flag turned on for
every complaint); whose mean on one of the tasks it trains falls more than `max_task_drop` below
the start's, whatever the others gain; or whose mean on a task the run does not train does, by
more than `max_untrained_drop` (untrained_tasks.py). A new guard is one entry of `GUARDS` and one
tolerance field. The state round-trips through a dict, so it is saved with every checkpoint and
a resumed run decides exactly as an uninterrupted one.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
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


@dataclass(frozen=True)
class HeldoutEval:
    """What one periodic held-out eval measured, as the stop rules read it; None (or no entry)
    where it measured nothing of that kind: no review whose stars judge a sentiment, no stated
    problem, one task trained."""

    step: int
    reward: float
    entropy: float | None = None
    # The share of its answers cut at the token limit.
    truncated: float | None = None
    # How its sentiments read the stars (heldout_readings.balanced_agreement).
    agreement: float | None = None
    # Of the problems the held-out reviews state, the share its answers flag.
    stated_flagged: float | None = None
    # Of the problems the held-out reviews rule out, the share its answers flag (false alarms).
    ruled_out_flagged: float | None = None
    # Each trained task's mean reward, where the held-out prompts are of more than one.
    task_means: dict[str, float] = field(default_factory=dict)
    # Each untrained task's mean reward (untrained_tasks.py).
    untrained: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Breach:
    """A measure of an eval beyond what its start's allows: the step is not kept."""

    measure: str
    # What of the measure: a task, or "" for a measure of one value.
    key: str
    value: float
    start: float
    # The recipe setting whose tolerance it is beyond, and that tolerance.
    setting: str
    tolerance: float
    # A share, said as a percentage.
    percent: bool = False

    def words(self, step: int) -> str:
        value, start = (
            f"{100 * v:.0f}%" if self.percent else f"{v:.4f}" for v in (self.value, self.start)
        )
        return (
            f"step {step} is not kept: {self.measure} {value}, the start's {start}, beyond "
            f"training.{self.setting} ({self.tolerance:.2f})"
        )


@dataclass(frozen=True)
class Guard:
    """One measure of a held-out eval that keeps a step from being best, whatever its reward,
    when it moves from the start's the wrong way by more than a tolerance."""

    # How a log line names the measure of one key ("{}": the key, a task).
    measure: str
    # The recipe setting with its tolerance; the StopRules field that holds it.
    setting: str
    tolerance_field: str
    values: Callable[[HeldoutEval], dict[str, float | None]]
    # False: a rise is the wrong way (a false alarm).
    higher_is_better: bool = True
    # The measure is a share (of reviews, of problems), said as a percentage.
    percent: bool = False

    def breaches(self, rules: StopRules, start: HeldoutEval, held: HeldoutEval) -> list[Breach]:
        tolerance = getattr(rules, self.tolerance_field)
        if tolerance is None:
            return []
        before = self.values(start)
        found = []
        for key, value in self.values(held).items():
            first = before.get(key)
            if value is None or first is None:
                continue
            moved = first - value if self.higher_is_better else value - first
            if moved > tolerance + TOLERANCE_SLACK:
                found.append(
                    Breach(
                        self.measure.format(key),
                        key,
                        value,
                        first,
                        self.setting,
                        tolerance,
                        self.percent,
                    )
                )
        return found


GUARDS = (
    Guard(
        "its held-out sentiments agree with the stars",
        "max_star_agreement_drop",
        "max_agreement_drop",
        lambda held: {"": held.agreement},
        percent=True,
    ),
    Guard(
        "its held-out answers flag the problems the reviews state",
        "max_stated_flagging_drop",
        "max_flagging_drop",
        lambda held: {"": held.stated_flagged},
        percent=True,
    ),
    Guard(
        "its held-out answers flag the problems the reviews rule out",
        "max_ruled_out_flagging_rise",
        "max_ruled_out_rise",
        lambda held: {"": held.ruled_out_flagged},
        higher_is_better=False,
        percent=True,
    ),
    Guard(
        "it scores on {}, a task it trains,",
        "max_task_drop",
        "max_task_drop",
        lambda held: dict(held.task_means),
    ),
    Guard(
        "it scores on {}, a task it does not train,",
        "max_untrained_drop",
        "max_untrained_drop",
        lambda held: dict(held.untrained),
    ),
)


@dataclass
class StopRules:
    patience: int
    min_improvement: float = 0.0
    entropy_fraction: float | None = None
    entropy_evals: int = 2
    max_truncated: float | None = None
    max_agreement_drop: float = 0.0
    # None: that measure is not held to the start's.
    max_flagging_drop: float | None = None
    max_ruled_out_rise: float | None = None
    max_task_drop: float | None = None
    max_untrained_drop: float = 0.0
    best_reward: float = -math.inf
    # The best eval's share of answers cut beyond `max_truncated` (0 within it): lower wins first.
    best_cut: float = 0.0
    best_step: int | None = None
    # The first eval, the start, that the guards hold every later one to.
    start: HeldoutEval | None = None
    evals_since_best: int = 0
    entropy_start: float | None = None
    low_entropy_evals: int = 0
    # An eval that reported no entropy while the guard is on: Unsloth's GRPO computes none (its
    # log-prob pass returns `entropies = None`, TRL logs nan), and a nan start makes every
    # later comparison false, so the guard would never fire and never say so.
    entropy_unmeasured: bool = False
    stop_reason: str | None = None

    def observe(self, held: HeldoutEval) -> bool:
        """Record one eval; True when it is a new best."""
        if self.start is None:
            self.start = held
        within = (
            self.max_truncated is None
            or held.truncated is None
            or held.truncated <= self.max_truncated
        )
        cut = 0.0 if within else held.truncated
        improved = self.best_step is None or (
            not self.breaches(held)
            and (
                cut < self.best_cut
                or (cut == self.best_cut and held.reward > self.best_reward + self.min_improvement)
            )
        )
        if improved:
            self.best_reward, self.best_step, self.evals_since_best = held.reward, held.step, 0
            self.best_cut = cut
        else:
            self.evals_since_best += 1
            if self.evals_since_best >= self.patience:
                self.stop_reason = (
                    f"early stopping: no eval-reward gain over {self.best_reward:.4f} "
                    f"(step {self.best_step}) in {self.patience} evals"
                )
        if self.entropy_fraction is not None:
            if held.entropy is None or math.isnan(held.entropy):
                self.entropy_unmeasured = True
            else:
                self._watch_entropy(held.entropy)
        return improved

    def breaches(self, held: HeldoutEval) -> list[Breach]:
        """Each measure of `held` beyond its tolerance of the start's (none before a start)."""
        start = self.start if self.start is not None else held
        return [breach for guard in GUARDS for breach in guard.breaches(self, start, held)]

    def outcome(self) -> str:
        """Why the run stopped, and whether the entropy guard could have stopped it."""
        reason = self.stop_reason or "max_steps reached"
        if self.entropy_unmeasured:
            reason += f"; {ENTROPY_UNMEASURED}"
        return reason

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
        best, start = state.get("best_reward"), state.get("start")
        return cls(
            **{
                **state,
                "best_reward": -math.inf if best is None else best,
                "start": None if start is None else HeldoutEval(**start),
            }
        )
