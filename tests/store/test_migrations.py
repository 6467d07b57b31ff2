"""The migration runner: an old database upgrades in place, twice is a no-op, newer is refused."""

from __future__ import annotations

import json

import pytest
import sqlalchemy as sa

from agentforge.store import ResultsStore
from agentforge.store.migrations import LATEST, current_version, migrate

from .conftest import make_result


@pytest.fixture(params=["sqlite_url", pytest.param("fresh_postgres_url", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest) -> str:
    return request.getfixturevalue(request.param)


def _v1_database_with_one_row(url: str) -> None:
    """A database as agentforge at schema version 1 left it, holding one evaluation."""
    engine = sa.create_engine(url)
    assert migrate(engine, target=1) == [1]
    result = make_result(sol=0.25)
    with engine.begin() as conn:
        conn.execute(sa.text(
            "INSERT INTO entries (name, kind, meta, created_at)"
            " VALUES ('old', 'eval', '{}', CURRENT_TIMESTAMP)"))
        conn.execute(sa.text(
            "INSERT INTO evaluations (job_key, entry_id, suite, task, sample, track, status, accepted,"
            " speedup, speedup_vs_compile, code_hash, evaluator_version, created_at, result_json)"
            " VALUES ('k0', 1, 's', 'level1/relu', 0, 'hardened', 'ok', :acc, 2.0, 1.5, 'abc', '0.1.0',"
            " CURRENT_TIMESTAMP, :js)"),
            {"acc": True, "js": result.to_json()})
    assert current_version(engine) == 1
    assert "runs" not in sa.inspect(engine).get_table_names()
    engine.dispose()


def test_v1_database_upgrades_and_backfills(url: str) -> None:
    _v1_database_with_one_row(url)
    with ResultsStore(url) as store:
        assert store.schema_version == LATEST
        (row,) = store.evaluations(entry="old")
        assert row.sol_fraction == 0.25 and row.n_flags == 0
        assert row.result == make_result(sol=0.25)
        store.record_run(entry="old", suite="s", task="level1/relu", status="done", cost_usd=1.0)
        assert len(store.runs()) == 1


def test_migrating_twice_is_a_no_op(url: str) -> None:
    engine = sa.create_engine(url)
    assert migrate(engine) == list(range(1, LATEST + 1))
    assert migrate(engine) == []
    with engine.connect() as conn:
        query = sa.text("SELECT version FROM schema_version ORDER BY version")
        versions = [v for (v,) in conn.execute(query)]
    assert versions == list(range(1, LATEST + 1))
    engine.dispose()


def test_a_step_is_idempotent_after_a_partial_run(sqlite_url: str) -> None:
    """A crash after step 2's DDL but before its version row: re-running step 2 must succeed."""
    engine = sa.create_engine(sqlite_url)
    migrate(engine)
    with engine.begin() as conn:
        conn.execute(sa.text("DELETE FROM schema_version WHERE version = 2"))
    assert migrate(engine) == [2]
    engine.dispose()


def test_newer_database_is_refused(sqlite_url: str) -> None:
    engine = sa.create_engine(sqlite_url)
    migrate(engine)
    with engine.begin() as conn:
        conn.execute(sa.text("INSERT INTO schema_version (version, description, applied_at)"
                             " VALUES (99, 'future', CURRENT_TIMESTAMP)"))
    engine.dispose()
    with pytest.raises(RuntimeError, match="newer than this agentforge"):
        ResultsStore(sqlite_url)


def test_backfill_reads_flags_from_json(sqlite_url: str) -> None:
    engine = sa.create_engine(sqlite_url)
    migrate(engine, target=1)
    data = json.loads(make_result().to_json())
    data["flags"] = [{"rule": "torch_fallback", "evidence": "x", "severity": "reject"},
                     {"rule": "audit_me", "evidence": "y", "severity": "audit"}]
    with engine.begin() as conn:
        conn.execute(sa.text("INSERT INTO entries (name, kind, meta, created_at) VALUES ('e','eval','{}',"
                             " CURRENT_TIMESTAMP)"))
        conn.execute(sa.text(
            "INSERT INTO evaluations (job_key, entry_id, suite, task, sample, track, status, accepted,"
            " code_hash, evaluator_version, created_at, result_json) VALUES ('k', 1, 's', 't', 0, 'hardened',"
            " 'ok', 0, 'abc', '0.1.0', CURRENT_TIMESTAMP, :js)"), {"js": json.dumps(data)})
    migrate(engine)
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT n_flags FROM evaluations")).scalar() == 1
    engine.dispose()
