"""Distinct exit codes (issue 19, finding 6): `optimize` exits 3 when the LLM server is down (each
retry said in one line), 5 when no correct kernel was found; `eval` exits 6 for a rejected
candidate, 0 for an accepted one or a compile-only verdict, 2 when nothing was evaluated."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agentforge.cli import app
from agentforge.cli.eval_cmd import EXIT_REFUSED, EXIT_REJECTED, _exit_code
from agentforge.cli.optimize_cmd import EXIT_NO_KERNEL, EXIT_PROVIDER_FAILED

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def cli_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for var in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "AGENTFORGE_PROVIDER_NAME", "AGENTFORGE_PROVIDER_API_KEY",
                "AGENTFORGE_PROVIDER_BASE_URL", "AGENTFORGE_PROVIDER_MODEL"):
        monkeypatch.delenv(var, raising=False)
    (tmp_path / "empty.toml").write_text("")
    monkeypatch.setenv("AGENTFORGE_CONFIG", str(tmp_path / "empty.toml"))
    monkeypatch.setenv("AGENTFORGE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("AGENTFORGE_SANDBOX_ISOLATION", "none")
    monkeypatch.setenv("AGENTFORGE_PROVIDER_MAX_RETRIES", "2")
    return tmp_path


def _optimize(relu_task: Path, runs: Path, base_url: str, *extra: str):
    args = ["optimize", str(relu_task), "--provider", "openai", "--base-url", base_url, "--backend", "cpu",
            "--no-compile-baseline", "--quick", "--out", str(runs), "--json", *extra]
    return CliRunner().invoke(app, args)


def _stderr(result) -> str:
    return result.stderr if result.stderr_bytes else ""


def test_a_server_that_is_down_exits_3_after_one_line_per_retry(cli_env, relu_task, monkeypatch):
    monkeypatch.setattr("time.sleep", lambda s: None)  # the backoff itself is tested in tests/llm
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    result = _optimize(relu_task, cli_env / "runs", f"http://127.0.0.1:{port}/v1", "--max-rounds", "1")
    assert result.exit_code == EXIT_PROVIDER_FAILED, result.output
    retries = [line for line in _stderr(result).splitlines() if "retry" in line]
    assert len(retries) == 2 and all("connection error" in line for line in retries)
    assert "connection error" in json.loads(result.stdout.strip().splitlines()[-1])["error"]
    assert not (cli_env / "runs").exists() or not any((cli_env / "runs").iterdir())  # no half-made run


def test_no_correct_kernel_exits_5_with_the_report(cli_env, relu_task, scripted):
    with scripted.ScriptedServer([scripted.Reply("Only prose, no code.")]) as server:
        result = _optimize(relu_task, cli_env / "runs", server.openai_base_url, "--max-rounds", "2")
    assert result.exit_code == EXIT_NO_KERNEL, result.output
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["best"] is None and summary["rounds"] == 2
    assert summary["usage"]["cost_usd"] == 0.0  # a local server, no price configured
    assert {r.model for r in server.log} == {"scripted-model"}  # what the server lists, not gpt-5
    assert "no correct kernel was found in 2 rounds" in _stderr(result)


def _result(status: str, correct: bool = True, flag: str | None = None):
    from agentforge.evaluator.result import CorrectnessRecord, EvalResult, Flag, Stage, Status

    checks = (CorrectnessRecord("default", 42, correct, 0.0, 0.0),) if correct is not None else ()
    flags = (Flag(rule="torch_fallback", severity=flag, evidence="aten::relu"),) if flag else ()
    return EvalResult("t", "h", "cpu", Status(status), Stage.DONE, correctness=checks, flags=flags)


@pytest.mark.parametrize(("status", "correct", "flag", "code"), [
    ("ok", True, None, 0),
    ("ok", None, None, 0),  # compile-only: nothing ran, nothing rejected
    ("mismatch", False, None, EXIT_REJECTED),
    ("compile_error", None, None, EXIT_REJECTED),
    ("integrity_flag", True, "reject", EXIT_REJECTED),
    ("ok", True, "reject", EXIT_REJECTED),
    ("ok", True, "audit", 0),
    ("task_error", None, None, EXIT_REFUSED),
])
def test_eval_exit_code_by_verdict(status, correct, flag, code):
    assert _exit_code(_result(status, correct, flag)) == code


def test_eval_of_a_candidate_that_does_not_build_exits_6_with_its_verdict(tmp_path: Path):
    candidate = tmp_path / "broken.py"
    candidate.write_text("from agentforge.evaluator.native import load_cpp\n"
                         "lib = load_cpp('broken', 'extern \"C\" void f() { nope }')\n"
                         "class ModelNew:\n    pass\n")
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(tmp_path),
           "AGENTFORGE_CACHE_DIR": str(tmp_path / "cache"), "AGENTFORGE_SANDBOX_ISOLATION": "none"}
    done = subprocess.run([sys.executable, "-m", "agentforge", "eval", str(REPO / "tasks" / "level1" / "relu.py"),
                           str(candidate), "--backend", "cpu", "--shape", "small", "--no-timing", "--json"],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env)
    assert done.returncode == EXIT_REJECTED, done.stderr[-2000:]
    assert json.loads(done.stdout)["status"] == "compile_error"
