"""The hardened evaluator accepts every CPU reference kernel (smallest shape variant, eager
baseline, short timing), and CUDA reference kernels compile for sm_90a without a GPU.

The full runs (every shape variant, all baselines) are `benchmarks/reference_kernels.py`; their
results are the committed records.
"""

from __future__ import annotations

import pytest
from agentforge.evaluator.api import make_job
from agentforge.evaluator.judge.pipeline import run_pipeline
from agentforge.evaluator.result import Measure, Status, TimingConfig
from agentforge.evaluator.worker.compile_only import find_nvcc
from agentforge.sandbox.worker import launch_worker

from agentforge.candidate import Candidate
from agentforge.kernel_library import find_kernel, list_kernels
from agentforge.task import load_task

from .cuda_host import capture_load_inline, host_syntax_check_many

CPU_KERNELS = list_kernels("cpu")
QUICK = TimingConfig(warmup=1, min_reps=3, max_reps=5, time_cap_s=0.2, recheck_fraction=0.5)
# Representative CUDA kernels for CI: a bf16 row kernel with templates and a float4 elementwise one.
CUDA_SAMPLES = ("level1/rms_norm", "level1/relu")


@pytest.mark.parametrize("kernel", CPU_KERNELS, ids=[k.task_name for k in CPU_KERNELS])
def test_cpu_kernel_is_accepted(kernel):
    task = load_task(kernel.task_name)
    shape = task.smallest_shape()
    job = make_job(task, Candidate(kernel.source, backend="cpu"), device="cpu", shapes=(shape,),
                   timing_shape=shape, measure=Measure(baselines=("eager",), compile_modes=()), timing=QUICK)
    result = run_pipeline(job, launch_worker)
    # the flags' evidence, not only their names: a timing_disagreement says which clock disagreed
    assert result.accepted, (result.summary(), [(f.rule, f.evidence) for f in result.flags],
                             result.timing.notes if result.timing else None)
    assert result.candidate_us is not None and result.eager_us is not None


@pytest.mark.skipif(find_nvcc() is None, reason="nvcc is not installed")
@pytest.mark.parametrize("task_name", CUDA_SAMPLES)
def test_cuda_kernel_compiles_for_sm90a(task_name):
    kernel = find_kernel(task_name, "cuda", gpu="h100")
    assert kernel is not None
    task = load_task(task_name)
    job = make_job(task, Candidate(kernel.source, backend="cuda"), device="cpu", compile_only=True,
                   shapes=(task.smallest_shape(),))
    result = run_pipeline(job, launch_worker)
    assert result.status == Status.OK, result.summary()
    assert result.compile is not None and result.compile.ok and result.compile.arch == "sm_90a"
    assert result.compile.resources, "ptxas reported no kernels"
    for res in result.compile.resources:
        assert res.spill_store_bytes == 0 and res.spill_load_bytes == 0, res
    assert not result.accepted and result.speedup is None  # nothing is claimed without a GPU


CUDA_KERNELS = [k for k in list_kernels("h100") if k.backend == "cuda"]  # Triton kernels: tests/kernels/test_layout.py


@pytest.fixture(scope="module")
def host_verdicts() -> dict[str, tuple[bool, str]]:
    return host_syntax_check_many({k.task_name: capture_load_inline(k.source) for k in CUDA_KERNELS})


@pytest.mark.skipif(find_nvcc() is None, reason="nvcc is not installed")
@pytest.mark.parametrize("kernel", CUDA_KERNELS, ids=[k.task_name for k in CUDA_KERNELS])
def test_cuda_host_wrapper_compiles_against_torch_headers(kernel, host_verdicts):
    """The host wrapper that load_inline builds only on a GPU machine, checked here with g++ against
    torch's headers (all kernels in one compiler run). It caught a host wrapper whose loop variable
    shadowed a tensor argument."""
    ok, log = host_verdicts[kernel.task_name]
    assert ok, log[-3000:]
