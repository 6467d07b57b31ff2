"""Through the judge and the worker: a CUDA job on this GPU-less machine gets the nvcc verdict and
the correctness stage executed by the emulation; a construct that needs a GPU keeps the verdict."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from agentforge.evaluator.compile_only import find_nvcc
from agentforge.evaluator.pipeline import run_pipeline
from agentforge.evaluator.result import EvalJob, Stage, Status

REPO = Path(__file__).resolve().parents[2]
# Slow: nvcc for the compile-only verdict, then the emulation's own host-compiler build, in workers.
pytestmark = [pytest.mark.skipif(find_nvcc() is None, reason="nvcc is not installed"), pytest.mark.slow]

CUDA = r"""
#include <cuda_runtime.h>
__global__ void relu_kernel(const float* __restrict__ x, float* __restrict__ y, long n) {
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] > 0.f ? x[i] : %s;
}
void relu_launch(const float* x, float* y, long n, cudaStream_t s) {
    relu_kernel<<<(unsigned)((n + 255) / 256), 256, 0, s>>>(x, y, n);
}
"""
CPP = r"""
#include <c10/cuda/CUDAStream.h>
void relu_launch(const float* x, float* y, long n, cudaStream_t s);
torch::Tensor relu(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda() && x.is_contiguous(), "relu: a contiguous CUDA tensor");
    auto y = torch::empty_like(x);
    relu_launch(x.data_ptr<float>(), y.data_ptr<float>(), x.numel(), c10::cuda::getCurrentCUDAStream());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""


def candidate(cuda: str) -> str:
    """A KernelBench answer whose forward moves its input with `.cuda()` and whose C++ checks `is_cuda()`."""
    return ("import torch\nfrom torch import nn\nfrom torch.utils.cpp_extension import load_inline\n"
            f"_ext = load_inline('relu_emulated', cpp_sources={json.dumps(CPP)}, cuda_sources={json.dumps(cuda)},"
            " functions=['relu'])\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n"
            "        return _ext.relu(x.cuda())\n")


def job(source: str) -> EvalJob:
    return EvalJob(task_name="level1/relu", task_source=(REPO / "tasks" / "level1" / "relu.py").read_text(),
                   candidate_source=source, backend="cuda", device="cpu", shapes=("small",), emulate=True)


def test_a_cuda_candidate_is_checked_by_the_emulation_beside_its_nvcc_verdict() -> None:
    result = run_pipeline(job(candidate(CUDA % "0.f")))
    assert result.status == Status.OK and result.executed_on == "cpu-emulation", result.summary()
    assert result.compile.path == "compile-only-nvcc" and result.compile.resources
    assert result.correctness and all(r.passed for r in result.correctness)
    assert result.timing is None and result.speedup is None and "no timing" in result.execution_note


def test_inline_ptx_keeps_the_verdict_and_says_execution_needs_a_gpu() -> None:
    ptx = CUDA.replace("long i = ", 'unsigned l; asm volatile("mov.u32 %%0, %%%%laneid;" : "=r"(l));\n    long i = ')
    result = run_pipeline(job(candidate(ptx % "0.f")))
    assert result.status == Status.OK and result.stage == Stage.BUILD and result.compiled, result.summary()
    assert result.executed_on == "" and "inline PTX (asm) at line" in result.execution_note
    assert "needs a GPU" in result.execution_note and not result.correctness
