"""`agentforge optimize` as a user runs it: killed with SIGKILL in the middle of a run, then
`--resume RUN_ID` finishes it without redoing the rounds that were finished."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest


def _cli(args: list[str], env: dict[str, str], **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "agentforge", "optimize", *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def _wait_for(path_glob, predicate, timeout_s: float, proc: subprocess.Popen) -> Path:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for events in path_glob():
            lines = [json.loads(line) for line in events.read_text().splitlines() if line.strip()]
            if any(predicate(e) for e in lines):
                return events
        if proc.poll() is not None:
            pytest.fail(f"the run ended early: {proc.communicate()}")
        time.sleep(0.2)
    pytest.fail("the run never reached the point to kill it at")


@pytest.mark.slow
@pytest.mark.timeout(580)
def test_kill_9_then_resume_finishes_without_redoing_rounds(tmp_path, relu_task, scripted, kernels,
                                                          round_script):
    script = round_script({
        ("coder", 1): [scripted.Reply(kernels.fenced(kernels.SLOW))],
        ("judge", 1): [scripted.Reply(kernels.optimise_verdict("build at -O3"))],
        ("coder", 2): [scripted.Reply(kernels.fenced(kernels.FAST))],
        # Slow to answer, so the kill lands while round 2 is finished and the judge is thinking.
        ("judge", 2): [scripted.Reply(kernels.optimise_verdict("unroll"), delay_s=3.0)],
        ("coder", 3): [scripted.Reply("No code this time.")],
    })
    runs = tmp_path / "runs"
    (tmp_path / "none.toml").write_text("")  # no developer settings file (a missing one is an error)
    env = {**os.environ, "OPENAI_API_KEY": "dummy", "AGENTFORGE_CACHE_DIR": str(tmp_path / "cache"),
           "AGENTFORGE_SANDBOX_ISOLATION": "none", "AGENTFORGE_EVAL_PROFILE": "false",
           "AGENTFORGE_CONFIG": str(tmp_path / "none.toml")}
    env.pop("ANTHROPIC_API_KEY", None)
    with scripted.ScriptedServer(script) as server:
        args = [str(relu_task), "--provider", "openai", "--base-url", server.openai_base_url, "--model",
                "gpt-4.1", "--backend", "cpu", "--max-rounds", "3", "--no-compile-baseline", "--quick",
                "--out", str(runs), "--json"]
        first = _cli(args, env)
        events = _wait_for(lambda: runs.glob("*/events.jsonl"),
                           lambda e: e["stage"] == "budget" and e["round"] == 2, 280, first)
        time.sleep(0.5)  # inside the judge's (delayed) call now
        first.send_signal(signal.SIGKILL)
        first.wait()
        assert first.returncode == -signal.SIGKILL
        run_id = events.parent.name
        assert not (events.parent / "summary.json").exists()
        # --quick: torch.compile's default mode only, kept in the run for its resumption
        assert json.loads((events.parent / "run.json").read_text())["compile_modes"] == ["default"]
        served_before = list(script.served)

        second = _cli(["--resume", run_id, "--out", str(runs), "--json"], env)
        out, err = second.communicate(timeout=280)
    assert second.returncode == 0, err
    summary = json.loads(out)
    assert summary["status"] == "finished" and summary["rounds"] == 3
    assert [r["status"] for r in summary["history"]] == ["ok", "ok", "no_code"]
    assert summary["stop_reason"].startswith("rounds")

    served = [(role, rnd) for role, rnd, status in script.served if status == 200]
    # Finished rounds were not redone: one coder call each for rounds 1 and 2, one judge call for 1.
    assert served.count(("coder", 1)) == 1 and served.count(("coder", 2)) == 1
    assert served.count(("judge", 1)) == 1
    # The step that was cut off (the judge after round 2) ran again, and the run went on.
    assert ("judge", 2) in [(r, n) for r, n, _ in served_before]
    assert served.count(("coder", 3)) == 1
    assert len(server.log) == len(script.served)
    assert Path(summary["outputs"]["report"]).is_file()
