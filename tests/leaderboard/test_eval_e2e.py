"""`agentforge leaderboard eval` end to end on the CPU backend: a KernelBench-layout folder, the
real process sandbox and evaluator, both tracks, the SQLite store; then a resumed run."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from agentforge.cli import app
from agentforge.store import ResultsStore

pytestmark = pytest.mark.slow


def test_eval_cli_end_to_end(tiny_tasks: Path, kernels: Path, tmp_path: Path, shared_cache: str) -> None:
    url = f"sqlite:///{tmp_path / 'lb.db'}"
    env = {"AGENTFORGE_TASKS_ROOT": str(tiny_tasks), "AGENTFORGE_CACHE_DIR": shared_cache,
           "AGENTFORGE_SANDBOX_TIMEOUT_S": "240"}
    args = ["leaderboard", "eval", str(kernels), "--suite", "tasks", "--name", "kb-run", "--results-url", url,
            "--workers", "2", "--backend", "cpu", "--device", "cpu", "--no-compile-baseline", "--no-progress"]
    out = CliRunner().invoke(app, args, env=env)
    assert out.exit_code == 0, out.output
    assert "6 jobs, 0 already stored, 6 stored now" in out.output
    assert "level_1_problem_7_sample_0_kernel.py" in out.output  # reported, not evaluated

    with ResultsStore(url) as store:
        rows = {(r.task, r.sample, r.track): r for r in store.evaluations(entry="kb-run")}
    assert len(rows) == 6
    for track in ("hardened", "kernelbench"):
        lean = rows[("level1/1_ReLU", 0, track)].result
        assert lean.compiled and lean.correct, lean.summary()
        assert lean.provenance.track == track
        fallback = rows[("level1/1_ReLU", 1, track)]
        assert not fallback.accepted and "torch_fallback" in {f.rule for f in fallback.result.flags}
        wrong = rows[("level1/2_Scale", 0, track)]
        assert wrong.status == "mismatch" and not wrong.accepted

    again = CliRunner().invoke(app, args, env=env)
    assert again.exit_code == 0, again.output
    assert "6 jobs, 6 already stored, 0 stored now" in again.output
