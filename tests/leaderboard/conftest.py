"""Leaderboard fixtures: a tiny tasks tree and a KernelBench-layout kernels folder in tmp."""

from __future__ import annotations

from pathlib import Path

import pytest

RELU = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)

N = 64

def get_inputs():
    return [torch.randn(N)]

def get_init_inputs():
    return []
'''

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
LEAN_RELU = '''
import ctypes
import torch
import torch.nn as nn
from agentforge.evaluator.native import load_cpp

_lib = load_cpp("relu_lean", r"""
extern "C" void relu(const float* x, float* y, long n) {
    for (long i = 0; i < n; ++i) y[i] = x[i] > 0.f ? x[i] : 0.f;
}
""")

class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        _lib.relu(ctypes.c_void_p(x.data_ptr()), ctypes.c_void_p(y.data_ptr()), ctypes.c_long(x.numel()))
        return y
'''

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
