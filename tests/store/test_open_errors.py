"""A store that cannot be opened says so in one line (which store, why, what to set), as a
StoreError, for every way a user meets it: a truncated or corrupt SQLite file, a file that is
not a database, a garbage URL, an unknown dialect, a missing driver, an unreachable path."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentforge.store import ResultsStore, StoreError


@pytest.fixture
def good_db(tmp_path: Path) -> Path:
    path = tmp_path / "good.db"
    with ResultsStore(f"sqlite:///{path}") as store:
        store.ensure_entry("e", kind="eval")
    return path


def _damaged(tmp_path: Path, good: Path, how: str) -> Path:
    data = good.read_bytes()
    path = tmp_path / f"{how}.db"
    path.write_bytes({
        "truncated": data[:5000],
        "header-only": data[:100],
        "overwritten": data[:4096] + bytes(range(256)) * 80,
        "text": b"this is not a database\n",
    }[how])
    return path


@pytest.mark.parametrize("how", ["truncated", "header-only", "overwritten", "text"])
def test_damaged_sqlite_file_is_one_line_naming_the_file(tmp_path: Path, good_db: Path, how: str) -> None:
    path = _damaged(tmp_path, good_db, how)
    with pytest.raises(StoreError) as caught:
        ResultsStore(f"sqlite:///{path}")
    message = str(caught.value)
    assert "\n" not in message
    assert str(path) in message and "damaged or not a database" in message
    assert "--results-url" in message


@pytest.mark.parametrize("url", ["garbage", "foo://bar", "://", "sqlite+nodriver:///x.db"])
def test_garbage_url_is_one_line_saying_what_to_set(url: str) -> None:
    with pytest.raises(StoreError) as caught:
        ResultsStore(url)
    assert "\n" not in str(caught.value) and "AGENTFORGE_RESULTS_URL" in str(caught.value)


def test_missing_driver_names_it_and_hides_the_password() -> None:
    try:
        import psycopg  # noqa: F401

        pytest.skip("psycopg is installed here")
    except ImportError:
        pass
    with pytest.raises(StoreError) as caught:
        ResultsStore("postgresql+psycopg://user:hunter2@127.0.0.1:1/db")
    assert "hunter2" not in str(caught.value) and "driver" in str(caught.value)


def test_unopenable_path_is_a_store_error(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="failed: unable to open database file"):
        ResultsStore(f"sqlite:///{tmp_path}")  # a directory
