"""`python -m tests.paused MODULE:FUNCTION -- tucano ARGS`: the real `tucano` command, whose
FUNCTION stops on its first call, prints `PAUSED IN MODULE:FUNCTION` and sleeps until a signal
ends it (then runs on if none does). A stage shorter than a test's reaction time is signalled
exactly in its middle this way, by a real signal to a real process, with every handler the
command installs."""

from __future__ import annotations

import functools
import importlib
import sys
import time
from typing import Any

PAUSE_S = 120


def pause_in(target: str) -> None:
    module_name, name = target.split(":")
    module = importlib.import_module(module_name)
    original = getattr(module, name)
    calls = []

    @functools.wraps(original)
    def paused(*args: Any, **kwargs: Any) -> Any:
        if not calls:
            calls.append(target)
            print(f"PAUSED IN {target}", flush=True)
            time.sleep(PAUSE_S)
        return original(*args, **kwargs)

    setattr(module, name, paused)


if __name__ == "__main__":
    target, separator, *command = sys.argv[1:]
    assert separator == "--", "usage: python -m tests.paused MODULE:FUNCTION -- tucano ARGS"
    # The environment `tucano` starts with (its Prefect settings among it) is set when `flows` is
    # imported, and Prefect reads it once, when first imported: before the paused module is.
    import flows  # noqa: F401

    pause_in(target)
    from flows.cli import main

    sys.exit(main(command[1:]))
