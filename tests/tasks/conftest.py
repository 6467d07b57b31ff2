"""Helpers for the task tests: write problem files into a temporary tree."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest


@pytest.fixture
def write_task(tmp_path: Path) -> Callable[..., Path]:
    """write_task(source, name="level1/x.py") writes a dedented problem file and returns its path."""

    def write(source: str, name: str = "level1/case.py") -> Path:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source))
        return path

    return write
