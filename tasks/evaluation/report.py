"""Step 6: report.json (every number), report.md (for people) and scores.jsonl (every sample),
written to the artifact store and published as Prefect artifacts."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path
from typing import Any

import fsspec
from prefect import task
from prefect.artifacts import (
    create_link_artifact,
    create_markdown_artifact,
    create_table_artifact,
)

from configs.recipe import CompareConfig, Recipe
from rewards import TASKS
from tasks.core.caching import PROJECT_ROOT, ContentKey, cache_token
from tasks.core.manifests import (
    SFT_SOURCE,
    Adapter,
    BaseModelArtifact,
    EvalRows,
    PreparedData,
    ReportArtifact,
)
from tasks.core.store import ArtifactStore
from tasks.evaluation import claim_truth, field_agreement, plots
from tasks.evaluation.eval_summary import (
    generation_summary,
    last_user_message,
    render_generation_summary,
    render_sentiment_by_stars,
    render_worst_regressions,
    sentiment_by_stars,
    worst_regressions,
)
from tasks.evaluation.leakage import assert_no_overlap
from tasks.evaluation.stats import (
    OVERALL,
    AcrossSeeds,
    Comparison,
    PairedTest,
    compare,
    compare_rows,
    seed_average,
)
from tasks.training.stopping import HELDOUT_TRUNCATED

# The models the report shows, named as docs/glossary.md defines them.
BASE_MODEL, SFT_MODEL = "base model", "SFT model"


def start_label(source: str) -> str:
    """The name of the model GRPO started from, by its BaseModelArtifact's source."""
    return SFT_MODEL if source == SFT_SOURCE else BASE_MODEL


def git_commit() -> str | None:
    try:
        return subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=PROJECT_ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def fmt(value: float | None, digits: int = 3, signed: bool = False) -> str:
    """A number for a report table; n/a where a statistic was not computed."""
    if value is None:
        return "n/a"
    return f"{value:+.{digits}f}" if signed else f"{value:.{digits}f}"


def _change(result: PairedTest) -> str:
    """Holm-significant direction of one comparison."""
    if result.significantly_better:
        return "better"
    return "worse" if result.significantly_worse else "none"


def results_table(results: dict[str, PairedTest]) -> list[dict[str, Any]]:
    return [
        {
            "task": task_name,
            "n": r.n,
            "start": round(r.start_mean, 4),
            "tuned": round(r.tuned_mean, 4),
            "delta": round(r.delta, 4),
            "delta_pct": None if r.delta_pct is None else round(r.delta_pct, 1),
            "W": r.statistic,
            "p_value": None if r.p_better is None else round(r.p_better, 5),
            "p_holm": None if r.p_better_holm is None else round(r.p_better_holm, 5),
            "effect_size": round(r.effect_size, 3),
            "ci95": f"[{r.ci_low:+.3f}, {r.ci_high:+.3f}]",
            "p_worse_holm": None if r.p_worse_holm is None else round(r.p_worse_holm, 5),
            "change": _change(r),
        }
        for task_name, r in results.items()
    ]


def _markdown_table(results: dict[str, PairedTest]) -> str:
    lines = [
        "| Task | n | Start | Tuned | Δ | 95% CI of Δ | Δ% | r | W | p | p (Holm) "
        "| p worse (Holm) | Significant change |",
        "|---|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for task_name in (*TASKS, OVERALL):
        if task_name not in results:
            continue
        r = results[task_name]
        name = f"**{task_name.upper()}**" if task_name == OVERALL else task_name
        pct = "n/a" if r.delta_pct is None else f"{r.delta_pct:+.1f}%"
        lines.append(
            f"| {name} | {r.n} | {fmt(r.start_mean)} | {fmt(r.tuned_mean)} | "
            f"{fmt(r.delta, signed=True)} | [{r.ci_low:+.3f}, {r.ci_high:+.3f}] | "
            f"{pct} | {r.effect_size:+.2f} | {r.statistic:.1f} | {fmt(r.p_better, 4)} | "
            f"{fmt(r.p_better_holm, 4)} | {fmt(r.p_worse_holm, 4)} | {_change(r)} |"
        )
    notes = [f"- {task}: {r.note}" for task, r in results.items() if r.note]
    return "\n".join(lines + (["", *notes] if notes else []))


def _seeds_table(summary: dict[str, AcrossSeeds]) -> str:
    lines = [
        "| Task | Δ mean ± std over seeds | seeds significantly better | seeds significantly "
        "worse | verdict |",
        "|---|---|---:|---:|---|",
    ]
    for task_name, s in summary.items():
        lines.append(
            f"| {task_name} | {s.delta_mean:+.3f} ± {s.delta_std:.3f} | "
            f"{s.seeds_significantly_better} of {s.seeds} (need {s.majority_needed}) | "
            f"{s.seeds_significantly_worse} of {s.seeds} | {s.verdict} |"
        )
    return "\n".join(lines)


def _verdict_sections(comparison: Comparison, pooled_title: str) -> list[str]:
    return [
        "## Verdict across seeds",
        "",
        _seeds_table(comparison.across_seeds),
        "",
        f"## {pooled_title}",
        "",
        _markdown_table(comparison.pooled),
        "",
    ]


FIELDS_TITLE = "Extraction: each field against the review's reading"
CLAIMS_TITLE = "Insights: what the answers claim about their table"
TRUST_TITLE = "Extraction: what each issue flag can be trusted for"


def _sample_sections(report: dict[str, Any]) -> list[str]:
    return [
        *render_generation_summary(report["generation"]),
        *(render_sentiment_by_stars(report["sentiment"]) if report.get("sentiment") else []),
        *(field_agreement.render(report["fields"], FIELDS_TITLE) if report.get("fields") else []),
        *(
            field_agreement.render_trust(report["fields"], TRUST_TITLE)
            if report.get("fields")
            else []
        ),
        *(
            field_agreement.render(report["claims"], CLAIMS_TITLE, "Measure")
            if report.get("claims")
            else []
        ),
        *render_worst_regressions(report["worst_regressions"]),
    ]


def _as_json(report: dict[str, Any]) -> dict[str, Any]:
    out = {**report, "comparison": report["comparison"].model_dump()}
    if report.get("sft"):
        results = report["sft"]["comparison"]
        out["sft"] = {
            **report["sft"],
            "comparison": {t: r.model_dump() for t, r in results.items()},
        }
    return out


def _sft_section(sft: dict[str, Any]) -> list[str]:
    """What SFT taught: the base model against the SFT model GRPO started from."""
    return [
        "## Base model -> SFT model (the model GRPO starts from)",
        "",
        _markdown_table(sft["comparison"]),
        "",
        *render_generation_summary(sft["generation"], "Base model -> SFT model: answer lengths"),
    ]


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def training_summary(
    adapters: list[Adapter], histories: dict[int, list[dict[str, Any]]]
) -> list[dict[str, Any]]:
    """Per seed, what a reader needs to judge training: the share of GRPO groups whose rewards
    all tie (TRL's `frac_reward_zero_std`, no learning signal) over the logged train steps, the
    held-out reward and share of held-out answers cut at the token limit at the first eval and
    at the exported step, why training stopped and where. `histories` maps a seed to its trainer
    log history."""
    rows = []
    for adapter in sorted(adapters, key=lambda a: a.seed):
        history = histories.get(adapter.seed, [])
        tied = [
            e["frac_reward_zero_std"]
            for e in sorted(
                (e for e in history if "frac_reward_zero_std" in e), key=lambda e: e["step"]
            )
        ]
        quarter = max(1, len(tied) // 4)
        evals = [e for e in history if "eval_reward" in e]
        first = min(evals, key=lambda e: e["step"]) if evals else None
        chosen = next((e for e in evals if e["step"] == adapter.best_step), {})
        rows.append(
            {
                "seed": adapter.seed,
                "global_step": adapter.global_step,
                "tied_groups_logged_steps": len(tied),
                "tied_groups_mean": _mean(tied),
                "tied_groups_first_quarter": _mean(tied[:quarter]),
                "tied_groups_last_quarter": _mean(tied[-quarter:]),
                "start_eval_step": first["step"] if first else None,
                "start_eval_reward": first["eval_reward"] if first else None,
                "start_eval_truncated": (first or {}).get(HELDOUT_TRUNCATED),
                "chosen_step": adapter.best_step,
                "chosen_eval_reward": adapter.best_eval_reward,
                "chosen_eval_truncated": chosen.get(HELDOUT_TRUNCATED),
                "exported": "final" if adapter.best_step is None else "best",
                "stop_reason": adapter.stop_reason,
            }
        )
    return rows


def _heldout_cell(reward: float, step: int, truncated: float | None) -> str:
    cut = "" if truncated is None else f", {truncated:.0%} cut"
    return f"{fmt(reward)} (step {step}{cut})"


def _training_table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| Seed | steps | tied groups: mean (first ¼ → last ¼) | held-out reward at start "
        "(step) | at chosen step (step) | stop reason |",
        "|---|---:|---|---|---|---|",
    ]
    for r in rows:
        tied = (
            f"{fmt(r['tied_groups_mean'])} ({fmt(r['tied_groups_first_quarter'])} → "
            f"{fmt(r['tied_groups_last_quarter'])})"
            if r["tied_groups_mean"] is not None
            else "n/a"
        )
        start = (
            "n/a (no eval logged)"
            if r["start_eval_step"] is None
            else _heldout_cell(
                r["start_eval_reward"], r["start_eval_step"], r.get("start_eval_truncated")
            )
        )
        chosen = (
            "n/a (final adapter exported)"
            if r["chosen_step"] is None
            else _heldout_cell(
                r["chosen_eval_reward"], r["chosen_step"], r.get("chosen_eval_truncated")
            )
        )
        reason = (r["stop_reason"] or "n/a").replace("|", "\\|")
        lines.append(
            f"| {r['seed']} | {r['global_step']} | {tied} | {start} | {chosen} | {reason} |"
        )
    return "\n".join(lines)


def render_markdown(report: dict[str, Any]) -> str:
    comparison: Comparison = report["comparison"]
    method = comparison.method
    start = report["start_model"]
    started = start_label(start["source"])
    parts = [
        f"# Tucano-commerce report: {report['recipe']}",
        "",
        f"- GRPO's start model, the {started}: `{start['location']}` ({start['source']})",
        f"- Seeds: {', '.join(str(s) for s in report['seeds'])}",
        f"- Eval prompts: {report['eval_prompts']} (temperature {report['eval_temperature']})",
        f"- Recipe {report['config_fingerprint']} · data {report['data_fingerprint'][:16]}"
        f" · commit {report['git_commit'] or 'unknown'}",
        "",
        *_verdict_sections(comparison, f"{started} vs GRPO-tuned (tuned score = mean over seeds)"),
        f"Method: {method['test']}; zeros: {method['zero_method']}; α = {method['alpha']}; "
        f"{method['multiple_testing']}; r = {method['effect_size']}; CI: {method['ci']}; "
        f"verdict: {method['verdict']}.",
    ]
    for seed, results in comparison.per_seed.items():
        parts += ["", f"## Seed {seed}", "", _markdown_table(results)]
    if report.get("training"):
        parts += ["", "## Training per seed", "", _training_table(report["training"])]
    parts += [""]
    if report.get("sft"):
        parts += _sft_section(report["sft"])
    parts += [*_sample_sections(report), "## Plots", ""]
    parts += [f"![{Path(path).stem}]({Path(path).name})" for path in report.get("plots", [])]
    return "\n".join(parts) + "\n"


def _sft_step(
    base_rows: list[dict[str, Any]], sft_rows: list[dict[str, Any]], alpha: float
) -> dict[str, Any]:
    return {
        "comparison": compare_rows(base_rows, sft_rows, alpha),
        "generation": generation_summary({BASE_MODEL: base_rows, SFT_MODEL: sft_rows}),
    }


def build_report(
    recipe: Recipe,
    data: PreparedData,
    start: BaseModelArtifact,
    adapters: list[Adapter],
    start_eval: EvalRows,
    tuned_evals: list[EvalRows],
    store: ArtifactStore,
    base_eval: EvalRows | None = None,
) -> ReportArtifact:
    """`start` is the model GRPO started from; with SFT, `base_eval` is the base model's (the one
    SFT started from), and the report shows that step in its own section."""
    eval_prompts = store.read_jsonl(data.eval)
    assert_no_overlap(store.read_jsonl(data.train), eval_prompts)
    start_rows = store.read_jsonl(start_eval.rows)
    rows_by_seed = {
        int(e.seed): store.read_jsonl(e.rows) for e in tuned_evals if e.seed is not None
    }
    scores = start_rows + [row for seed in sorted(rows_by_seed) for row in rows_by_seed[seed]]
    base_rows = store.read_jsonl(base_eval.rows) if base_eval else None
    seed_rows = {f"seed {s}": rows for s, rows in sorted(rows_by_seed.items())}
    prompt_texts = {row["prompt_id"]: last_user_message(row["prompt"]) for row in eval_prompts}
    stars = {row["prompt_id"]: row.get("review_score") for row in eval_prompts}
    histories = {a.seed: store.read_json(a.log_history) for a in adapters}
    started = start_label(start.source)
    models_rows = {
        **({BASE_MODEL: base_rows} if base_rows is not None else {}),
        started: start_rows,
        **seed_rows,
    }
    report = {
        "recipe": recipe.name,
        "config_fingerprint": recipe.fingerprint(),
        "data_fingerprint": data.fingerprint,
        "git_commit": git_commit(),
        "start_model": start.model_dump(),
        "seeds": sorted(rows_by_seed),
        "adapters": [a.model_dump() for a in adapters],
        "training": training_summary(adapters, histories),
        "eval_prompts": len(start_rows),
        "eval_temperature": recipe.evaluation.temperature if recipe.evaluation.do_sample else 0.0,
        "comparison": compare(
            start_rows, rows_by_seed, recipe.compare.alpha, recipe.compare.majority
        ),
        "generation": generation_summary({started: start_rows, **seed_rows}),
        "sentiment": sentiment_by_stars(models_rows, stars),
        "fields": field_agreement.by_model(
            models_rows, {row["prompt_id"]: row for row in eval_prompts}
        ),
        "claims": claim_truth.by_model(
            models_rows, {row["prompt_id"]: row for row in eval_prompts}
        ),
        "worst_regressions": worst_regressions(start_rows, rows_by_seed, prompt_texts),
        "sft": _sft_step(base_rows, start_rows, recipe.compare.alpha)
        if base_rows is not None
        else None,
    }
    identity = json.dumps(cache_token([start_eval, tuned_evals, recipe, base_eval]), sort_keys=True)
    folder = f"reports/{recipe.name}-{hashlib.sha256(identity.encode()).hexdigest()[:12]}"
    store.write_jsonl(f"{folder}/scores.jsonl", scores)
    pictures = {
        "start_vs_tuned.png": plots.start_vs_tuned(report["comparison"].pooled, started),
        "score_distributions.png": plots.score_distributions(
            start_rows, seed_average(rows_by_seed), started
        ),
        "training_curves.png": plots.training_curves(histories),
    }
    for name, png in pictures.items():
        store.write_bytes(f"{folder}/{name}", png)
    report["plots"] = [f"{folder}/{name}" for name in pictures]
    store.write_text(f"{folder}/report.md", render_markdown(report))
    store.write_json(f"{folder}/report.json", _as_json(report))
    return ReportArtifact(
        fingerprint=store.sha256(f"{folder}/report.json"),
        report_json=f"{folder}/report.json",
        report_md=f"{folder}/report.md",
        scores=f"{folder}/scores.jsonl",
        plots=report["plots"],
    )


EVAL_ROW_FIELDS = ("prompt_id", "task", "total", "completion", "tokens", "truncated")


class EvalRowsError(ValueError):
    """A saved evaluation that is not what `tucano eval` writes."""


def _read_rows(uri: str) -> list[dict[str, Any]]:
    """A saved evaluation (what `tucano eval` writes); a row without the fields the comparison
    reads is refused with its file and line."""
    rows = []
    with fsspec.open(uri, "r", encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as error:
                raise EvalRowsError(
                    f"{uri}, line {number}: not a JSON eval row ({error})"
                ) from None
            missing = [field for field in EVAL_ROW_FIELDS if field not in row]
            if missing:
                raise EvalRowsError(f"{uri}, line {number}: eval row lacks {', '.join(missing)}")
            rows.append(row)
    return rows


def compare_evaluations(
    base_uri: str, candidate_uri: str, config: CompareConfig, store: ArtifactStore
) -> ReportArtifact:
    """Any two saved evaluations (e.g. the production model vs a new candidate), by prompt id;
    a candidate file holding several seeds is compared seed by seed and pooled."""
    base_rows, candidate_rows = _read_rows(base_uri), _read_rows(candidate_uri)
    by_seed: dict[int, list[dict[str, Any]]] = {}
    for row in candidate_rows:
        by_seed.setdefault(int(row.get("seed") or 0), []).append(row)
    comparison = compare(base_rows, by_seed, config.alpha, config.majority)
    report = {
        "base": base_uri,
        "candidate": candidate_uri,
        "comparison": comparison,
        "generation": generation_summary(
            {"base": base_rows, **{f"candidate seed {s}": rows for s, rows in by_seed.items()}}
        ),
        "worst_regressions": worst_regressions(base_rows, by_seed),
    }
    identity = json.dumps([base_uri, candidate_uri, config.model_dump()], sort_keys=True)
    folder = f"reports/compare-{hashlib.sha256(identity.encode()).hexdigest()[:12]}"
    markdown = "\n".join(
        [
            "# Tucano-commerce comparison",
            "",
            f"- Base: `{base_uri}`",
            f"- Candidate: `{candidate_uri}`",
            "",
            *_verdict_sections(comparison, "Base vs candidate"),
            *_sample_sections(report),
        ]
    )
    store.write_text(f"{folder}/report.md", markdown)
    store.write_json(f"{folder}/report.json", _as_json(report))
    return ReportArtifact(
        fingerprint=store.sha256(f"{folder}/report.json"),
        report_json=f"{folder}/report.json",
        report_md=f"{folder}/report.md",
        scores=candidate_uri,
    )


def publish_report(report: ReportArtifact, store: ArtifactStore) -> None:
    content = store.read_json(report.report_json)
    create_table_artifact(
        key="tucano-comparison",
        table=results_table(Comparison.model_validate(content["comparison"]).pooled),
        description=f"Start vs tuned, pooled ({content.get('recipe', 'two saved evaluations')}).",
    )
    create_markdown_artifact(
        key="tucano-report",
        markdown=store.read_text(report.report_md)
        + f"\n\nFiles: `{store.uri(report.report_json)}`, `{store.uri(report.scores)}`\n"
        + "".join(f"\n- plot: `{store.uri(path)}`" for path in report.plots),
        description="The comparison report.",
    )
    for path in report.plots:
        name = Path(path).stem
        create_link_artifact(
            key=f"tucano-plot-{name.replace('_', '-')}",
            link=store.url(path),
            link_text=name.replace("_", " "),
            description="A plot of the comparison report.",
        )


report_task = task(
    build_report,
    name="report",
    cache_policy=ContentKey(),
    persist_result=True,
)
publish_report_task = task(publish_report, name="publish-report")
compare_evaluations_task = task(compare_evaluations, name="compare-evaluations")
