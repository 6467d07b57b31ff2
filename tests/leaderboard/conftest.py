"""Leaderboard fixtures: a tiny tasks tree and a KernelBench-layout kernels folder in tmp."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fixtures import relu

RELU = relu.task(64)

SCALE = RELU.replace("torch.relu(x)", "x * 2.0")

# A pure-PyTorch answer: correct, but the integrity rule torch_fallback rejects it.
FALLBACK = '''
import torch
import torch.nn as nn

class ModelNew(nn.Module):
    def forward(self, x):
        return torch.relu(x)
'''

# A lean-form C++ answer (agentforge.evaluator.native.load_cpp, ~0.1 s to build).
LEAN_RELU = relu.lean_candidate("relu_lean")

WRONG = FALLBACK.replace("torch.relu(x)", "x * 0.0")


@pytest.fixture
def tiny_tasks(tmp_path: Path) -> Path:
    root = tmp_path / "tasks"
    (root / "level1").mkdir(parents=True)
    (root / "level2").mkdir()
    (root / "level1" / "1_ReLU.py").write_text(RELU)
    (root / "level1" / "2_Scale.py").write_text(SCALE)
    (root / "level2" / "1_ScaleAgain.py").write_text(SCALE)
    return root


@pytest.fixture
def kernels(tmp_path: Path) -> Path:
    """KernelBench's flat layout and the nested one, mixed."""
    root = tmp_path / "runs" / "my_run"
    root.mkdir(parents=True)
    (root / "level_1_problem_1_sample_0_kernel.py").write_text(LEAN_RELU)
    (root / "level_1_problem_1_sample_1_kernel.py").write_text(FALLBACK)
    (root / "level_1_problem_7_sample_0_kernel.py").write_text(FALLBACK)  # no such problem
    nested = root / "level1" / "2_Scale" / "sample_0"
    nested.mkdir(parents=True)
    (nested / "kernel.py").write_text(WRONG)
    return root
