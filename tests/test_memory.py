"""A stage that ran in the pipeline's own process hands the heap it freed back to the system."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from tasks.core import memory
from tasks.evaluation.evaluate import evaluate_model
from tasks.training.sft import train_sft
from tasks.training.train import train_seed

MB = 1 << 20

# A stage's heap as a model's leaves it: many blocks too big for Python's own allocator and too
# small for glibc to map each on its own (400 MB of 4 KB blocks), and one block allocated after
# them still alive, so glibc cannot give the freed ones back by shrinking the heap's top.
PROBE = textwrap.dedent(
    """
    import json, os, sys
    from tasks.core.memory import returns_memory

    def resident():
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    def stage():
        blocks = [bytes(4096) for _ in range(100_000)]
        survivor = bytearray(4096)
        del blocks
        return survivor

    before = resident()
    run = returns_memory(stage) if sys.argv[1] == "wrapped" else stage
    kept = run()
    print(json.dumps({"grown": resident() - before}))
    """
)


def grown_after(variant: str) -> int:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, variant], capture_output=True, text=True, check=True
    ).stdout
    return json.loads(out)["grown"]


@pytest.mark.skipif(
    memory._TRIM is None or not sys.platform.startswith("linux"),
    reason="malloc_trim is glibc's",
)
def test_a_wrapped_stage_gives_its_freed_heap_back():
    # The unwrapped stage shows what the process keeps otherwise: without it, the test could
    # pass on a heap that glibc trims by itself.
    assert grown_after("bare") > 300 * MB
    assert grown_after("wrapped") < 50 * MB


@pytest.mark.parametrize("stage", [train_sft, train_seed, evaluate_model])
def test_every_stage_that_loads_a_model_in_process_returns_its_memory(stage):
    assert stage.__wrapped__.__name__ == stage.__name__
    assert stage.__code__ is memory.returns_memory(stage.__wrapped__).__code__


def test_a_stage_that_raises_still_releases_and_raises(monkeypatch):
    released = []
    monkeypatch.setattr(memory, "release_freed_memory", lambda: released.append(True))

    @memory.returns_memory
    def failing() -> None:
        raise ValueError("bad input")

    with pytest.raises(ValueError, match="bad input"):
        failing()
    assert released == [True]
