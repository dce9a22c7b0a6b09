"""Is the production model still answering as well as when it was judged? And if not, retrain.

Every analysed answer goes through the checks a reader would make (tasks/production/checks.py):
the mean reward against the recipe's floor and a one-sided drop test against the model's own
eval-split rewards, as before, and the parse rate, the truncated share, agreement with the stars
and collapse, against the recipe's limits and the same model's numbers on its eval split. Any
failed check makes a drift; the decision, with every check, is a file in the store and a Prefect
artifact, and a drift starts the scheduled-retraining deployment, once per drift.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from typing import Any

from prefect.artifacts import create_markdown_artifact

from configs.recipe import MonitoringConfig
from tasks.core.store import ArtifactStore
from tasks.evaluation.champion import timestamp
from tasks.production.checks import (
    FAIL,
    NOT_MEASURED,
    PASS,
    Answer,
    checks_markdown,
    run_checks,
)

HEALTHY, DRIFT = "healthy", "drift"
DECISIONS = "monitoring/decisions"
LATEST = "monitoring/latest.json"


def drift_decision(
    answers: list[Answer],
    reference: list[Answer] | None,
    config: MonitoringConfig,
    alpha: float,
) -> dict[str, Any]:
    """Healthy, or drift with the failed checks' reasons; every check listed either way."""
    checks = [check._asdict() for check in run_checks(answers, reference, config, alpha)]
    failed = [check for check in checks if check["verdict"] == FAIL]
    verdicts = Counter(check["verdict"] for check in checks)
    reason = "; ".join(f"{check['label']}: {check['reason']}" for check in failed) or (
        f"no check failed ({verdicts[PASS]} passed, {verdicts[NOT_MEASURED]} not measured)"
    )
    return {
        "status": DRIFT if failed else HEALTHY,
        "reason": reason,
        "reviews": len(answers),
        "reference_prompts": len(reference or []),
        "checks": checks,
    }


def decision_markdown(decision: dict[str, Any]) -> str:
    return (
        f"**Monitoring: {decision['status']}** ({decision['reviews']} answers; the model's eval "
        f"split: {decision['reference_prompts'] or 'not known'} extraction prompts)\n\n"
        f"{decision['reason']}\n\n{checks_markdown(decision['checks'])}"
    )


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
        f"# Production monitoring: {decision['status']}",
        "",
        f"- Model: {decision.get('model', 'n/a')}",
        f"- Retraining: {decision.get('retraining') or 'not started'}",
        f"- Record: `{uri}`",
        "",
        decision_markdown(decision),
    ]
    create_markdown_artifact(
        key="tucano-monitoring",
        markdown="\n".join(lines),
        description=f"Production monitoring: {decision['status']}.",
    )
    return uri
