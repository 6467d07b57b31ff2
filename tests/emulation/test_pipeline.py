"""Through the judge and the worker: a CUDA job on this GPU-less machine runs in one worker and one
drive, the correctness stage executed by the emulation, every build on the way judged by nvcc with
torch's flags first; a construct that needs a GPU keeps the verdict, a failed build is the verdict."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from agentforge.evaluator.judge.pipeline import run_pipeline
from agentforge.evaluator.judge.remote import WorkerClient
from agentforge.evaluator.result import EvalJob, Stage, Status
from agentforge.evaluator.worker.compile_only import find_nvcc
from agentforge.sandbox.worker import launch_worker

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
    result = run_pipeline(job(candidate(CUDA % "0.f")), launch_worker)
    assert result.status == Status.OK and result.executed_on == "cpu-emulation", result.summary()
    assert result.compile.path == "compile-only-nvcc" and result.compile.resources
    assert result.correctness and all(r.passed for r in result.correctness)
    assert result.timing is None and result.speedup is None and "no timing" in result.execution_note


def test_inline_ptx_keeps_the_verdict_and_says_execution_needs_a_gpu() -> None:
    ptx = CUDA.replace("long i = ", 'unsigned l; asm volatile("mov.u32 %%0, %%%%laneid;" : "=r"(l));\n    long i = ')
    result = run_pipeline(job(candidate(ptx % "0.f")), launch_worker)
    assert result.status == Status.OK and result.stage == Stage.BUILD and result.compiled, result.summary()
    assert result.executed_on == "" and "inline PTX (asm) at line" in result.execution_note
    assert "needs a GPU" in result.execution_note and not result.correctness


# The extension is built on the first forward, behind `x.is_cuda`, once per process (a module
# global), and every step of the candidate is logged to a file: the log shows how many times the
# module ran, the build was attempted and forward was called, whichever worker did it.
LAZY = """import torch
from torch import nn
from torch.utils.cpp_extension import load_inline

LOG = {log!r}
_ext = None
{head}

def note(what):
    with open(LOG, "a") as f:
        f.write(what + "\\n")

note("module")

class ModelNew(nn.Module):
    def forward(self, x):
        global _ext
        note("forward")
        if x.is_cuda and _ext is None:
            note("build")
{build}
        return _ext.relu(x.cuda()) if _ext is not None else torch.relu(x)
"""
GOOD_BUILD = (f"            _ext = load_inline('relu_emulated', cpp_sources={json.dumps(CPP)},"
              f" cuda_sources={json.dumps(CUDA % '0.f')}, functions=['relu'])")
# nvcc rejects it (an undeclared name; no torch header, so it fails in seconds); the candidate
# catches the failure and falls back to torch.relu, which would pass every check.
BROKEN_BUILD = """            try:
                load_inline("relu_broken", cpp_sources="", no_implicit_headers=True,
                            cuda_sources="__global__ void k(float* y) { y[0] = undeclared_name; }")
            except RuntimeError:
                note("fallback")"""


@pytest.fixture
def worker_visible() -> Iterator[Path]:
    """A folder the candidate worker can write to: its /tmp is a private one (the sandbox's
    separation), so a log under pytest's tmp_path would be written where the test cannot read it."""
    import shutil
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="agentforge-test-", dir="/var/tmp"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def spawned() -> tuple[list[int], Callable[[bool], WorkerClient]]:
    """A launcher for `run_pipeline`, and the worker processes it started."""
    started: list[int] = []

    def counting(interpret: bool = False) -> WorkerClient:
        client = launch_worker(interpret)
        started.append(client.pid)
        return client

    return started, counting


def test_one_worker_one_drive_builds_in_forward_once_for_nvcc_and_the_emulation(
        worker_visible: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = worker_visible / "steps.log"
    started, launch = spawned()
    result = run_pipeline(job(LAZY.format(log=str(log), head="", build=GOOD_BUILD)), launch)
    assert result.status == Status.OK and result.executed_on == "cpu-emulation", result.summary()
    assert result.correctness and all(r.passed for r in result.correctness)
    # nvcc's verdict on the build made in forward (torch's flags, the resource report) ...
    assert result.compile.path == "compile-only-nvcc" and result.compile.resources
    assert "compile-only: 1 build(s); ModelNew driven in the CPU emulation up to forward" in result.compile.log_tail
    # ... and the emulation's kernels checked by the same drive: one worker, the module run once,
    # the build attempted once, forward called by the correctness stage only.
    steps = log.read_text().splitlines()
    assert len(started) == 1 and steps.count("module") == 1 and steps.count("build") == 1, steps
    assert steps.count("forward") >= len(result.correctness)


def test_a_caught_nvcc_failure_after_a_gpu_only_build_is_the_verdict_and_nothing_runs_on(
        worker_visible: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The module body builds a kernel with inline PTX (the emulation cannot run it: the drive goes
    on with a stand-in); forward's build behind `x.is_cuda` is still reached, fails in nvcc, and is
    caught by the candidate, which falls back to torch: compile_error, the drive ended at its call."""
    log = worker_visible / "steps.log"
    ptx = CUDA.replace("long i = ", 'unsigned l; asm volatile("mov.u32 %%0, %%%%laneid;" : "=r"(l));\n    long i = ')
    head = (f"_ptx = load_inline('relu_emulated', cpp_sources={json.dumps(CPP)},"
            f" cuda_sources={json.dumps(ptx % '0.f')}, functions=['relu'])")
    started, launch = spawned()
    result = run_pipeline(job(LAZY.format(log=str(log), head=head, build=BROKEN_BUILD)), launch)
    assert result.status == Status.COMPILE_ERROR and result.stage == Stage.BUILD, result.summary()
    assert 'identifier "undeclared_name" is undefined' in result.error.message
    assert "nvcc failed to compile relu_broken" in result.error.message and "(build 2 of 2)" in result.error.message
    assert not result.correctness and result.executed_on == ""
    steps = log.read_text().splitlines()
    assert len(started) == 1 and steps == ["module", "forward", "build", "fallback"], steps


def test_shapes_too_large_for_the_emulation_keep_the_verdict_with_a_note(monkeypatch: pytest.MonkeyPatch) -> None:
    """No shape fits the emulation: the nvcc verdict alone (the compile-only drive), saying why."""
    from agentforge.evaluator.cuda_emulation import judge

    monkeypatch.setattr(judge, "MAX_ELEMENTS", 0)
    result = run_pipeline(job(candidate(CUDA % "0.f")), launch_worker)
    assert result.status == Status.OK and result.stage == Stage.BUILD, result.summary()
    assert result.compile.path == "compile-only-nvcc" and "under the CUDA lookalike" in result.compile.log_tail
    assert result.executed_on == "" and not result.correctness
    assert result.execution_note.startswith("not executed: every shape is too large for the CPU emulation (small (")
