"""The `cpu` shape variant: every task with a CPU reference kernel declares one, sized for one
core, and a CPU job that names no shape checks and times it."""

from __future__ import annotations

import pytest
from agentforge.evaluator.api import make_job

from agentforge.candidate import Candidate
from agentforge.kernel_library import list_kernels
from agentforge.task import CPU_SHAPE, backend_default_shapes, load_task, read_task

CPU_KERNEL_TASKS = sorted({k.task_name for k in list_kernels("cpu") if k.backend == "cpu"})


def test_there_are_cpu_reference_kernels() -> None:
    assert len(CPU_KERNEL_TASKS) >= 12


@pytest.mark.parametrize("name", CPU_KERNEL_TASKS)
def test_every_task_with_a_cpu_kernel_declares_a_cpu_shape_of_one_core_size(name: str) -> None:
    task = load_task(name)
    assert CPU_SHAPE in task.shapes, f"{name} has a CPU reference kernel but no `cpu` shape"
    numel = task.input_numel(CPU_SHAPE)
    # Below ~0.5 M elements eager runs in well under a millisecond (harness noise); above ~20 M it
    # takes tens of milliseconds per call on one core and the evaluation minutes.
    assert numel is not None and 500_000 <= numel <= 20_000_000, (name, numel)
    assert task.input_numel(CPU_SHAPE) < task.input_numel("default")


def test_a_cpu_job_without_shapes_checks_the_cpu_and_small_variants_and_times_the_cpu_one() -> None:
    text = read_task("level1/softmax")
    job = make_job(text, Candidate("", "cpu"))
    assert job.shapes == ("cpu", "small") and job.timing_shape == "cpu"
    loaded = make_job(load_task("level1/softmax"), Candidate("", "cpu"))
    assert loaded.shapes == job.shapes and loaded.timing_shape == "cpu"


def test_asked_shapes_other_backends_and_the_kernelbench_track_keep_their_shapes() -> None:
    text = read_task("level1/softmax")
    assert make_job(text, Candidate("", "cpu"), shapes=("odd",)).shapes == ("odd",)
    assert make_job(text, Candidate("", "cuda"), device="cpu").shapes == ()
    assert make_job(text, Candidate("", "cpu"), track="kernelbench").shapes == ()
    gemm = read_task("level1/gemm_bf16")  # no cpu variant: every variant, as before
    assert make_job(gemm, Candidate("", "cpu")).shapes == ()


def test_backend_default_shapes_reads_only_the_names() -> None:
    assert backend_default_shapes(("default", "cpu"), "cpu") == ("cpu",)
    assert backend_default_shapes(None, "cpu") == ()
    assert backend_default_shapes(("default", "small", "cpu"), "triton") == ()
