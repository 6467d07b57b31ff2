"""Kernels produced elsewhere, laid out as KernelBench's runs are, matched to a suite's tasks.

Two layouts are read (both may be mixed in one folder):

- KernelBench's own: `level_{L}_problem_{P}_sample_{S}_kernel.py` anywhere below the folder
  (what its `generate_samples.py` writes into `runs/<run_name>/`); P is the problem number,
  the `19` of `19_ReLU.py`.
- nested: `level{L}/{problem}/sample_{S}/kernel.py`, where `{problem}` is the problem number,
  the task file's stem (`19_ReLU`) or its name; `level{L}/{problem}/kernel.py` is sample 0.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from agentforge.leaderboard.suites import Suite, SuiteTask

_FLAT = re.compile(r"^level_(\d+)_problem_(\d+)_sample_(\d+)_kernel\.py$")
_SAMPLE = re.compile(r"^sample_(\d+)$")


@dataclass(frozen=True)
class KernelSample:
    task: SuiteTask
    sample: int
    path: Path


@dataclass(frozen=True)
class KernelScan:
    samples: tuple[KernelSample, ...]
    unmatched: tuple[Path, ...]  # kernel files whose problem is not in the suite


def scan_kernels(root: Path, suite: Suite) -> KernelScan:
    """Every kernel file below `root` that belongs to a task of `suite`, in suite order."""
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"kernels folder {root} does not exist")
    found: dict[tuple[str, int], KernelSample] = {}
    unmatched: list[Path] = []
    for path in sorted(root.rglob("*.py")):
        located = _locate(path, root)
        if located is None:
            continue
        level, problem, sample = located
        task = suite.find(level, problem)
        if task is None:
            unmatched.append(path)
            continue
        found.setdefault((task.name, sample), KernelSample(task, sample, path))
    order = {name: i for i, name in enumerate(suite.task_names)}
    samples = sorted(found.values(), key=lambda s: (order[s.task.name], s.sample))
    return KernelScan(tuple(samples), tuple(unmatched))


def _locate(path: Path, root: Path) -> tuple[int | None, str, int] | None:
    """(level, problem, sample) of a kernel file, or None for a file that is not one."""
    flat = _FLAT.match(path.name)
    if flat:
        return int(flat.group(1)), flat.group(2), int(flat.group(3))
    if path.name != "kernel.py":
        return None
    parts = path.relative_to(root).parts[:-1]
    sample = 0
    if parts and _SAMPLE.match(parts[-1]):
        sample = int(_SAMPLE.match(parts[-1]).group(1))  # type: ignore[union-attr]
        parts = parts[:-1]
    if len(parts) < 2 or not parts[-2].startswith("level"):
        return None
    digits = parts[-2][5:].lstrip("_")
    return (int(digits) if digits.isdigit() else None), parts[-1], sample
