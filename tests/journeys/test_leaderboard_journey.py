"""`agentforge leaderboard run`, `show` and `report` on a CPU machine, as a user types them (issue 30).

A 3-task suite of the project's tasks with the offline library provider: each task's loop keeps
the shipped kernel, ranking checks and times it on the CPU backend's shapes (the task's `cpu`
variant, then `small`, as `agentforge eval --backend cpu` does) and ranks it correct; `show` and
the reports carry a per-task table. Before the fix the ranking ran the GPU-sized default shape:
every job was killed for memory, the board said 0 % correct, and the command exited 0. A suite
whose every task fails exits 2 and says why, per task.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

from tests.journeys.user import type_command, user_env

TASKS = ("level1/relu", "level2/add_mul_relu", "level1/softmax")
SUITE = 'name = "mini"\ntasks = [' + ", ".join(f'"{t}"' for t in TASKS) + "]\n"
BROKEN = '''"""ReLU whose inputs cannot be made: a broken task file."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    raise RuntimeError("this task is broken on purpose")


def get_init_inputs():
    return []
'''


def _row(output: str, task: str) -> list[str]:
    """The cells of `task`'s row in the per-task table that `run` and `show` print."""
    for line in output.splitlines():
        cells = [c.strip() for c in line.strip().strip("│┃").split("│")]
        if cells and cells[0] == task:
            return cells
    raise AssertionError(f"no per-task row for {task} in:\n{output}")


def test_a_cpu_leaderboard_ranks_the_suite(user_dir: Path) -> None:
    env = user_env(user_dir.parent / "home", COLUMNS="200")
    (user_dir / "mini.toml").write_text(SUITE)
    started = time.monotonic()
    run = type_command("agentforge leaderboard run --suite mini.toml --provider library --max-rounds 1 --workers 2 "
                       "--no-compile-baseline --out runs", user_dir, env, timeout=1800)
    run_s = time.monotonic() - started
    assert run.returncode == 0, run.explain()
    assert "ranking on the hardened track only" in run.output, run.explain()
    assert "library/default: 3 jobs, 0 already stored, 3 stored now" in run.output, run.explain()
    for task in TASKS:
        task_row = _row(run.stdout, task)
        assert task_row[1] == "ok", run.explain()
        assert re.fullmatch(r"\d+\.\d\d( \[\d+\.\d\d, \d+\.\d\d\])?", task_row[2]), run.explain()
        assert task_row[3].startswith("accepted, timed on shape 'cpu'"), run.explain()
    assert sorted(p.name for p in (user_dir / "runs").iterdir()) == sorted(
        f"leaderboard-library_default-mini-{t.replace('/', '_')}" for t in TASKS)

    show = type_command("agentforge leaderboard show --suite mini.toml", user_dir, env)
    assert show.returncode == 0, show.explain()
    assert "mini — hardened (3 tasks)" in show.stdout and "100.0%" in _row(show.stdout, "library/default")[1]
    assert "library/default on mini — hardened: per task" in show.stdout
    assert [_row(show.stdout, t)[1] for t in TASKS] == ["ok"] * 3

    for fmt in ("md", "html"):
        report = type_command(f"agentforge leaderboard report --format {fmt} --out board", user_dir, env)
        assert report.returncode == 0, report.explain()
        assert f"wrote board/report.{fmt}" in report.stdout, report.explain()
    text = (user_dir / "board" / "report.md").read_text()
    assert "### library/default: per task" in text
    for task in TASKS:
        assert re.search(rf"^\| {re.escape(task)} \| ok \| \d+\.\d\d[^|]* \| accepted, timed on shape 'cpu'", text,
                         re.M), text
    assert "<h3>library/default: per task</h3>" in (user_dir / "board" / "report.html").read_text()
    plots = sorted(p.name for p in (user_dir / "board" / "plots").glob("*.png"))
    assert plots == ["mini-hardened-entries_side_by_side.png", "mini-hardened-fast_p_against_p.png",
                     "mini-hardened-per-task_speedup.png", "mini-hardened-speedup_distribution_per_level.png"]
    print(f"leaderboard run of {len(TASKS)} tasks: {run_s:.0f} s")


def test_a_suite_where_every_task_fails_exits_2_and_says_why(user_dir: Path) -> None:
    env = user_env(user_dir.parent / "home", COLUMNS="200")
    (user_dir / "mine" / "level1").mkdir(parents=True)
    (user_dir / "mine" / "level1" / "relu.py").write_text(BROKEN)  # the library has a kernel for relu
    (user_dir / "mine" / "level1" / "own_op.py").write_text(BROKEN.replace("ReLU whose", "An operator whose"))
    (user_dir / "bad.toml").write_text('name = "bad"\nroot = "mine"\ntasks = ["level1/relu", "level1/own_op"]\n')
    run = type_command("agentforge leaderboard run --suite bad.toml --provider library --max-rounds 1 --workers 2 "
                       "--no-compile-baseline --out runs", user_dir, env, timeout=900)
    assert run.returncode == 2, run.explain()
    assert "error: no task of suite bad got an accepted kernel (library/default); why, per task:" in run.stderr
    assert re.search(r"^  level1/relu: task_error: its loop stopped: task error: .*this task is broken on purpose",
                     run.stderr, re.M), run.explain()
    assert re.search(r"^  level1/own_op: failed: ProviderError: .*library.* no .*kernel for level1/own_op",
                     run.stderr, re.M), run.explain()

    show = type_command("agentforge leaderboard show", user_dir, env)
    assert show.returncode == 0, show.explain()
    assert "0.0%" in _row(show.stdout, "library/default")[1]
    assert _row(show.stdout, "level1/relu")[1] == "task_error" and _row(show.stdout, "level1/own_op")[1] == "failed"
