"""The leaderboard consumes eval verdicts: a task that fails on its own (`task_error`) is skipped at
once with its reason, nothing is scored against the entry for it, and its other jobs never run.

The rule is pinned with an in-process executor returning task_error verdicts built directly; then
the real process sandbox and evaluator run a KernelBench-layout folder against a task file that
raises at import, which planning must not import either."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
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

from agentforge.leaderboard.executors import make_executor
from agentforge.leaderboard.runner import JobOptions, eval_kernels
from agentforge.leaderboard.suites import load_suite
from agentforge.store import ResultsStore
from tests.fixtures import relu
from tests.fixtures.sandbox import quiet

GOOD_TASK = relu.task(64)

RAISES_AT_IMPORT = 'import torch\nraise RuntimeError("this task is broken at import")\n'

LEAN_RELU = relu.lean_candidate("relu_lean_lb")


@pytest.fixture
def layout(tmp_path: Path) -> tuple[Path, Path]:
    """tasks/level1/{1_ReLU, 2_Broken}.py, and KernelBench-style kernels: two samples each."""
    tasks = tmp_path / "tasks" / "level1"
    tasks.mkdir(parents=True)
    (tasks / "1_ReLU.py").write_text(GOOD_TASK)
    (tasks / "2_Broken.py").write_text(RAISES_AT_IMPORT)
    kernels = tmp_path / "kernels"
    kernels.mkdir()
    for problem in (1, 2):
        for sample in (0, 1):
            (kernels / f"level_1_problem_{problem}_sample_{sample}_kernel.py").write_text(LEAN_RELU)
    return tmp_path / "tasks", kernels


@pytest.fixture
def store(tmp_path: Path) -> Iterator[ResultsStore]:
    with ResultsStore(f"sqlite:///{tmp_path / 'lb.db'}") as opened:
        yield opened


class TaskErrorExecutor:
    """In-process: task_error for level1/2_Broken (as the evaluator's task check reports it), an
    accepted-looking verdict otherwise; records which jobs it was given."""

    def __init__(self) -> None:
        self.jobs: list[EvalJob] = []

    def __call__(self, jobs: Sequence[EvalJob], on_result: Callable[[EvalResult], None]) -> list[EvalResult]:
        out = []
        for job in jobs:
            self.jobs.append(job)
            base = {"task_name": job.task_name, "candidate_hash": "h", "backend": job.backend,
                    "candidate_meta": dict(job.candidate_meta)}
            if job.task_name == "level1/2_Broken":
                result = EvalResult(**base, status=Status.TASK_ERROR, stage=Stage.TASK, error=ErrorRecord(
                    "TaskLoadError", "task level1/2_Broken: fails on import: RuntimeError: broken"))
            else:
                result = EvalResult(**base, status=Status.OK, stage=Stage.DONE,
                                    compile=CompileRecord(ok=True, backend="cpu"),
                                    correctness=(CorrectnessRecord("default", 1, True),))
            on_result(result)
            out.append(result)
        return out


def test_a_task_error_skips_the_rest_of_that_task_and_is_not_scored(layout, store):
    tasks, kernels = layout
    executor = TaskErrorExecutor()
    options = JobOptions(backend="cpu", device="cpu", tracks=("hardened", "kernelbench"))
    report = eval_kernels(load_suite("tasks", tasks), kernels, store=store, entry="e", options=options,
                          executor=executor, progress=True)
    assert report.planned == 8
    assert [j.task_name for j in executor.jobs].count("level1/2_Broken") == 1  # the other three never ran
    assert report.skipped_task_error == 3
    assert report.task_errors == {"level1/2_Broken": "task error, its jobs skipped (the task failed before any "
                                  "candidate code ran): TaskLoadError: task level1/2_Broken: fails on import: "
                                  "RuntimeError: broken"}
    assert report.stored == 4 and {r.task for r in store.evaluations(entry="e")} == {"level1/1_ReLU"}

    # Not stored, so a later run (the task fixed) evaluates it again.
    again = eval_kernels(load_suite("tasks", tasks), kernels, store=store, entry="e", options=options,
                         executor=TaskErrorExecutor())
    assert again.skipped == 4 and list(again.task_errors) == ["level1/2_Broken"]


@pytest.mark.slow
def test_with_the_real_sandbox_a_task_broken_at_import_is_skipped_and_the_others_scored(layout, store,
                                                                                         shared_cache):
    tasks, kernels = layout
    options = JobOptions(backend="cpu", device="cpu", tracks=("hardened",), cache_dir=shared_cache)
    executor = make_executor("process", quiet(timeout_s=300, cache_dir=shared_cache), workers=2)
    report = eval_kernels(load_suite("tasks", tasks), kernels, store=store, entry="real", options=options,
                          executor=executor)
    assert list(report.task_errors) == ["level1/2_Broken"]
    assert "this task is broken at import" in report.task_errors["level1/2_Broken"]
    assert report.skipped_task_error == 1
    rows = store.evaluations(entry="real")
    assert {r.task for r in rows} == {"level1/1_ReLU"} and len(rows) == 2
    assert all(r.result.compiled and r.result.correct for r in rows), [r.result.summary() for r in rows]
