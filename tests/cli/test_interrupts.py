"""Interrupted and starved runs say so in one line, with how to continue, and leave nothing
running: Ctrl-C (SIGINT) and SIGTERM during `optimize` and `leaderboard eval` (SIGTERM exited 143
silently, Ctrl-C during `leaderboard eval` printed nothing, the optimize hint left out --out),
and a disk that fills up during `optimize` (66 lines of traceback, no resume hint)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from .stray import job_folders, processes_mentioning, wait_until
from .test_errors import assert_one_line

REPO = Path(__file__).resolve().parents[2]
RELU = str(REPO / "tasks" / "level1" / "relu.py")

pytestmark = pytest.mark.slow


def _env(tmp_path: Path) -> dict[str, str]:
    """A run of its own: cache (which every sandbox child carries in its environment, so strays
    are found by it), sandbox job folders (TMPDIR) and no developer settings."""
    (tmp_path / "cache").mkdir(exist_ok=True)
    (tmp_path / "cache").chmod(0o777)
    (tmp_path / "tmp").mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTFORGE_", "OPENAI_", "ANTHROPIC_"))}
    env.update(AGENTFORGE_CACHE_DIR=str(tmp_path / "cache"), TMPDIR=str(tmp_path / "tmp"),
               AGENTFORGE_EVAL_PROFILE="false", AGENTFORGE_CONFIG=str(tmp_path / "none.toml"))
    (tmp_path / "none.toml").write_text("")
    return env


def _optimize_args(runs: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "agentforge", "optimize", RELU, "--provider", "library", "--backend", "cpu",
            "--out", str(runs), "--quick", "--shape", "small", "--no-compile-baseline", *extra]


def _first_event(runs: Path) -> bool:
    return any(p.read_text().strip() for p in runs.glob("*/events.jsonl"))


def _assert_nothing_left(tmp_path: Path) -> None:
    assert wait_until(lambda: not processes_mentioning(str(tmp_path / "cache")), 15), \
        f"stray processes: {processes_mentioning(str(tmp_path / 'cache'))}"


@pytest.mark.parametrize(("sig", "code", "words"), [(signal.SIGINT, 130, "interrupted (SIGINT)"),
                                                    (signal.SIGTERM, 143, "terminated (SIGTERM)")])
def test_optimize_interrupted_says_how_to_resume(tmp_path: Path, sig: int, code: int, words: str) -> None:
    runs = tmp_path / "my runs"  # a folder that is not the default, with a space: --out must be given, quoted
    proc = subprocess.Popen(_optimize_args(runs), env=_env(tmp_path), cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert wait_until(lambda: _first_event(runs) or proc.poll() is not None, 120)
    assert proc.poll() is None, proc.communicate()
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    done = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    line = assert_one_line(done, words, code)
    (run_dir,) = list(runs.iterdir())
    assert f"continue with: agentforge optimize --resume {run_dir.name} --out '{runs}'" in line
    _assert_nothing_left(tmp_path)


@pytest.mark.parametrize(("sig", "code", "words"), [(signal.SIGINT, 130, "interrupted (SIGINT)"),
                                                    (signal.SIGTERM, 143, "terminated (SIGTERM)")])
def test_leaderboard_eval_interrupted_says_so(tmp_path: Path, sig: int, code: int, words: str) -> None:
    tasks = tmp_path / "tasks" / "level1"
    tasks.mkdir(parents=True)
    (tasks / "1_ReLU.py").write_text(Path(RELU).read_text())
    kernels = tmp_path / "kernels"
    kernels.mkdir()
    shipped = REPO / "results" / "kernels" / "cpu" / "level1" / "relu" / "kernel.py"
    (kernels / "level_1_problem_1_sample_0_kernel.py").write_text(shipped.read_text())
    env = {**_env(tmp_path), "AGENTFORGE_TASKS_ROOT": str(tmp_path / "tasks")}
    args = [sys.executable, "-m", "agentforge", "leaderboard", "eval", str(kernels), "--suite", "tasks",
            "--results-url", f"sqlite:///{tmp_path / 'lb.db'}", "--backend", "cpu", "--device", "cpu",
            "--no-compile-baseline"]
    proc = subprocess.Popen(args, env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    sandbox_root = tmp_path / "tmp" / "agentforge-sandbox"
    assert wait_until(lambda: job_folders(sandbox_root) or proc.poll() is not None, 120)
    assert proc.poll() is None, proc.communicate()
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    done = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    assert "run the same command again" in assert_one_line(done, words, code)
    _assert_nothing_left(tmp_path)


# Runs inside a private mount namespace (unshare --mount): the runs folder is a tiny tmpfs that
# fills up during the first round; then it is made larger and the printed command resumes the run.
FULL_DISK = textwrap.dedent("""
    import json, shlex, subprocess, sys
    runs, args = sys.argv[1], json.loads(sys.argv[2])
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=160k", "tmpfs", runs], check=True)
    first = subprocess.run(args, capture_output=True, text=True)
    subprocess.run(["mount", "-o", "remount,size=64m", runs], check=True)
    hint = first.stderr.strip().splitlines()[-1].split("continue with: ")[-1]
    command = [sys.executable, "-m", *shlex.split(hint), "--json"]  # "agentforge optimize ..." as a module
    second = subprocess.run(command, capture_output=True, text=True) if "--resume" in hint else None
    print(json.dumps({"first": [first.returncode, first.stdout, first.stderr],
                      "second": [second.returncode, second.stdout, second.stderr] if second else None}))
""")


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small tmpfs needs root")
def test_full_disk_during_optimize_is_one_line_and_the_hint_resumes(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()
    args = _optimize_args(runs, "--max-rounds", "1")
    proc = subprocess.run(["unshare", "--mount", "--propagation", "private", sys.executable, "-c", FULL_DISK,
                           str(runs), json.dumps(args)], env=_env(tmp_path), cwd=tmp_path, capture_output=True,
                          text=True, timeout=580)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    code, out, err = report["first"]
    line = assert_one_line(subprocess.CompletedProcess([], code, out, err), "the disk is full", 4)
    assert "then continue with: agentforge optimize --resume " in line and f"--out {runs}" in line
    code, out, err = report["second"]
    assert code == 0, err
    assert json.loads(out)["status"] == "finished"
    _assert_nothing_left(tmp_path)
