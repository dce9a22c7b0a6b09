"""The `tucano` command line: errors are named and exit non-zero, nothing half-done."""

from pathlib import Path

import pytest

from flows.cli import main


def test_bad_recipe_exits_2_naming_the_field(tmp_path: Path, capsys) -> None:
    recipe = tmp_path / "r.yaml"
    recipe.write_text("name: x\ntraining: {temperture: 1.0}\n")
    assert main(["data", "--config", str(recipe), "--artifacts", str(tmp_path / "a")]) == 2
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
