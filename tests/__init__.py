"""The test suite. pytest imports this package before conftest.py and the test modules, so this
runs before anything imports prefect or torch: each pytest process (each xdist worker) gets its
own Prefect home, thread budget and process marker (tests/isolation.py)."""

import sys

# A command a test starts from this package (`python -m tests.paused`) runs in the environment
# its test chose, the Prefect server included: isolated again, it would drop the tests' server's
# URL and start a temporary one of its own.
if "_pytest" in sys.modules:
    from .isolation import isolate

    isolate()
