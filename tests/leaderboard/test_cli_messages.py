"""What the leaderboard commands say when nothing ordinary happens: a track that does not exist
is rejected (it said "no results yet"), a folder with no matching kernel is an error, and jobs
that another run stored while this one evaluated them are counted as such (a second concurrent
`leaderboard eval` said "0 already stored, 0 stored now")."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from agentforge.evaluator.result import EvalJob, EvalResult
from typer.testing import CliRunner

from agentforge.cli import app
from agentforge.leaderboard.runner import eval_kernels
from agentforge.leaderboard.suites import load_suite
from agentforge.store import ResultsStore

from .test_runner import OPTIONS, FakeExecutor


@pytest.mark.parametrize("command", ["show", "report"])
def test_unknown_track_is_rejected(tmp_path: Path, command: str) -> None:
    url = f"sqlite:///{tmp_path / 'b.db'}"
    out = CliRunner().invoke(app, ["leaderboard", command, "--results-url", url, "--track", "fast"])
    assert out.exit_code == 2
    assert "unknown track 'fast'; choose one of: hardened, kernelbench" in out.output


def test_unknown_suite_lists_the_stored_ones(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'b.db'}"
    with ResultsStore(url) as store:
        store.register_suite("tasks:level1", [("level1/a", 1, None)])
        store.ensure_entry("e", kind="eval")
        from .test_report_cli import _result

        store.add_evaluation("k", entry="e", suite="tasks:level1", task="level1/a", track="hardened",
                             result=_result("level1/a", 2.0))
    out = CliRunner().invoke(app, ["leaderboard", "show", "--results-url", url, "--suite", "nosuch.toml"])
    assert out.exit_code in (1, 2)
    assert "Traceback" not in out.output


def test_folder_without_matching_kernels_is_an_error(tiny_tasks: Path, tmp_path: Path) -> None:
    empty = tmp_path / "nothing"
    empty.mkdir()
    (empty / "notes.txt").write_text("no kernels here")
    out = CliRunner().invoke(app, [
        "leaderboard", "eval", str(empty), "--suite", "tasks", "--results-url", f"sqlite:///{tmp_path / 'b.db'}",
        "--backend", "cpu", "--device", "cpu", "--no-progress"], env={"AGENTFORGE_TASKS_ROOT": str(tiny_tasks)})
    assert out.exit_code == 2
    assert "no kernel file in" in out.output and "matches a task of suite tasks" in out.output


class _RacedExecutor(FakeExecutor):
    """Evaluates like FakeExecutor, while another writer on the same database stores each job
    first (what a second `leaderboard eval` process on the same store does)."""

    def __init__(self, url: str, entry: str) -> None:
        super().__init__()
        self.url, self.entry = url, entry

    def __call__(self, jobs: Sequence[EvalJob], on_result: Callable[[EvalResult], None]) -> list[EvalResult]:
        results = FakeExecutor.__call__(self, jobs, lambda _r: None)
        with ResultsStore(self.url) as other:
            for job, result in zip(jobs, results, strict=True):
                other.add_evaluation(str(job.candidate_meta["job_key"]), entry=self.entry, suite="tasks",
                                     task=job.task_name, track="hardened", result=result)
        for result in results:
            on_result(result)
        return results


def test_jobs_stored_by_a_concurrent_run_are_counted(tiny_tasks: Path, kernels: Path, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'r.db'}"
    with ResultsStore(url) as store:
        report = eval_kernels(load_suite("tasks", tiny_tasks), kernels, store=store, entry="e", options=OPTIONS,
                              executor=_RacedExecutor(url, "e"))
    assert (report.planned, report.skipped, report.stored, report.stored_elsewhere) == (6, 0, 0, 6)


def test_a_shape_some_task_lacks_is_refused_before_any_loop(tmp_path: Path) -> None:
    """`leaderboard run --shape cpu` on a suite where a task has no such variant: one line naming
    the task and its shapes, exit 2, and no run started (each loop would have failed on it)."""
    root = tmp_path / "tasks" / "level1"
    root.mkdir(parents=True)
    (root / "relu.py").write_text('SHAPES = {"small": {"N": 4}, "cpu": {"N": 64}}\nN = 1 << 30\n')
    (root / "scale.py").write_text('SHAPES = {"small": {"N": 4}}\nN = 1 << 30\n')
    url = f"sqlite:///{tmp_path / 'b.db'}"
    out = CliRunner().invoke(app, ["leaderboard", "run", "--suite", "level1", "--provider", "library", "--shape", "cpu",
                                   "--results-url", url, "--out", str(tmp_path / "runs")],
                             env={"AGENTFORGE_TASKS_ROOT": str(tmp_path / "tasks")})
    assert out.exit_code == 2, out.output
    assert ("error: task level1/scale has no shape 'cpu'; its shapes: default, small. Name shapes every task of "
            "the suite has, or leave out --shape") in out.output
    assert not (tmp_path / "runs").exists()
