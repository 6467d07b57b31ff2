"""Several processes opening one new store at once (parallel `leaderboard eval`s, or
`leaderboard show`s, on a fresh database): every one opens it, and the schema is applied once.

Before the migration lock, 4 of 5 such races on SQLite ended with one process dying of
"UNIQUE constraint failed: schema_version.version" or "table ... already exists".
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from agentforge.store.migrations import LATEST

PROCESSES = 6
ROUNDS = 3

# Each process imports everything first, then waits for the go file, so all open at once.
OPENER = """
import json, os, sys, time
from agentforge.store import ResultsStore
go, url = sys.argv[1], sys.argv[2]
while not os.path.exists(go):
    time.sleep(0.001)
try:
    with ResultsStore(url) as store:
        print(json.dumps(["ok", store.schema_version]))
except Exception as exc:
    print(json.dumps(["error", f"{type(exc).__name__}: {exc}"[:300]]))
"""


def _race(url: str, go: Path) -> list[list[object]]:
    procs = [subprocess.Popen([sys.executable, "-c", OPENER, str(go), url], stdout=subprocess.PIPE, text=True)
             for _ in range(PROCESSES)]
    time.sleep(3.0)  # imports done
    go.touch()
    return [json.loads(proc.communicate(timeout=120)[0]) for proc in procs]


@pytest.mark.parametrize("round_", range(ROUNDS))
def test_processes_racing_on_a_new_sqlite_store_all_open_it(tmp_path: Path, round_: int) -> None:
    url = f"sqlite:///{tmp_path / 'new.db'}"
    outcomes = _race(url, tmp_path / "go")
    assert outcomes == [["ok", LATEST]] * PROCESSES, outcomes
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        versions = [v for (v,) in conn.execute(sa.text("SELECT version FROM schema_version ORDER BY version"))]
    engine.dispose()
    assert versions == list(range(1, LATEST + 1))


@pytest.mark.postgres
def test_processes_racing_on_a_new_postgres_store_all_open_it(fresh_postgres_url: str, tmp_path: Path) -> None:
    assert _race(fresh_postgres_url, tmp_path / "go") == [["ok", LATEST]] * PROCESSES
