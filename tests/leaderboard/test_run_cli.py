"""`agentforge leaderboard run` wiring: the agent loop and the executor replaced by fakes (the
loop has its own tests; the evaluation path is covered end to end in test_eval_e2e)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from agentforge.cli import app
from agentforge.store import ResultsStore

from .conftest import LEAN_RELU
from .test_runner import FakeExecutor


@pytest.fixture
def fake_loop(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[tuple]:
    import agentforge.agent.run as agent_run
    import agentforge.leaderboard.executors as executors
    import agentforge.leaderboard.runner as runner

    calls: list[tuple] = []

    def optimize(task_ref, settings, spec=None, *, resume=None, run_id=None, **_):
        calls.append((task_ref, resume, run_id))
        run_dir = Path(settings.runs_dir) / (resume or run_id)
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "run.json").write_text("{}")
        kernel = run_dir / "best_kernel.py"
        kernel.write_text(LEAN_RELU)
        return SimpleNamespace(run_id=resume or run_id, run_dir=str(run_dir), status="finished", rounds=3,
                               stop_reason="max_rounds", provider="library", outputs={"best_kernel": str(kernel)},
                               usage={"input_tokens": 900, "output_tokens": 100, "cost_usd": 0.12})

    monkeypatch.setattr(agent_run, "optimize", optimize)
    monkeypatch.setattr(executors, "make_executor", lambda *a, **k: FakeExecutor())
    # no task probe for the derived CPU shape either: it starts a sandbox child (the journey
    # `test_a_kernelbench_suite_is_scored_on_a_cpu_with_a_derived_shape` runs it for real)
    monkeypatch.setattr(runner, "cpu_shape_deriver", lambda *a, **k: None)
    return calls


def test_run_ranks_each_task_and_resumes(fake_loop: list, tiny_tasks: Path, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'lb.db'}"
    env = {"AGENTFORGE_TASKS_ROOT": str(tiny_tasks), "AGENTFORGE_RUNS_DIR": str(tmp_path / "runs")}
    args = ["leaderboard", "run", "--suite", "level1", "--provider", "library", "--model", "lib-1",
            "--workers", "2", "--results-url", url, "--no-progress"]
    out = CliRunner().invoke(app, args, env=env)
    assert out.exit_code == 0, out.output
    assert len(fake_loop) == 2 and all(resume is None for _, resume, _ in fake_loop)
    assert "library/lib-1: 4 jobs, 0 already stored, 4 stored now" in out.output
    with ResultsStore(url) as store:
        runs = store.runs(entry="library/lib-1")
        assert {r.task for r in runs} == {"level1/1_ReLU", "level1/2_Scale"}
        assert all(r.tokens == 1000 and r.cost_usd == pytest.approx(0.12) for r in runs)
        assert {e.provider for e in store.entries()} == {"library"}

    again = CliRunner().invoke(app, args, env=env)
    assert again.exit_code == 0, again.output
    assert len(fake_loop) == 2  # finished tasks are not optimised again
    assert "4 jobs, 4 already stored, 0 stored now" in again.output


def test_an_interrupted_task_resumes_its_loop(fake_loop: list, tiny_tasks: Path, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'lb.db'}"
    runs_dir = tmp_path / "runs"
    env = {"AGENTFORGE_TASKS_ROOT": str(tiny_tasks), "AGENTFORGE_RUNS_DIR": str(runs_dir)}
    stale = runs_dir / "leaderboard-e-tasks_level1-level1_1_ReLU"
    stale.mkdir(parents=True)
    (stale / "run.json").write_text("{}")  # the loop had started before the interruption
    args = ["leaderboard", "run", "--suite", "level1", "--name", "e", "--results-url", url, "--no-progress"]
    out = CliRunner().invoke(app, args, env=env)
    assert out.exit_code == 0, out.output
    calls = sorted(fake_loop, key=str)
    assert (None, stale.name) in [(ref, resume) for ref, resume, _ in calls]  # resumed, not restarted
    assert [ref.endswith("2_Scale.py") for ref, resume, _ in calls if resume is None] == [True]


def test_run_takes_optimizes_flags(monkeypatch: pytest.MonkeyPatch, tiny_tasks: Path, tmp_path: Path) -> None:
    """Issue 30: --max-rounds, --backend, --shape, --quick and --out, as on `agentforge optimize`."""
    import agentforge.agent.run as agent_run
    import agentforge.leaderboard.executors as executors

    seen: list[dict] = []

    def optimize(task_ref, settings, spec, *, run_id=None, **kwargs):
        seen.append({"rounds": settings.agent.max_rounds, "runs_dir": settings.runs_dir,
                     "backend": settings.eval.backend, "shapes": spec.shapes, "timing": spec.timing,
                     "compile_modes": spec.compile_modes})
        run_dir = Path(settings.runs_dir) / run_id
        run_dir.mkdir(parents=True)
        return SimpleNamespace(run_id=run_id, run_dir=str(run_dir), status="finished", rounds=1,
                               stop_reason="max_rounds", provider="library", outputs={}, usage={})

    executor = FakeExecutor()
    monkeypatch.setattr(agent_run, "optimize", optimize)
    monkeypatch.setattr(executors, "make_executor", lambda *a, **k: executor)
    out = CliRunner().invoke(app, [
        "leaderboard", "run", "--suite", "level1", "--results-url", f"sqlite:///{tmp_path / 'lb.db'}", "--no-progress",
        "--max-rounds", "2", "--backend", "cpu", "--shape", "default", "--quick", "--out", str(tmp_path / "mine")],
        env={"AGENTFORGE_TASKS_ROOT": str(tiny_tasks)})
    assert len(seen) == 2
    for call in seen:
        assert (call["rounds"], call["runs_dir"], call["backend"], call["shapes"]) == (
            2, str(tmp_path / "mine"), "cpu", ("default",))
        assert call["timing"].max_reps == 40 and call["compile_modes"] == ("default",)
    # No loop kept a kernel: nothing ranked, exit 2, and each task's reason said.
    assert out.exit_code == 2, out.output
    assert "no task of suite tasks:level1 got an accepted kernel" in out.output
    for task in ("level1/1_ReLU", "level1/2_Scale"):
        assert f"{task}: no kernel: its loop kept no correct kernel in 1 round (max_rounds)" in out.output


def test_the_flags_read_as_on_optimize() -> None:
    import typer

    root = typer.main.get_command(app)
    run, optimize = root.commands["leaderboard"].commands["run"], root.commands["optimize"]

    def helps(command) -> dict[str, str]:
        return {p.opts[0]: p.help for p in command.params if p.opts}

    ours, theirs = helps(run), helps(optimize)
    for flag in ("--max-rounds", "--backend", "--shape", "--quick", "--out"):
        assert ours[flag] == theirs[flag], flag
