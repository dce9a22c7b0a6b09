"""The test suite. pytest imports this package before conftest.py and the test modules, so this
runs before anything imports prefect or torch: each pytest process (each xdist worker) gets its
own Prefect home, thread budget and process marker (tests/isolation.py)."""

from .isolation import isolate

isolate()
