"""The journeys tier: each job of the README's table run as a user types it (tests/journeys/user.py).
Every test here is marked `journey` and `slow`."""

from __future__ import annotations

from pathlib import Path

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.journey)
            item.add_marker(pytest.mark.slow)


@pytest.fixture
def user_dir(tmp_path: Path) -> Path:
    """A fresh folder to work in, with a HOME of its own inside it."""
    (tmp_path / "home").mkdir()
    work = tmp_path / "work"
    work.mkdir()
    return work
