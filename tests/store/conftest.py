"""Store fixtures: a SQLite URL in tmp, and a real PostgreSQL server started on loopback.

The PostgreSQL fixture runs `initdb` and `pg_ctl` from the PATH (or /usr/lib/postgresql/*/bin)
in a temporary folder, as the `postgres` user when the tests run as root (initdb refuses root),
on a free port, with trust authentication on 127.0.0.1 only. Where no server can be started the
tests that need it skip with the reason.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from agentforge.evaluator.result import (
    CompileRecord,
    CorrectnessRecord,
    DeviceInfo,
    EvalProvenance,
    EvalResult,
    Flag,
    RooflineRecord,
    Stage,
    Status,
    TimingRecord,
    TimingStats,
)


def make_result(
    task: str = "level1/relu", *, speedup: float | None = 2.0, status: Status = Status.OK,
    flags: tuple[Flag, ...] = (), sol: float | None = 0.5, code: str = "abc",
) -> EvalResult:
    """A realistic EvalResult: candidate 10 us, eager 10*speedup us, compile 15 us."""
    cand = 10.0
    eager = cand * (speedup or 1.0)

    def stats(us: float) -> TimingStats:
        return TimingStats(us, us, 0.1, us - 0.1, us + 0.1, 3, 0.01, (us - 0.1, us, us + 0.1))

    ok = status == Status.OK
    return EvalResult(
        task_name=task, candidate_hash=code, backend="cpu", status=status,
        stage=Stage.DONE if ok else Stage.CORRECTNESS,
        compile=CompileRecord(ok=True, backend="cpu", seconds=0.1),
        correctness=(CorrectnessRecord(shape="default", seed=42, passed=ok, max_abs_err=1e-7),),
        flags=flags,
        timing=TimingRecord(
            shape="default", method="host-monotonic", candidate=stats(cand),
            baselines={"eager": stats(eager), "compile-default": stats(15.0)},
        ) if ok else None,
        roofline=RooflineRecord(flops=1e6, bytes=4e6, floor_us=sol * cand if sol else None,
                                arithmetic_intensity=0.25, sol_fraction=sol, label="memory-bound"),
        provenance=EvalProvenance(device=DeviceInfo(kind="cpu", name="test-cpu"), host="h"),
        candidate_meta={"sample": 0},
    )


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'results.db'}"


def _pg_bin(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    options = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return options[-1] if options else None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A throwaway PostgreSQL server; skips with the reason where none can be started."""
    pytest.importorskip("psycopg2", reason="psycopg2 is not installed (pip install agentforge[postgres])")
    initdb, pg_ctl = _pg_bin("initdb"), _pg_bin("pg_ctl")
    if not initdb or not pg_ctl:
        pytest.skip("PostgreSQL is not installed (apt-get install postgresql)")
    as_user: list[str] = []
    root = tempfile.mkdtemp(prefix="agentforge-pg-")
    if os.geteuid() == 0:
        try:
            pg = pwd.getpwnam("postgres")
        except KeyError:
            pytest.skip("running as root and there is no `postgres` user to run initdb as")
        os.chown(root, pg.pw_uid, pg.pw_gid)
        as_user = ["runuser", "-u", "postgres", "--"]
    data, port = os.path.join(root, "data"), _free_port()
    env = {**os.environ, "LC_ALL": "C"}
    done = subprocess.run([*as_user, initdb, "-D", data, "-A", "trust", "-U", "postgres", "--no-sync"],
                          capture_output=True, text=True, env=env)
    if done.returncode != 0:
        shutil.rmtree(root, ignore_errors=True)
        pytest.skip(f"initdb failed: {done.stderr.strip()[-300:]}")
    options = f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off"
    started = subprocess.run([*as_user, pg_ctl, "-D", data, "-o", options, "-l", os.path.join(root, "log"),
                              "-w", "-t", "60", "start"], capture_output=True, text=True, env=env)
    if started.returncode != 0:
        log = Path(root, "log").read_text() if Path(root, "log").exists() else started.stderr
        shutil.rmtree(root, ignore_errors=True)
        pytest.skip(f"PostgreSQL would not start: {log.strip()[-300:]}")
    try:
        yield f"postgresql+psycopg2://postgres@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run([*as_user, pg_ctl, "-D", data, "-m", "immediate", "-w", "stop"],
                       capture_output=True, env=env)
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def fresh_postgres_url(postgres_url: str) -> Iterator[str]:
    """The server with a new, empty database for one test."""
    import sqlalchemy as sa

    name = f"t_{os.getpid()}_{_free_port()}"
    admin = sa.create_engine(postgres_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f"CREATE DATABASE {name}"))
    try:
        yield postgres_url.rsplit("/", 1)[0] + f"/{name}"
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        admin.dispose()
