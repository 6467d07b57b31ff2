"""The runner with an in-process executor: planning, storing, resuming, hold-out, suite runs."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from agentforge.evaluator.result import (
    CompileRecord,
    CorrectnessRecord,
    ErrorRecord,
    EvalJob,
    EvalResult,
    Stage,
    Status,
)

from agentforge.leaderboard.runner import (
    JobOptions,
    OptimizeOutcome,
    default_tracks,
    detect_backend,
    eval_kernels,
    job_key,
    run_suite,
)
from agentforge.leaderboard.suites import Holdout, load_suite
from agentforge.store import ResultsStore

OPTIONS = JobOptions(backend="cpu", device="cpu", tracks=("hardened", "kernelbench"))


class FakeExecutor:
    """Accepts every job whose candidate mentions load_cpp; records what it was given."""

    def __init__(self) -> None:
        self.jobs: list[EvalJob] = []

    def __call__(self, jobs: Sequence[EvalJob], on_result: Callable[[EvalResult], None]) -> list[EvalResult]:
        out = []
        for job in jobs:
            self.jobs.append(job)
            ok = "load_cpp" in job.candidate_source
            result = EvalResult(
                task_name=job.task_name, candidate_hash="h", backend=job.backend,
                status=Status.OK if ok else Status.MISMATCH, stage=Stage.DONE,
                compile=CompileRecord(ok=True, backend="cpu"),
                correctness=(CorrectnessRecord("default", job.correctness.base_seed, ok),),
                candidate_meta=dict(job.candidate_meta),
            )
            on_result(result)
            out.append(result)
        return out


@pytest.fixture
def store(tmp_path: Path):
    with ResultsStore(f"sqlite:///{tmp_path / 'r.db'}") as opened:
        yield opened


def test_eval_stores_each_job_once_and_resumes(tiny_tasks: Path, kernels: Path, store: ResultsStore) -> None:
    suite = load_suite("tasks", tiny_tasks)
    executor = FakeExecutor()
    report = eval_kernels(suite, kernels, store=store, entry="e", options=OPTIONS, executor=executor)
    assert (report.planned, report.skipped, report.stored) == (6, 0, 6)  # 3 samples x 2 tracks
    assert [p.name for p in report.unmatched] == ["level_1_problem_7_sample_0_kernel.py"]
    rows = store.evaluations(entry="e")
    assert sorted({(r.task, r.sample, r.track) for r in rows}) == sorted(
        (t, s, tr) for t, s in [("level1/1_ReLU", 0), ("level1/1_ReLU", 1), ("level1/2_Scale", 0)]
        for tr in ("hardened", "kernelbench"))
    assert {j.track for j in executor.jobs} == {"hardened", "kernelbench"}
    assert store.suite_tasks("tasks") == [
        ("level1/1_ReLU", 1), ("level1/2_Scale", 1), ("level2/1_ScaleAgain", 2)]

    again = eval_kernels(suite, kernels, store=store, entry="e", options=OPTIONS, executor=FakeExecutor())
    assert (again.planned, again.skipped, again.stored) == (6, 6, 0)
    assert len(store.evaluations()) == 6


def test_a_changed_kernel_is_evaluated_again(tiny_tasks: Path, kernels: Path, store: ResultsStore) -> None:
    suite = load_suite("tasks", tiny_tasks)
    eval_kernels(suite, kernels, store=store, entry="e", options=OPTIONS, executor=FakeExecutor())
    path = kernels / "level_1_problem_1_sample_1_kernel.py"
    path.write_text(path.read_text() + "\n# v2\n")
    again = eval_kernels(suite, kernels, store=store, entry="e", options=OPTIONS, executor=FakeExecutor())
    assert again.stored == 2


def test_holdout_reaches_jobs_not_the_store(tiny_tasks: Path, kernels: Path, store: ResultsStore) -> None:
    suite = load_suite("level1", tiny_tasks)
    executor = FakeExecutor()
    holdout = Holdout(seed=777123, shapes={"level1/1_ReLU": {"odd": {"N": 33}}})
    eval_kernels(suite, kernels, store=store, entry="e", options=OPTIONS, executor=executor, holdout=holdout)
    assert all(j.correctness.base_seed == 777123 for j in executor.jobs)
    assert any("secret_odd" in j.task_source for j in executor.jobs)
    assert all("777123" not in r.result_json for r in store.evaluations())


def test_progress_bar_runs(tiny_tasks: Path, kernels: Path, store: ResultsStore) -> None:
    report = eval_kernels(load_suite("tasks", tiny_tasks), kernels, store=store, entry="e", options=OPTIONS,
                          executor=FakeExecutor(), progress=True)
    assert report.stored == 6


def test_job_key_and_backend_detection() -> None:
    assert job_key("e", "s", "hardened", "t", 0, "x") != job_key("e", "s", "kernelbench", "t", 0, "x")
    assert job_key("e", "s", "hardened", "t", 0, "x") == job_key("e", "s", "hardened", "t", 0, "x")
    assert detect_backend("import triton\n") == "triton"
    assert detect_backend("__global__ void k() {}") == "cuda"
    assert detect_backend("from agentforge.evaluator.native import load_cpp") == "cpu"


def test_run_suite_optimises_each_task_once(tiny_tasks: Path, store: ResultsStore) -> None:
    from .conftest import LEAN_RELU

    suite = load_suite("tasks", tiny_tasks)
    calls: list[str] = []

    def optimizer(task) -> OptimizeOutcome:
        calls.append(task.name)
        if task.name == "level2/1_ScaleAgain":
            raise RuntimeError("provider down")
        return OptimizeOutcome(LEAN_RELU, cost_usd=0.25, tokens=1000, minutes=2.0, summary={"rounds": 3})

    report = run_suite(suite, store=store, entry="m1", optimizer=optimizer, options=OPTIONS,
                       executor=FakeExecutor(), workers=2, provider="library", model="lib")
    assert sorted(calls) == sorted(suite.task_names)
    assert report.stored == 4  # two finished tasks x two tracks
    runs = {r.task: r for r in store.runs(entry="m1")}
    assert runs["level2/1_ScaleAgain"].status == "failed"
    assert "provider down" in runs["level2/1_ScaleAgain"].summary["error"]
    assert runs["level1/1_ReLU"].cost_usd == 0.25 and runs["level1/1_ReLU"].best_code_hash

    calls.clear()
    again = run_suite(suite, store=store, entry="m1", optimizer=optimizer, options=OPTIONS,
                      executor=FakeExecutor(), workers=2)
    assert calls == ["level2/1_ScaleAgain"]  # finished tasks are skipped; the failed one is retried
    assert again.stored == 0 and again.skipped == 4


# A task sized like the project's: a GPU-sized default shape, a `cpu` variant and a `small` one.
GPU_SIZED = '''
import torch
import torch.nn as nn

N = 1 << 30
SHAPES = {"small": {"N": 33}, "cpu": {"N": 4096}, "odd": {"N": 4097}}

class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)

def get_inputs():
    return [torch.randn(N)]

def get_init_inputs():
    return []
'''


@pytest.fixture
def gpu_sized(tmp_path: Path) -> Path:
    (tmp_path / "sized" / "level1").mkdir(parents=True)
    (tmp_path / "sized" / "level1" / "relu.py").write_text(GPU_SIZED)
    return tmp_path / "sized"


def test_ranking_checks_the_backends_shapes(gpu_sized: Path, store: ResultsStore) -> None:
    """Issue 30: ranked on its GPU-sized default shape, every CPU job was killed for memory."""
    from .conftest import LEAN_RELU

    suite = load_suite("tasks", gpu_sized)
    executor = FakeExecutor()
    run_suite(suite, store=store, entry="m", optimizer=lambda task: OptimizeOutcome(LEAN_RELU), options=OPTIONS,
              executor=executor)
    hardened = [j for j in executor.jobs if j.track == "hardened"]
    assert [(j.shapes, j.timing_shape) for j in hardened] == [(("cpu", "small"), "cpu")]


def test_ranking_checks_the_shapes_asked_for(gpu_sized: Path, store: ResultsStore) -> None:
    from .conftest import LEAN_RELU

    executor = FakeExecutor()
    options = JobOptions(backend="cpu", device="cpu", tracks=("hardened",), shapes=("odd", "small"))
    run_suite(load_suite("tasks", gpu_sized), store=store, entry="m", optimizer=lambda task: OptimizeOutcome(LEAN_RELU),
              options=options, executor=executor)
    assert [(j.shapes, j.timing_shape) for j in executor.jobs] == [(("odd", "small"), "odd")]


def test_default_tracks_on_the_cpu(gpu_sized: Path, tiny_tasks: Path) -> None:
    # A task with a `cpu` variant sizes its default (the kernelbench track's only shape) for a GPU.
    assert default_tracks(load_suite("tasks", gpu_sized), on_cpu=True) == ("hardened",)
    assert default_tracks(load_suite("tasks", gpu_sized), on_cpu=False) == ("hardened", "kernelbench")
    assert default_tracks(load_suite("tasks", tiny_tasks), on_cpu=True) == ("hardened", "kernelbench")


def test_a_task_that_fails_when_ranked_keeps_its_reason(tiny_tasks: Path, store: ResultsStore) -> None:
    from .conftest import LEAN_RELU

    def task_error(jobs, on_result):
        out = [EvalResult(task_name=j.task_name, candidate_hash="h", backend="cpu", status=Status.TASK_ERROR,
                          stage=Stage.TASK, error=ErrorRecord("TaskInputsError", "get_inputs() raised"),
                          candidate_meta=dict(j.candidate_meta)) for j in jobs]
        for r in out:
            on_result(r)
        return out

    report = run_suite(load_suite("level1", tiny_tasks), store=store, entry="m", options=OPTIONS,
                       optimizer=lambda task: OptimizeOutcome(LEAN_RELU), executor=task_error)
    assert set(report.task_errors) == {"level1/1_ReLU", "level1/2_Scale"}
    runs = {r.task: r for r in store.runs(entry="m")}
    assert "TaskInputsError: get_inputs() raised" in runs["level1/1_ReLU"].summary["rank_error"]
