"""`tucano`: one subcommand per Prefect flow (and `score`, `deploy`), taking --recipe, --artifacts
and, where a flow reads the run's data, --data."""

from __future__ import annotations

import argparse
import functools
import logging
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from configs.recipe import DEFAULT_RECIPE, Recipe, RecipeError, load_recipe
from tasks.core.store import ArtifactStore


def _context_keys() -> str:
    """What each task's reward reads of a line's context, from the scorers themselves."""
    from rewards import READS
    from rewards.context import CONTEXT_KEYS
    from rewards.push import OBJECTIVES

    lines = ["context keys each task reads (all optional; fewer keys, fewer components):"]
    lines += [
        f"  {task}: {', '.join(sorted(reads & set(CONTEXT_KEYS)))}" for task, reads in READS.items()
    ]
    lines += ["push_objective is one of:", *(f"  {name}" for name in OBJECTIVES)]
    return "\n".join(lines)


# Which shared options a subcommand takes: none, the recipe and the store (--recipe,
# --artifacts), or those and the run's data (--data).
NO_SHARED, STORE, DATA = "none", "store", "data"


@dataclass(frozen=True)
class Command:
    """A `tucano` subcommand: its help, its shared options and its own (flag, argparse settings),
    and an epilog printed as written."""

    name: str
    help: str
    shared: str
    options: tuple[tuple[str, dict[str, Any]], ...] = ()
    epilog: Callable[[], str] | None = None


MODEL_OPTION = (
    "--model",
    {
        "default": "champion",
        "help": "champion (default; analyze: the latest pipeline run's starting model while none "
        "is promoted), seed-N (of the latest pipeline run), an adapter folder, or a model folder "
        "`tucano export` wrote",
    },
)
COMMANDS = (
    Command(
        "score",
        "score production outputs (JSONL) with the rewards; no Prefect run",
        NO_SHARED,
        (
            (
                "--recipe",
                {
                    "default": str(DEFAULT_RECIPE),
                    "help": "YAML recipe whose monitoring: thresholds judge the extraction answers",
                },
            ),
            (
                "--input",
                {"required": True, "help": "JSONL: task, completion, context (and truncated)"},
            ),
            ("--output", {"help": "JSONL with total and components (default: stdout)"}),
            (
                "--database",
                {"help": "SQLite copy of the Olist tables for SQL (default: the shipped data)"},
            ),
        ),
        epilog=_context_keys,
    ),
    Command(
        "deploy",
        "register work pools, deployments and automations on the Prefect server "
        "(PREFECT_API_URL); idempotent",
        NO_SHARED,
        (
            ("--gpu-image", {"help": "container image for the l4-gpu pool (with --gcp-region)"}),
            ("--gcp-region", {"help": "Vertex AI region, e.g. us-central1"}),
            (
                "--git-repository",
                {
                    "help": "git URL the remote pool's workers clone the code from, e.g. "
                    "https://git.example.com/acme/tucano-commerce.git (registers the -remote "
                    "deployments)"
                },
            ),
            (
                "--git-branch",
                {"default": "main", "help": "branch the remote workers clone (default main)"},
            ),
            (
                "--zombie-after",
                {
                    "type": int,
                    "default": 90,
                    "help": "seconds without a heartbeat before a training run counts as crashed "
                    "(default 90)",
                },
            ),
        ),
    ),
    # export reads its model from the store alone: no data to name.
    Command(
        "export",
        "the champion (or --model) merged into plain weights, with a card",
        STORE,
        (MODEL_OPTION, ("--to", {"required": True, "help": "folder or s3:// URI to write"})),
    ),
    Command(
        "analyze",
        "the champion (or --model) reads new reviews; drift starts a retraining",
        DATA,
        (
            MODEL_OPTION,
            ("--output", {"required": True, "help": "JSONL file of the rows"}),
            ("--limit", {"type": int, "help": "at most this many new reviews"}),
        ),
    ),
    Command(
        "pipeline", "the whole DAG: data, audit, train every seed, eval, compare, report", DATA
    ),
    Command("data", "step 1: prepare the prompt sets and the SQLite database", DATA),
    # The audit reads the shipped audit set and database, no data of the run's.
    Command("audit", "step 2: the reward audit gate", STORE),
    Command("sft", "step 3a: supervised fine-tuning on the reference answers (recipe sft:)", DATA),
    Command(
        "train",
        "step 3: GRPO training of one seed",
        DATA,
        (("--seed", {"type": int, "required": True}),),
    ),
    Command("eval", "step 4: evaluate the start model and every seed's tuned model", DATA),
    Command(
        "compare",
        "steps 5-6: Wilcoxon comparison and report",
        DATA,
        tuple(
            (
                f"--{side}-eval",
                {"help": "with the other one: compare two saved evaluations (eval rows JSONL)"},
            )
            for side in ("base", "candidate")
        ),
    ),
)


def build_parser() -> argparse.ArgumentParser:
    """The `tucano` command line, one subparser per entry of `COMMANDS`: also read by the docs
    (the generated CLI reference, the check that every documented command parses)."""
    from flows.parameters import DEFAULT_ARTIFACTS, DEFAULT_DATA

    store = argparse.ArgumentParser(add_help=False)
    store.add_argument("--recipe", default=str(DEFAULT_RECIPE), help="YAML recipe (configs/)")
    store.add_argument(
        "--artifacts",
        default=DEFAULT_ARTIFACTS,
        help="artifact store: a folder or s3://bucket/prefix",
    )
    data = argparse.ArgumentParser(add_help=False, parents=[store])
    data.add_argument(
        "--data", default=DEFAULT_DATA, help="folder with the Olist CSVs (local or s3://)"
    )
    shared = {NO_SHARED: [], STORE: [store], DATA: [data]}
    parser = argparse.ArgumentParser(
        prog="tucano", description="GRPO for a Brazilian e-commerce analyst, with proof."
    )
    subcommands = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        printed_as_written = (
            {"epilog": command.epilog(), "formatter_class": argparse.RawDescriptionHelpFormatter}
            if command.epilog
            else {}
        )
        subparser = subcommands.add_parser(
            command.name, parents=shared[command.shared], help=command.help, **printed_as_written
        )
        for flag, settings in command.options:
            subparser.add_argument(flag, **settings)
    return parser


def _flow_call(args: argparse.Namespace, store: ArtifactStore) -> Callable[[], Any]:
    """The flow a subcommand runs and its arguments, with its results kept in `store`."""
    from flows import pipeline, production
    from flows.storage import in_store

    kwargs: dict[str, Any] = {"recipe_path": args.recipe, "artifacts": args.artifacts}
    if args.command == "export":
        flow = production.export_flow
        kwargs.update(model=args.model, to=args.to)
    elif args.command == "analyze":
        flow = production.analyze_flow
        kwargs.update(data=args.data, model=args.model, output=args.output, limit=args.limit)
    elif args.command == "audit":
        flow, kwargs = pipeline.audit_flow, {"recipe_path": args.recipe}
    elif args.command == "compare" and args.base_eval:
        flow = pipeline.compare_evaluations_flow
        kwargs.update(base_eval=args.base_eval, candidate_eval=args.candidate_eval)
    else:
        flow = {
            "pipeline": pipeline.pipeline_flow,
            "data": pipeline.data_flow,
            "sft": pipeline.sft_flow,
            "train": pipeline.train_flow,
            "eval": pipeline.eval_flow,
            "compare": pipeline.compare_flow,
        }[args.command]
        kwargs["data"] = args.data
        if args.command == "train":
            kwargs["seed"] = args.seed
    return lambda: in_store(flow, store)(**kwargs)


def _summary(store: ArtifactStore, result: Any) -> str:
    from tasks.core.manifests import (
        Adapter,
        AuditResult,
        BaseModelArtifact,
        PreparedData,
        ReportArtifact,
    )

    if isinstance(result, str):
        return f"exported model: {result}"
    if isinstance(result, dict):
        decision = result["monitoring"] or {
            "status": "nothing analysed",
            "reason": "no new reviews",
        }
        return f"monitoring: {decision['status']} ({decision['reason']})"
    if isinstance(result, ReportArtifact):
        return f"report: {store.uri(result.report_json)}"
    if isinstance(result, PreparedData):
        return f"prepared data: {store.uri(result.folder)} {result.counts}"
    if isinstance(result, Adapter):
        return (
            f"adapter (seed {result.seed}, step {result.global_step}): {store.uri(result.folder)}"
        )
    if isinstance(result, AuditResult):
        return "reward audit passed"
    if isinstance(result, BaseModelArtifact):
        return f"model GRPO starts from ({result.source}): {store.uri(result.location)}"
    evaluated = [result.before_sft, result.start, *result.tuned]
    return "eval rows: " + ", ".join(store.uri(e.rows) for e in evaluated if e is not None)


def _scored_answer(record: dict[str, Any]) -> Any:
    """A scored extraction line as the monitor's checks read it."""
    from tasks.production.checks import Answer

    stars = (record.get("context") or {}).get("review_score")
    return Answer.of(record["completion"], record.get("truncated"), stars, record["total"])


def score_file(args: argparse.Namespace, recipe: Recipe) -> int:
    """`tucano score`: every good line scored, every bad one named; exit 1 if any was bad. The
    extraction answers among them get the monitor's checks, summarised after the lines (on
    stderr when the lines go to stdout)."""
    from tasks.evaluation.score_logs import output_sink, score_lines, shipped_database
    from tasks.production.monitoring import decision_markdown, drift_decision

    database = (lambda: Path(args.database)) if args.database else functools.cache(shipped_database)
    errors = scored_lines = 0
    answers = []
    unjudged: Counter[str] = Counter()
    try:
        # Bytes, not text: one undecodable line is one bad line, not the end of the run.
        with open(args.input, "rb") as source, output_sink(args.output) as sink:
            for scored in score_lines(source, database):
                if scored.error:
                    errors += 1
                    print(f"tucano score: {args.input}: {scored.error}", file=sys.stderr)
                    continue
                sink.write(scored.line)
                scored_lines += 1
                for key in scored.record.get("not_judged", {}):
                    unjudged[f"{key} {scored.record['context'][key]!r}"] += 1
                if scored.record["task"] == "extraction":
                    answers.append(_scored_answer(scored.record))
    except OSError as exc:
        print(f"tucano score: {exc}", file=sys.stderr)
        return 1
    report = sys.stdout if args.output else sys.stderr
    print(f"tucano score: {scored_lines} lines scored, {errors} not", file=report, flush=True)
    if unjudged:
        named = "; ".join(f"{what}: {count}" for what, count in unjudged.most_common())
        print(
            f"tucano score: {unjudged.total()} scored without what the rewards do not know, "
            f"marked not_judged ({named})",
            file=report,
            flush=True,
        )
    if answers:
        # Offline logs name no model: no eval split to hold them to, only the recipe's limits.
        decision = drift_decision(answers, None, recipe.monitoring, recipe.compare.alpha)
        summary = f"# Extraction answers in {args.input}\n\n{decision_markdown(decision)}"
        print(summary, file=report, flush=True)
    return 1 if errors else 0


def deploy_command(args: argparse.Namespace) -> int:
    from flows.deploy import DeployError, deploy

    try:
        names = deploy(
            args.gpu_image,
            args.gcp_region,
            args.zombie_after,
            git_repository=args.git_repository,
            git_branch=args.git_branch,
        )
    except DeployError as exc:
        print(f"tucano deploy: {exc}", file=sys.stderr)
        return 1
    print("deployed: " + ", ".join(names), flush=True)
    return 0


class _ExplainedByTheCommand(logging.Filter):
    """Prefect reports a failed task and its flow four times over, tracebacks included. For an
    error the command explains itself, the terminal shows the command's one line instead; the
    Prefect UI (the API log handler) still gets every record."""

    def __init__(self, errors: tuple[type[Exception], ...]):
        super().__init__()
        self.errors = errors
        self.reasons: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.name.startswith(("prefect.task_runs", "prefect.flow_runs")):
            return True
        if record.exc_info and isinstance(record.exc_info[1], self.errors):
            reason = str(record.exc_info[1])
            # The state lines quote it as a repr: a newline or a quote comes escaped there.
            self.reasons.update(text for text in (reason, repr(reason)[1:-1]) if text)
            return False
        # The "Finished in state Failed(...)" lines quote the same reason, without the error.
        message = record.getMessage()
        return not any(reason in message for reason in self.reasons)


@functools.cache  # one filter per process, however often `main` runs in it
def _quiet_console(errors: tuple[type[Exception], ...]) -> None:
    from prefect.logging.handlers import PrefectConsoleHandler

    explained = _ExplainedByTheCommand(errors)
    for handler in logging.getLogger().handlers:
        if isinstance(handler, PrefectConsoleHandler):
            handler.addFilter(explained)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "compare" and bool(args.base_eval) != bool(args.candidate_eval):
        parser.error("--base-eval and --candidate-eval go together")
    if args.command == "deploy":
        return deploy_command(args)
    try:
        recipe = load_recipe(args.recipe)
    except RecipeError as exc:
        print(f"tucano: {exc}", file=sys.stderr)
        return 2
    if args.command == "score":
        return score_file(args, recipe)
    from prefect.exceptions import TerminationSignal
    from prefect.settings import PREFECT_API_URL

    from flows.production import ModelChoiceError
    from tasks.core import signals
    from tasks.evaluation.audit import AuditFailed
    from tasks.evaluation.report import EvalRowsError
    from tasks.prep.errors import DataTooSmall
    from tasks.prep.olist import OlistSchemaError

    explained = (OlistSchemaError, DataTooSmall, AuditFailed, EvalRowsError, ModelChoiceError)
    _quiet_console((*explained, TerminationSignal))
    store = ArtifactStore(args.artifacts)
    # Prefect starts a temporary server only with no API URL; importing its server costs each
    # run about 2 s of CPU, so the run-bound one is set up only then.
    if not PREFECT_API_URL.value():
        from flows.ephemeral import use_run_bound_server

        use_run_bound_server()
    try:
        with signals.handled():
            result = _flow_call(args, store)()
    except explained as exc:
        print(f"tucano {args.command}: {exc}", file=sys.stderr)
        return 1
    except TerminationSignal as exc:
        # Prefect's own SIGTERM handler raises a plain TerminationSignal: nothing said where.
        stopped = exc if isinstance(exc, signals.Stopped) else signals.Stopped(exc.signal)
        kept = stopped.kept or f"every step that finished is kept in {store.uri('')}"
        print(
            f"tucano {args.command}: stopped by {stopped.name}; {kept}, and the same command goes "
            "on from there",
            file=sys.stderr,
        )
        return stopped.exit_status
    finally:
        # The last line a run prints says what came of it and where: Prefect's own shutdown
        # chatter (stopping the temporary server) would otherwise come after it.
        logging.getLogger("prefect").setLevel(logging.WARNING)
    print(_summary(store, result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
