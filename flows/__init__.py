"""Prefect flows. Importing this package sets up the "tucano" loggers for every entry point: the
`tucano` command and the flow-run processes a worker starts (whose pools set the same variables,
since there Prefect has configured logging before any flow module is imported)."""

import logging
import os

# Prefect attaches its console and API handlers to these loggers only if told before it
# configures logging.
os.environ.setdefault("PREFECT_LOGGING_EXTRA_LOGGERS", "tucano")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# The temporary server's telemetry heartbeat races the first run for its fresh SQLite database
# ("database is locked" tracebacks) and, offline, fails to resolve its host: noise before any work.
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
# Prefect waits 20 s for its temporary server (migrating a fresh SQLite database, starting
# uvicorn); on two busy cores, a run started beside a training one, it has taken longer, and the
# run failed before doing anything ("Timed out while attempting to connect to ephemeral Prefect
# API server").
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "60")
logging.getLogger("tucano").setLevel(logging.INFO)
