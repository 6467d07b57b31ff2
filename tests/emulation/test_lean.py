"""The lean `native.load_cuda` path executed by the CPU emulation (issue 14): a plain g++ library of the
`extern "C"` kernels (no torch header build, about a second cold), called as CuPy's kernels are; through
the judge, a lean candidate is checked for correctness beside its nvcc verdict."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from agentforge.evaluator import build_cache
from agentforge.evaluator.cuda_emulation import lean
from agentforge.evaluator.judge.pipeline import run_pipeline
from agentforge.evaluator.result import EvalJob, Stage, Status
from agentforge.evaluator.worker.compile_only import find_nvcc
from agentforge.sandbox.worker import launch_worker

REPO = Path(__file__).resolve().parents[2]
RELU_CANDIDATE = REPO / "tests" / "evaluator" / "candidates" / "relu_load_cuda.py"
ILLEGAL = "CUDA error (CPU emulation): an illegal memory access was encountered: "

KERNELS = r"""
#include <cuda_runtime.h>
__device__ float twice(float v) { return 2.f * v; }
extern "C" __global__ void __launch_bounds__(256) axpb(const float* __restrict__ x, float* y, int n, float a,
                                                      long long stride, const unsigned b) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i * stride] = a * x[i] + (float)b;
}
extern "C" {
__global__ void row_sum(const float* x, float* out, int cols) {   // one block per row, a shared tree
    extern __shared__ float part[];
    float acc = 0.f;
    for (int j = threadIdx.x; j < cols; j += blockDim.x) acc += x[blockIdx.x * cols + j];
    part[threadIdx.x] = acc;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s /= 2) {
        if (threadIdx.x < s) part[threadIdx.x] += part[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[blockIdx.x] = twice(part[0]) / 2.f;
}
}
__global__ void not_found_by_name(float* y) { y[0] = 1.f; }
template <int N> __global__ void templated(float* y) { y[0] = N; }
"""


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("lean-cache")
    build_cache.set_cache_root(root)
    yield root
    build_cache.set_cache_root(None)


def test_only_extern_c_kernels_are_found_by_name() -> None:
    assert lean.extern_c_kernels(KERNELS) == ["axpb", "row_sum"]


def test_kernels_run_with_the_real_calling_convention(cache: Path) -> None:
    module = lean.load_cuda_emulated("lean_kernels", KERNELS)
    axpb = module.get_function("axpb")
    assert axpb.param_sizes == (8, 8, 4, 4, 8, 4)
    x = torch.randn(1000)
    y = torch.zeros(2000)
    # Python numbers are typed by the signature (int, float, long long, unsigned), tensors are pointers.
    axpb(((1000 + 255) // 256,), (256,), (x, y.data_ptr(), 1000, 1.5, 2, 3))
    assert torch.allclose(y[::2], 1.5 * x + 3) and not y[1::2].any()
    rows = torch.randn(7, 333)
    out = torch.empty(7)
    module.get_function("row_sum")((7,), (128,), (rows, out, 333), shared_mem=128 * 4)  # fibers: barriers
    assert torch.allclose(out, rows.sum(1), atol=1e-4)
    with pytest.raises(lean.CudaEmulationError, match="invalid configuration argument"):
        axpb((1,), (2048,), (x, y, 1000, 1.0, 1, 0))
    with pytest.raises(lean.CudaEmulationError, match="too many resources requested for launch"):
        axpb((1,), (512,), (x, y, 1000, 1.0, 1, 0))  # past __launch_bounds__(256): nothing runs
    with pytest.raises(TypeError, match="takes 6 arguments, 3 given"):
        axpb((1,), (256,), (x, y, 1000))
    with pytest.raises(TypeError, match="grid must be a tuple"):
        axpb(4, (256,), (x, y, 1000, 1.0, 1, 0))
    with pytest.raises(TypeError, match="args must be a tuple"):
        axpb((4,), (256,), x)
    for name in ("not_found_by_name", "templated"):
        with pytest.raises(lean.CudaEmulationError, match="CUDA_ERROR_NOT_FOUND"):
            module.get_function(name)


def test_an_out_of_bounds_read_faults_and_spoils_later_launches(cache: Path) -> None:
    past = KERNELS.replace("if (i < n) y[i * stride]", "if (i <= n) y[i * stride]")
    module = lean.load_cuda_emulated("lean_past_end", past)
    axpb = module.get_function("axpb")
    x, y = torch.randn(1024), torch.zeros(2048)
    with pytest.raises(lean.CudaEmulationError) as fault:
        axpb((5,), (256,), (x, y, 1024, 1.0, 1, 0))  # thread 1024 reads x[1024], past x's end
    assert str(fault.value).startswith(ILLEGAL + "out-of-bounds global read")
    assert "bytes past the end of a 4096-byte allocation" in str(fault.value)
    with pytest.raises(lean.CudaEmulationError, match="sticky: an earlier kernel"):
        axpb((1,), (32,), (x, y, 32, 1.0, 1, 0))
    module.device_reset()  # the process's one emulated context, shared with the other tests' extensions
    axpb((1,), (32,), (x, y, 32, 1.0, 1, 0))
    assert torch.allclose(y[:32], x[:32])


def test_inline_ptx_is_not_built_for_the_emulation() -> None:
    ptx = KERNELS.replace("int i = ", 'unsigned l; asm volatile("mov.u32 %0, %%laneid;" : "=r"(l));\n    int i = ')
    with pytest.raises(lean.NeedsGpu, match=r"inline PTX \(asm\) at line"):
        lean.emulated_source(ptx)


# ----- through the judge: nvcc's verdict, then the emulation's correctness stage ---------------------
needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="nvcc is not installed")


def job(source: str) -> EvalJob:
    return EvalJob(task_name="level1/relu", task_source=(REPO / "tasks" / "level1" / "relu.py").read_text(),
                   candidate_source=source, backend="cuda", device="cpu", shapes=("small",), emulate=True)


@needs_nvcc
def test_a_lean_candidate_is_executed_by_the_emulation_beside_its_nvcc_verdict() -> None:
    result = run_pipeline(job(RELU_CANDIDATE.read_text()), launch_worker)
    assert result.status == Status.OK and result.executed_on == "cpu-emulation", result.summary()
    assert result.compile.path == "compile-only-nvcc" and result.compile.arch == "sm_90a"
    assert [k.name for k in result.compile.resources] == ["relu"]
    assert "small" in {r.shape for r in result.correctness} and all(r.passed for r in result.correctness)
    assert result.timing is None and result.speedup is None and "no timing" in result.execution_note


@needs_nvcc
def test_a_lean_candidate_reading_past_its_input_fails_at_run_time() -> None:
    source = RELU_CANDIDATE.read_text().replace("if (i < n) {", "if (i <= n) {")
    result = run_pipeline(job(source), launch_worker)
    assert result.status == Status.RUNTIME_ERROR and result.executed_on == "cpu-emulation", result.summary()
    # x[n] read or y[n] written, whichever of the two allocations drew its guard past its end
    assert ILLEGAL + "out-of-bounds global" in result.error.message and "past the end" in result.error.message
    assert result.compile.path == "compile-only-nvcc" and result.compile.resources  # the verdict stands


@needs_nvcc
def test_a_lean_candidate_with_inline_ptx_keeps_the_verdict_and_is_not_executed() -> None:
    source = RELU_CANDIDATE.read_text().replace(
        "long long i = ", 'unsigned l; asm volatile("mov.u32 %0, %%laneid;" : "=r"(l));\n    long long i = ')
    result = run_pipeline(job(source), launch_worker)
    assert result.status == Status.OK and result.stage == Stage.BUILD and result.compiled, result.summary()
    assert result.executed_on == "" and "inline PTX (asm) at line" in result.execution_note
    assert "needs a GPU" in result.execution_note and not result.correctness
