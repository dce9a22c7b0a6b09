"""How long each test module took in a full run, kept in `durations.json` beside this file, so
that xdist can be handed the longest modules first (tests/conftest.py). `pytest
--record-durations` rewrites the modules that run (a module's tests with their set-up and
tear-down, in seconds); the others keep their figure. A stale figure only makes the order worse:
no test reads it."""

from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path

import pytest

DURATIONS = Path(__file__).with_name("durations.json")
# A slow module not measured yet goes before the fast ones, after the long ones it cannot be
# weighed against: about the median slow module's time.
UNRECORDED_SLOW_S = 30.0


def recorded() -> dict[str, float]:
    return json.loads(DURATIONS.read_text()) if DURATIONS.is_file() else {}


def module_name(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def expected_seconds(tests: list[pytest.Item], durations: dict[str, float]) -> float:
    name = module_name(tests[0].nodeid)
    if name in durations:
        return durations[name]
    return UNRECORDED_SLOW_S if any(t.get_closest_marker("slow") for t in tests) else 0.0


class DurationRecorder:
    """Sums each module's phase durations as the reports reach the controller, and merges them
    into the file when the session ends green."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.seconds[module_name(report.nodeid)] += report.duration

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if exitstatus != 0 or not self.seconds:
            return
        merged = {**recorded(), **{name: round(s) for name, s in self.seconds.items()}}
        partial = DURATIONS.with_suffix(".json.partial")
        partial.write_text(json.dumps(dict(sorted(merged.items())), indent=1) + "\n")
        os.replace(partial, DURATIONS)


def add_option(parser: pytest.Parser) -> None:
    parser.addoption(
        "--record-durations",
        action="store_true",
        help=f"write each module's time into {DURATIONS.name} (the order xdist hands work out)",
    )


def register(config: pytest.Config) -> None:
    """The recorder, in the controller only (xdist's workers report to it)."""
    if config.getoption("--record-durations") and not hasattr(config, "workerinput"):
        config.pluginmanager.register(DurationRecorder(), "tucano-durations")
