"""Ctrl-C during `agentforge optimize`, then the `--resume RUN_ID --out DIR` command it printed,
typed exactly as printed (issue 30): the interrupted run exits 130 after a finished round, and the
resumed one finishes it with a best kernel, without redoing round 1."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
import time
from pathlib import Path

from .user import type_command, user_env

COMMAND = ["agentforge", "optimize", "level2/add_mul_relu", "--provider", "library", "--max-rounds", "2",
           "--backend", "cpu", "--quick", "--no-compile-baseline", "--out", "runs"]
ROUND_1 = re.compile(r"round 1 \(initial\) ok, [\d.]+x: new best$")


def test_ctrl_c_after_a_round_then_the_printed_resume_command_finishes(user_dir: Path) -> None:
    env = user_env(user_dir.parent / "home")
    # Its own process group, as a shell's foreground job: Ctrl-C signals the whole group.
    proc = subprocess.Popen(COMMAND, cwd=user_dir, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    seen: list[str] = []
    round_done = threading.Event()

    def watch() -> None:  # stdout is a pipe: each line must arrive as it happens, not at exit
        assert proc.stdout is not None
        for line in proc.stdout:
            seen.append(line.rstrip("\n"))
            if ROUND_1.search(seen[-1]):
                round_done.set()

    reader = threading.Thread(target=watch, daemon=True)
    reader.start()
    try:
        assert round_done.wait(600), f"no finished round in 10 minutes; saw {seen}"
        assert proc.poll() is None, f"it ended before Ctrl-C: {seen}"
        os.killpg(proc.pid, signal.SIGINT)
        code = proc.wait(120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    reader.join(10)
    stderr = proc.stderr.read() if proc.stderr else ""
    assert code == 130, (code, seen, stderr)
    hint = re.search(r"continue with: (agentforge optimize --resume \S+ --out \S+)", stderr)
    assert hint, stderr
    assert f"--out {user_dir / 'runs'}" in hint[1], hint[1]
    time.sleep(1)  # nothing of the first run is left running (tests/cli/test_interrupts.py checks it closely)

    resumed = type_command(hint[1], user_dir, env)  # exactly as printed
    assert resumed.returncode == 0, resumed.explain()
    assert "round 1 (initial)" not in resumed.stdout, resumed.explain()  # round 1 was not redone
    assert re.search(r"round 2 \(optimise\) \w+", resumed.stdout), resumed.explain()
    assert re.search(r"^best: round \d -> ", resumed.stdout, re.M), resumed.explain()
    assert re.search(r"^measured speedup on shape 'cpu': [\d.]+x vs eager", resumed.stdout, re.M), resumed.explain()
    assert "rounds: 2 of 2 done" in resumed.stdout, resumed.explain()
