"""The `tucano` command line: errors are named and exit non-zero, nothing half-done."""

import itertools
import os
import subprocess
import sys
from pathlib import Path

import pytest

from flows.cli import main

from .conftest import SHIPPED_DATA


def _tucano(*args: str, prefect_home: Path | None = None) -> subprocess.CompletedProcess[str]:
    """The installed command as a newcomer runs it: no Prefect settings of ours (importing
    `flows` here set some), a Prefect home of its own; with no home, on the tests' server."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    if prefect_home is None:
        from prefect.settings import PREFECT_API_URL

        env["PREFECT_API_URL"] = PREFECT_API_URL.value()
    else:
        env["PREFECT_HOME"] = str(prefect_home)
    tucano = Path(sys.executable).parent / "tucano"
    return subprocess.run(
        [tucano, *args], env=env, capture_output=True, text=True, timeout=300, check=False
    )


def test_a_first_run_prints_no_telemetry_noise(tmp_path: Path) -> None:
    run = _tucano("data", "--artifacts", str(tmp_path / "a"), prefect_home=tmp_path / "prefect")
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("prepared data: ")
    # Offline, the heartbeat logs "Failed to send telemetry"; on a fresh home it also races the
    # first run for the SQLite database ("database is locked", from send_telemetry_heartbeat).
    assert "telemetry" not in run.stderr.lower()
    assert "Traceback" not in run.stderr


@pytest.fixture
def too_little_data(tmp_path: Path) -> Path:
    """The first 200 lines of every shipped table: enough to load, too few to prepare."""
    folder = tmp_path / "little"
    folder.mkdir()
    for table in SHIPPED_DATA.glob("*.csv"):
        with table.open(encoding="utf-8") as lines:
            (folder / table.name).write_text("".join(itertools.islice(lines, 200)))
    return folder


@pytest.mark.usefixtures("prefect_api")
def test_too_little_data_is_explained_once_without_a_traceback(
    too_little_data: Path, tmp_path: Path
) -> None:
    artifacts = tmp_path / "a"
    run = _tucano("data", "--data", str(too_little_data), "--artifacts", str(artifacts))
    assert run.returncode == 1
    output = run.stdout + run.stderr
    (reason,) = [line for line in output.splitlines() if line.startswith("tucano data: ")]
    assert "lower data." in reason  # it names the recipe value to change
    assert output.count(reason.removeprefix("tucano data: ")) == 1
    assert "Traceback" not in output
    assert not (artifacts / "prepared").exists()


def test_bad_recipe_exits_2_naming_the_field(tmp_path: Path, capsys) -> None:
    recipe = tmp_path / "r.yaml"
    recipe.write_text("name: x\ntraining: {temperture: 1.0}\n")
    assert main(["data", "--recipe", str(recipe), "--artifacts", str(tmp_path / "a")]) == 2
    assert "training.temperture" in capsys.readouterr().err


@pytest.mark.usefixtures("prefect_api")
def test_missing_data_file_exits_1_naming_it(olist_copy: Path, tmp_path: Path, capsys) -> None:
    (olist_copy / "olist_order_payments_dataset.csv").unlink()
    code = main(["data", "--artifacts", str(tmp_path / "a"), "--data", str(olist_copy)])
    assert code == 1
    assert "olist_order_payments_dataset.csv: file not found" in capsys.readouterr().err
    assert not (tmp_path / "a" / "prepared").exists()


@pytest.mark.usefixtures("prefect_api")
def test_audit_command_passes_and_says_so(capsys) -> None:
    assert main(["audit"]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1] == "reward audit passed"


@pytest.mark.usefixtures("prefect_api")
def test_compare_two_saved_evaluations(tmp_path: Path, capsys) -> None:
    import json

    def rows(model: str, shift: float, seed: int | None) -> str:
        lines = [
            {"prompt_id": f"p{i}", "task": "push", "model": model, "seed": seed,
             "total": 0.05 * i + shift, "completion": f"{model} {i}", "tokens": 3 + i,
             "truncated": i == 11}
            for i in range(12)
        ]  # fmt: skip
        return "".join(json.dumps(line) + "\n" for line in lines)

    (tmp_path / "champion.jsonl").write_text(rows("champion", 0.0, None))
    (tmp_path / "challenger.jsonl").write_text(rows("challenger", 0.1, 1) + rows("c", 0.2, 2))
    args = ["compare", "--artifacts", str(tmp_path / "a")]
    args += ["--base-eval", str(tmp_path / "champion.jsonl")]
    args += ["--candidate-eval", str(tmp_path / "challenger.jsonl")]
    assert main(args) == 0
    report_path = capsys.readouterr().out.strip().splitlines()[-1].removeprefix("report: ")
    report = json.loads(Path(report_path).read_text())
    pooled = report["comparison"]["pooled"]["push"]
    assert pooled["delta"] == pytest.approx(0.15)
    assert pooled["p_value"] == pytest.approx(1 / 2**12)  # every pair better, exact test
    assert report["comparison"]["across_seeds"]["push"]["verdict"] == "better"
    assert report["generation"]["candidate seed 2"]["push"]["mean_tokens"] == pytest.approx(8.5)
    assert report["generation"]["base"]["push"]["truncated_share"] == pytest.approx(1 / 12)
    assert report["worst_regressions"] == []  # every candidate answer scored higher


@pytest.mark.usefixtures("prefect_api")
def test_compare_refuses_an_eval_file_without_scores(tmp_path: Path, capsys) -> None:
    good = '{"prompt_id": "p1", "task": "push", "total": 0.5, "completion": "x", "tokens": 1, '
    good += '"truncated": false}\n'
    (tmp_path / "base.jsonl").write_text(good)
    (tmp_path / "candidate.jsonl").write_text(good + '{"prompt_id": "p1", "task": "push"}\n')
    args = ["compare", "--artifacts", str(tmp_path / "a")]
    args += ["--base-eval", str(tmp_path / "base.jsonl")]
    args += ["--candidate-eval", str(tmp_path / "candidate.jsonl")]
    assert main(args) == 1
    error = capsys.readouterr().err
    assert f"{tmp_path / 'candidate.jsonl'}, line 2: eval row lacks total, completion" in error


def test_compare_needs_both_evaluations(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["compare", "--base-eval", "a.jsonl"])
    assert "go together" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.usefixtures("prefect_api")
def test_sft_command_fine_tunes_and_says_where_the_model_is(tmp_path: Path, capsys) -> None:
    import yaml

    from .test_pipeline import SMALL_RECIPE

    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(yaml.safe_dump(SMALL_RECIPE))
    artifacts = tmp_path / "a"
    assert main(["sft", "--recipe", str(recipe), "--artifacts", str(artifacts)]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("model GRPO starts from (sft): ") and last.endswith("/model")
    assert (Path(last.split(": ", 1)[1]) / "config.json").is_file()
