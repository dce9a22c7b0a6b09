"""Are production rewards still what the champion earned when it was promoted?

The reference is the model's own extraction rewards on the eval split of the data it was judged
on. Production reviews are other reviews, so the two samples are independent: a one-sided
Mann-Whitney rank-sum test (not the paired Wilcoxon of the comparison) asks whether production
rewards are stochastically lower. The recipe's floor catches a low level the test might not call
significant. Either makes a drift; the decision is a file in the store and a Prefect artifact, and
a drift starts the scheduled-retraining deployment, once per drift.
"""

from __future__ import annotations

import hashlib
import statistics
from typing import Any

from prefect.artifacts import create_markdown_artifact

from configs.recipe import MonitoringConfig
from tasks.core.store import ArtifactStore
from tasks.evaluation.champion import timestamp
from tasks.evaluation.report import fmt

HEALTHY, DRIFT = "healthy", "drift"
DECISIONS = "monitoring/decisions"
LATEST = "monitoring/latest.json"


def drift_decision(
    rewards: list[float], reference: list[float], config: MonitoringConfig, alpha: float
) -> dict[str, Any]:
    from scipy.stats import mannwhitneyu

    mean = statistics.fmean(rewards)
    reference_mean = statistics.fmean(reference) if reference else None
    reasons = []
    if mean < config.floor:
        reasons.append(f"mean reward {mean:.3f} is below the floor {config.floor:.2f}")
    p_drop = None
    if config.drop_test and reference:
        p_drop = float(mannwhitneyu(rewards, reference, alternative="less").pvalue)
        if p_drop < alpha:
            reasons.append(
                f"rewards are significantly lower than on the eval split ({mean:.3f} vs "
                f"{reference_mean:.3f}, one-sided Mann-Whitney p = {fmt(p_drop, 4)} < {alpha})"
            )
    return {
        "status": DRIFT if reasons else HEALTHY,
        "reason": "; ".join(reasons)
        or f"mean reward {mean:.3f} at or above the floor {config.floor:.2f}, no significant drop",
        "mean_reward": mean,
        "reviews": len(rewards),
        "reference_mean": reference_mean,
        "reference_prompts": len(reference),
        "floor": config.floor,
        "alpha": alpha,
        "p_drop": p_drop,
    }


def drift_key(model_label: str, review_ids: list[str]) -> str:
    """One drift: this model on these reviews. A rerun of the same analysis is the same drift
    and starts no second retraining (the key is the flow run's idempotency key)."""
    identity = "\n".join([model_label, *sorted(review_ids)])
    return f"tucano-drift-{hashlib.sha256(identity.encode()).hexdigest()[:24]}"


def start_retraining(deployment: str, key: str, overrides: dict[str, str]) -> str:
    """Starts `deployment` (flow/deployment) with its own parameters updated by `overrides` (the
    recipe and store, and the training data when known), and says what happened: a drift without
    a retraining it can start is still recorded, with the reason."""
    from prefect.client.orchestration import get_client
    from prefect.deployments import run_deployment
    from prefect.exceptions import ObjectNotFound
    from prefect.settings import PREFECT_API_URL

    if not PREFECT_API_URL.value():
        return "not started: no Prefect API configured (PREFECT_API_URL)"
    try:
        with get_client(sync_client=True) as client:
            parameters = client.read_deployment_by_name(deployment).parameters or {}
    except ObjectNotFound:
        return f"not started: no deployment {deployment} on {PREFECT_API_URL.value()}"
    run = {**parameters.get("run", {}), **overrides}
    started = run_deployment(
        deployment,
        parameters={"run": run},
        timeout=0,
        as_subflow=False,
        idempotency_key=key,
        tags=["tucano", "drift"],
    )
    return f"flow run {started.id} of {deployment}"


def record_monitoring(decision: dict[str, Any], store: ArtifactStore) -> str:
    decision = {"decided_at": timestamp(), **decision}
    uri = store.write_json(f"{DECISIONS}/{decision['decided_at']}.json", decision)
    store.write_json(LATEST, decision)
    lines = [
        f"# Reward monitoring: {decision['status']}",
        "",
        f"- Reason: {decision['reason']}",
        f"- Model: {decision.get('model', 'n/a')}",
        f"- Reviews analysed: {decision['reviews']}, mean reward {decision['mean_reward']:.3f}",
        f"- Reference (eval split): {decision['reference_prompts']} prompts, mean "
        f"{fmt(decision['reference_mean'], 3)}",
        f"- Retraining: {decision.get('retraining') or 'not started'}",
        f"- Record: `{uri}`",
    ]
    create_markdown_artifact(
        key="tucano-monitoring",
        markdown="\n".join(lines) + "\n",
        description=f"Reward monitoring: {decision['status']}.",
    )
    return uri
