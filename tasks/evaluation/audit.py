"""Step 2: the reward audit gate. If the rewards disagree with people, nothing is trained.

Three checks. (1) Rank agreement: per task, Spearman's rho between the reward and human scores on
the shipped audit set (data/audit/audit.jsonl) must reach the recipe's threshold. (2) Pairs: two
answers to one input that a person orders (data/audit/pairs.jsonl: a constant judgement and a
right one, a looping answer and the same answer ended, ...) must be ordered the same way by the
reward, in at least the recipe's share of pairs. (3) Probes (tasks/evaluation/probes.py): one small
case per bug class the V4.2 reports hit, and per way a reward can pay for shape instead of
substance, each asserting the reward's behaviour directly; a probe that raises is broken.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sqlite3
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from prefect import task
from prefect.artifacts import create_table_artifact
from prefect.cache_policies import NO_CACHE

from configs.recipe import AuditConfig
from rewards import SCORERS, TASKS, score
from tasks.core.caching import PROJECT_ROOT, files_digest, identity_key, task_code_digest
from tasks.core.manifests import AuditResult
from tasks.core.store import ArtifactStore
from tasks.evaluation.probes import run_probes
from tasks.evaluation.score_logs import CACHE_DIR, SHIPPED_DATA, shipped_database

AUDIT_SET = PROJECT_ROOT / "data" / "audit" / "audit.jsonl"
AUDIT_PAIRS = PROJECT_ROOT / "data" / "audit" / "pairs.jsonl"
WORST_SHOWN = 3
# Passing audits, one file per key (`audit_key`), shared by every run, store and Prefect home of
# the machine: an audit scores ~700 answers and runs 53 probes, about 2 s of CPU, and gives the
# same result until something it reads changes.
KEPT_AUDITS = CACHE_DIR / "audits"

log = logging.getLogger(__name__)


class AuditFailed(RuntimeError):
    """The rewards disagree with the human scores or a probe failed: do not train."""


def _numbered_lines(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if line.strip():
            yield number, json.loads(line)


def load_audit_set(path: Path = AUDIT_SET) -> list[dict[str, Any]]:
    rows = []
    for number, row in _numbered_lines(path):
        if row.get("task") not in TASKS or not 0 <= row.get("human_score", -1) <= 1:
            raise ValueError(f"{path}:{number}: needs a known task and a human_score in [0, 1]")
        rows.append(row)
    return rows


def load_pairs(path: Path = AUDIT_PAIRS) -> list[dict[str, Any]]:
    pairs = []
    for number, pair in _numbered_lines(path):
        sides = (pair.get("better"), pair.get("worse"))
        if pair.get("task") not in TASKS or not all(
            isinstance(side, dict) and isinstance(side.get("completion"), str) for side in sides
        ):
            raise ValueError(f"{path}:{number}: needs a known task and a better and a worse answer")
        pairs.append(pair)
    return pairs


def _scored(row: dict[str, Any], answer: dict[str, Any], database: str) -> float:
    return score(
        row["task"],
        answer["completion"],
        database=database,
        truncated=answer.get("truncated"),
        **row["context"],
    ).total


def pair_agreement(config: AuditConfig, database: str, path: Path = AUDIT_PAIRS) -> dict[str, Any]:
    """The share of pairs the rewards order as a person does (a tie is no agreement)."""
    pairs = load_pairs(path)
    agree = {
        pair["id"]: _scored(pair, pair["better"], database) > _scored(pair, pair["worse"], database)
        for pair in pairs
    }
    share = sum(agree.values()) / len(agree)
    by_task = {
        task: f"{sum(agree[p['id']] for p in pairs if p['task'] == task)}/"
        f"{sum(p['task'] == task for p in pairs)}"
        for task in TASKS
    }
    return {
        "n": len(pairs),
        "agreement": share,
        "by_task": ", ".join(f"{task} {count}" for task, count in by_task.items()),
        "passed": share >= config.min_pair_agreement,
        "worst": "; ".join(pair_id for pair_id, agreed in agree.items() if not agreed),
    }


def audit_rewards(
    config: AuditConfig,
    database: str,
    audit_set: Path = AUDIT_SET,
    pairs: Path = AUDIT_PAIRS,
) -> AuditResult:
    """Score the audit set and the pairs (SQL runs against `database`) and run the probes."""
    # Here, not at the top: every command imports this module, and scipy.stats takes as long to
    # import as the rest of it.
    from scipy.stats import spearmanr

    rows = load_audit_set(audit_set)
    per_task: dict[str, dict[str, Any]] = {}
    for task_name in TASKS:
        items = [row for row in rows if row["task"] == task_name]
        rewards = [_scored(row, row, database) for row in items]
        humans = [row["human_score"] for row in items]
        rho, p_value = spearmanr(rewards, humans)
        worst = sorted(
            zip(items, rewards, strict=True),
            key=lambda pair: -abs(pair[1] - pair[0]["human_score"]),
        )[:WORST_SHOWN]
        per_task[task_name] = {
            "n": len(items),
            "rho": float(rho),
            "p_value": float(p_value),
            "passed": bool(rho >= config.min_spearman),
            "worst": "; ".join(
                f"{item['id']}: reward {reward:.2f} vs human {item['human_score']:.2f}"
                for item, reward in worst
            ),
        }
    per_task["pairs"] = pair_agreement(config, database, pairs)
    per_task.update(run_probes(database))
    passed = all(entry["passed"] for entry in per_task.values())
    digest = hashlib.sha256(json.dumps(per_task, sort_keys=True).encode()).hexdigest()
    return AuditResult(fingerprint=digest, passed=passed, per_task=per_task)


def failure_message(result: AuditResult, config: AuditConfig) -> str:
    reasons = []
    for name, entry in result.per_task.items():
        if entry["passed"]:
            continue
        if name.startswith("probe:"):
            state = "is broken" if entry.get("broken") else "failed"
            reasons.append(f"probe {name[6:]} {state} ({entry['why']})")
        elif name == "pairs":
            reasons.append(
                f"pairs: the rewards order {entry['agreement']:.0%} of {entry['n']} pairs as a "
                f"person does < {config.min_pair_agreement:.0%} (not: {entry['worst']})"
            )
        else:
            reasons.append(
                f"{name}: Spearman rho {entry['rho']:.3f} < {config.min_spearman} "
                f"(worst: {entry['worst']})"
            )
    return "reward audit failed, nothing will be trained: " + " | ".join(reasons)


def audit_key(config: AuditConfig) -> str:
    """Everything an audit's result depends on: the code it runs (this module and every project
    module it imports: the rewards, the probes, the database build), the scorer registered per
    task (one swapped in at run time is other code than the files say), the audit set, the pairs
    and the shipped tables, the gate's thresholds, and the interpreter, SQLite and every installed
    distribution's version (the rewards parse with json_repair, rank with scipy)."""
    return identity_key(
        {
            "code": task_code_digest(__name__),
            "scorers": {name: f"{fn.__module__}:{fn.__qualname__}" for name, fn in SCORERS.items()},
            "files": files_digest((AUDIT_SET, AUDIT_PAIRS, *sorted(SHIPPED_DATA.glob("*.csv")))),
            "config": config.model_dump(mode="json"),
            "python": sys.version,
            "sqlite": sqlite3.sqlite_version,
            "installed": installed_distributions(),
        }
    )


def installed_distributions() -> list[str]:
    """The distributions this interpreter imports from, as their metadata folders are named
    (name and version): a listing takes half a millisecond, where importlib.metadata, reading
    every METADATA file, takes 150 ms, and every flow run's gate asks."""
    return sorted(
        {
            name
            for folder in map(Path, sys.path)
            if folder.is_dir()
            for name in os.listdir(folder)
            if name.endswith((".dist-info", ".egg-info"))
        }
    )


def kept_audit(config: AuditConfig, kept: Path = KEPT_AUDITS) -> AuditResult:
    """The audit's result, from `kept` when one passed with the same key. Only a pass is kept:
    a failing audit is scored again each time, so a failure never outlives its cause (a probe's
    SQL stopped by its time budget on a loaded machine, say)."""
    cache = ArtifactStore(kept)
    name = f"{audit_key(config)}.json"
    try:
        result = AuditResult.model_validate_json(cache.read_text(name))
    except FileNotFoundError:
        pass
    except (OSError, ValueError) as exc:
        log.warning("%s is no audit result (%s): scoring the audit again", cache.uri(name), exc)
    else:
        log.info("Reward audit: nothing it reads changed since it passed (%s)", cache.uri(name))
        return result
    result = audit_rewards(config, str(shipped_database()))
    if result.passed:
        try:
            cache.write_text(name, result.model_dump_json())
        except OSError as exc:  # a read-only home, a full disk: the next run scores it again
            log.warning("the passing audit could not be kept in %s (%s)", cache.uri(name), exc)
    return result


def audit_gate(config: AuditConfig) -> AuditResult:
    """Audit (`kept_audit`), publish the table, and raise AuditFailed when the gate does not
    pass. The SQL lines run against the shipped Olist database, on which the numbers their human
    scores judge were checked, whatever data the run trains on."""
    result = kept_audit(config)
    create_table_artifact(
        key="tucano-reward-audit",
        table=[{"check": name, **entry} for name, entry in result.per_task.items()],
        description=f"Reward audit (Spearman rho >= {config.min_spearman} per task, pairs "
        f"ordered as people do >= {config.min_pair_agreement:.0%}, probes).",
    )
    if not result.passed:
        raise AuditFailed(failure_message(result, config))
    return result


# Not cached by Prefect: a cached task run publishes no table, and each run's page should show
# the audit its gate judged by. `kept_audit` makes a run with nothing changed as fast.
audit_gate_task = task(audit_gate, name="reward-audit", cache_policy=NO_CACHE)
