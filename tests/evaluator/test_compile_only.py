"""Compile-only CUDA verdicts on a machine without a GPU: nvcc builds the candidate's CUDA source for
sm_90a, the verdict is `ok` at the build stage with ptxas's resource report, and a broken source is a
`compile_error` carrying the compiler's message."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from agentforge.evaluator import build_cache
from agentforge.evaluator.compile_only import find_nvcc
from agentforge.evaluator.pipeline import run_pipeline
from agentforge.evaluator.result import EvalJob, Stage, Status

EXPLOITS = Path(__file__).resolve().parent.parent / "exploits"

pytestmark = pytest.mark.skipif(find_nvcc() is None, reason="nvcc is not installed")

LEAN = '''
import torch
from torch import nn
from torch.utils.cpp_extension import load_inline

CUDA = r"""
__global__ void relu_kernel(const float* __restrict__ x, float* __restrict__ y, long n) {
    __shared__ float tile[256];
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    tile[threadIdx.x] = i < n ? x[i] : 0.f;
    __syncthreads();
    if (i < n) y[i] = tile[threadIdx.x] > 0.f ? tile[threadIdx.x] : 0.f;
}
void launch(const float* x, float* y, long n) { relu_kernel<<<(n + 255) / 256, 256>>>(x, y, n); }
"""
CPP = "void launch(const float* x, float* y, long n);"
_ext = load_inline("lean_relu", cpp_sources=CPP, cuda_sources=CUDA, functions=["launch"])


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        _ext.launch(x.data_ptr(), y.data_ptr(), x.numel())
        return y
'''


@pytest.fixture
def fresh_cache(tmp_path: Path) -> Iterator[Path]:
    build_cache.set_cache_root(tmp_path)
    yield tmp_path
    build_cache.set_cache_root(None)


def job(candidate: str) -> EvalJob:
    return EvalJob(task_name="elementwise_relu", task_source=(EXPLOITS / "tasks" / "elementwise_relu.py").read_text(),
                   candidate_source=candidate, backend="cuda", device="cpu", cuda_arch="sm_90a")


def test_a_cuda_candidate_compiles_for_sm90a_with_its_resources(fresh_cache: Path) -> None:
    result = run_pipeline(job(LEAN))
    assert result.status == Status.OK and result.stage == Stage.BUILD, result.summary()
    assert result.compiled and not result.accepted  # nothing ran: no correctness, so not accepted
    assert result.compile is not None and result.compile.arch == "sm_90a"
    assert result.compile.path == "compile-only-nvcc"
    assert "sm_90a" in result.compile.log_tail
    (kernel,) = [r for r in result.compile.resources if "relu_kernel" in r.name]
    assert kernel.registers is not None and kernel.registers > 0
    assert kernel.shared_bytes == 1024


def test_a_broken_cuda_source_is_a_compile_error_with_the_compilers_message(fresh_cache: Path) -> None:
    broken = LEAN.replace("tile[threadIdx.x] = i < n", "tile[threadIdx.x] = undeclared_name + (i < n")
    result = run_pipeline(job(broken))
    assert result.status == Status.COMPILE_ERROR and result.stage == Stage.BUILD
    assert result.error is not None and "nvcc failed" in result.error.message
    assert result.compile is not None and not result.compile.ok
    assert "undeclared_name" in result.compile.log_tail and "error" in result.compile.log_tail
    assert "undeclared_name" in result.error.traceback_tail


@pytest.mark.slow
def test_a_torch_extension_candidate_compiles_for_sm90a(fresh_cache: Path) -> None:
    """The full load_inline shape (torch/extension.h): tens of seconds of nvcc on two cores."""
    result = run_pipeline(job((EXPLOITS / "gpu" / "relu_cuda_honest.py").read_text()))
    assert result.status == Status.OK and result.stage == Stage.BUILD, result.summary()
    assert any(r.registers for r in result.compile.resources)
