"""The results store round-trips EvalResults, is idempotent per job key, on SQLite and PostgreSQL."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from agentforge.evaluator.result import EvalResult, Flag, Status

from agentforge.store import ResultsStore
from agentforge.store.migrations import LATEST
from agentforge.store.models import Base

from .conftest import make_result

BACKENDS = [
    "sqlite_url",
    pytest.param("fresh_postgres_url", marks=pytest.mark.postgres),
]


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest):
    with ResultsStore(request.getfixturevalue(request.param)) as opened:
        yield opened


def test_result_round_trips_exactly(store: ResultsStore) -> None:
    store.ensure_entry("e1", kind="eval")
    original = make_result(flags=(Flag("torch_fallback", "aten::relu", "reject"),), speedup=3.0)
    assert store.add_evaluation("k1", entry="e1", suite="s", task="level1/relu", track="hardened",
                                result=original)
    (row,) = store.evaluations(entry="e1")
    assert row.result == original
    assert EvalResult.from_json(row.result_json).to_json() == original.to_json()
    assert (row.status, row.accepted, row.n_flags, row.sol_fraction) == ("ok", False, 1, 0.5)


def test_indexed_columns_match_the_result(store: ResultsStore) -> None:
    store.ensure_entry("e1", kind="eval")
    result = make_result(speedup=2.0)
    store.add_evaluation("k1", entry="e1", suite="s", task="level1/relu", track="kernelbench", result=result)
    (row,) = store.evaluations(suite="s", track="kernelbench")
    assert row.accepted and row.speedup == pytest.approx(2.0)
    assert row.speedup_vs_compile == pytest.approx(1.5)
    assert row.code_hash == "abc" and row.gpu is None and row.evaluator_version
    assert store.evaluations(track="hardened") == []


def test_same_job_key_is_stored_once(store: ResultsStore) -> None:
    store.ensure_entry("e1", kind="eval")
    result = make_result()
    assert store.add_evaluation("k1", entry="e1", suite="s", task="t", track="hardened", result=result)
    assert not store.add_evaluation("k1", entry="e1", suite="s", task="t", track="hardened", result=result)
    assert len(store.evaluations()) == 1
    assert store.stored_keys(["k1", "k2"]) == {"k1"}


def test_entries_suites_and_runs(store: ResultsStore) -> None:
    assert store.ensure_entry("e1", kind="run", provider="library", model="m") == store.ensure_entry(
        "e1", kind="run")
    store.register_suite("s", [("level1/a", 1, "h1"), ("level1/b", 1, None)])
    store.register_suite("s", [("level1/a", 1, "h1"), ("level2/c", 2, None)])
    assert store.suite_tasks("s") == [("level1/a", 1), ("level1/b", 1), ("level2/c", 2)]
    store.record_run(entry="e1", suite="s", task="level1/a", status="running")
    store.record_run(entry="e1", suite="s", task="level1/a", status="done", cost_usd=0.3, tokens=1200,
                     minutes=2.5, summary={"rounds": 4})
    (run,) = store.runs(entry="e1")
    assert (run.status, run.cost_usd, run.tokens, run.minutes, run.summary) == ("done", 0.3, 1200, 2.5,
                                                                                 {"rounds": 4})
    assert [e.name for e in store.entries()] == ["e1"]
    assert store.schema_version == LATEST


def test_failed_result_round_trips(store: ResultsStore) -> None:
    store.ensure_entry("e1", kind="eval")
    failed = make_result(status=Status.MISMATCH, speedup=None)
    store.add_evaluation("k", entry="e1", suite="s", task="t", track="hardened", result=failed)
    (row,) = store.evaluations()
    assert row.result == failed and not row.accepted and row.speedup is None


def test_unknown_entry_is_a_clear_error(store: ResultsStore) -> None:
    with pytest.raises(KeyError, match="ensure_entry"):
        store.add_evaluation("k", entry="nobody", suite="s", task="t", track="hardened", result=make_result())


def test_models_match_the_migrated_schema(store: ResultsStore) -> None:
    inspector = sa.inspect(store.engine)
    for table in Base.metadata.sorted_tables:
        migrated = {c["name"] for c in inspector.get_columns(table.name)}
        assert migrated == {c.name for c in table.columns}, table.name


def test_relative_sqlite_path_is_created(tmp_path) -> None:
    with ResultsStore("sqlite:///results/agentforge.db", base_dir=tmp_path) as store:
        assert store.schema_version == LATEST
    assert (tmp_path / "results" / "agentforge.db").is_file()
