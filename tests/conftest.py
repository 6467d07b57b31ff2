"""Shared test plumbing: the `gpu` marker skips cleanly without CUDA; `docker` and `postgres`
tests skip themselves (their fixtures say why) where no daemon or server can be started."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# A CLI run starts a detached build of torch's precompiled extension header (90 s of both cores,
# 2 GB) for each new build cache that meets a load_inline candidate. Tests each use a cache of their
# own, so they would start dozens: off here, on in the test of that feature.
os.environ.setdefault("AGENTFORGE_SANDBOX_PREBUILD_HEADERS", "false")
# Likewise a CLI run keeps a spare child (an idle interpreter with torch) for its next CPU job;
# tests/sandbox/test_spares.py turns spares on where it tests them.
os.environ.setdefault("AGENTFORGE_SANDBOX_WARM_SPARES", "0")

REPO_ROOT = Path(__file__).resolve().parent.parent


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if _cuda_available():
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU (none visible to torch)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO_ROOT


@pytest.fixture(scope="session")
def tasks_root() -> Path:
    return REPO_ROOT / "tasks"
