"""One job end to end through the real entry (`agentforge.evaluator.pipeline.run_pipeline`) in the
sandbox child: a float32 ReLU task and an honest C++ kernel on the CPU backend."""

from __future__ import annotations

from pathlib import Path

import pytest
from agentforge.evaluator.result import EvalJob, Measure, Status
from agentforge.sandbox import SandboxConfig, run

pytestmark = pytest.mark.slow

TASK = '''
import torch

N = 4096


class Model(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(N)]


def get_init_inputs():
    return []
'''

CANDIDATE = '''import ctypes

import torch
from agentforge.evaluator.native import load_cpp

lib = load_cpp("sandbox_e2e_relu", r"""
extern "C" void relu(const float* x, float* y, long n) {
    for (long i = 0; i < n; ++i) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}
""", openmp=False)


class ModelNew(torch.nn.Module):
    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        lib.relu(ctypes.c_void_p(x.data_ptr()), ctypes.c_void_p(y.data_ptr()), ctypes.c_long(x.numel()))
        return y
'''


def test_real_pipeline_through_the_sandbox(tmp_path: Path) -> None:
    job = EvalJob(task_name="relu_e2e", task_source=TASK, candidate_source=CANDIDATE, backend="cpu",
                  device="cpu", measure=Measure(timing=False, baselines=("eager",)))
    config = SandboxConfig(timeout_s=300, workdir_root=str(tmp_path / "work"), cache_dir=str(tmp_path / "cache"))
    result = run(job, config)
    assert result.status == Status.OK, result.error
    assert result.compiled and result.correct
    assert result.provenance.sandbox.startswith("process+")


def test_child_pins_the_numeric_switches(tmp_path: Path) -> None:
    import sys

    here = str(Path(__file__).resolve().parent)
    config = SandboxConfig(entry="fake_entries:report_switches", python_paths=(here,), torch_switches=True,
                           timeout_s=120, workdir_root=str(tmp_path / "work"), cache_dir=str(tmp_path / "c"))
    job = EvalJob(task_name="switches", task_source="", candidate_source="")
    result = run(job, config)
    assert result.status == Status.OK, result.error
    assert result.candidate_meta["note"] == "tf32=False,False precision=highest deterministic=False"
    assert "fake_entries" not in sys.modules  # the parent never imported the entry or the candidate
