"""Helpers shared by the sandbox tests (importable because conftest puts this folder on sys.path,
which is also where the child finds `fake_entries`)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from agentforge.evaluator.result import EvalJob
from agentforge.sandbox import SandboxConfig
from agentforge.sandbox.isolation import probe

from tests.fixtures.sandbox import quiet

HERE = Path(__file__).resolve().parent
ISOLATING = [m for m in ("bwrap", "unshare") if probe(m) is None]
MODES = ["none", *ISOLATING]


def make_job(source: str, task_name: str = "sandbox-test", device: str = "cpu") -> EvalJob:
    return EvalJob(task_name=task_name, task_source="", candidate_source=source, device=device)


def fake_config(tmp_path: Path, entry: str = "exec_candidate", **changes: object) -> SandboxConfig:
    """A config running `fake_entries:<entry>` in the child, with short budgets, under tmp_path."""
    base: dict[str, object] = dict(
        entry=f"fake_entries:{entry}", python_paths=(str(HERE),), torch_switches=False,
        timeout_s=20.0, memory_gb=4.0, workdir_root=str(tmp_path / "work"),
        cache_dir=str(tmp_path / "cache"), kill_grace_s=0.5,
    )
    base.update(changes)
    return quiet(**base)


def isolating_modes() -> list[object]:
    """bwrap and unshare where they work here; one skipped case with the reason where neither does."""
    if ISOLATING:
        return list(ISOLATING)
    return [pytest.param("bwrap", marks=pytest.mark.skip(reason=f"no isolation here: {probe('bwrap')}"))]


def processes_with(marker: str) -> list[int]:
    """Host pids whose command line contains `marker`."""
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                cmdline = Path(entry.path, "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if marker in cmdline:
                found.append(int(entry.name))
    return found
