"""Every user-facing failure of the CLI is one line on stderr, a non-zero exit and what to do next;
no traceback reaches a user who did not pass --debug.

Each case is the command a user ran when the failure was found (issue 16), run as a real
process (`python -m agentforge`), with real damaged files, real environment values and a real
closed port for the provider.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from agentforge.store import ResultsStore

REPO = Path(__file__).resolve().parents[2]


@dataclass
class Case:
    args: list[str]
    expect: str  # in the one error line
    env: dict[str, str] = field(default_factory=dict)
    code: int = 2


def run_cli(args: list[str], env: dict[str, str], cwd: Path, timeout: float = 180) -> subprocess.CompletedProcess:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTFORGE_")}
    full_env.update(env)
    return subprocess.run([sys.executable, "-m", "agentforge", *args], env=full_env, cwd=cwd,
                          capture_output=True, text=True, timeout=timeout)


def assert_one_line(proc: subprocess.CompletedProcess, expect: str, code: int | None = None) -> str:
    """The failure is the last stderr line, alone apart from notices; no traceback anywhere."""
    assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout, proc.stderr
    if code is not None:
        assert proc.returncode == code, (proc.returncode, proc.stderr)
    assert proc.returncode != 0
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert lines, "nothing on stderr"
    errors = [line for line in lines if line.startswith(("error:", "interrupted", "terminated"))]
    assert len(errors) == 1, proc.stderr
    assert expect in errors[0], errors[0]
    return errors[0]


def _damaged_db(tmp_path: Path, how: str) -> str:
    good = tmp_path / "good.db"
    with ResultsStore(f"sqlite:///{good}") as store:
        store.ensure_entry("e", kind="eval")
    data = good.read_bytes()
    bad = tmp_path / f"{how}.db"
    bad.write_bytes(data[:5000] if how == "truncated" else data[:4096] + b"\xde\xad" * 4000)
    return f"sqlite:///{bad}"


def _cases(tmp_path: Path) -> dict[str, Case]:
    (tmp_path / "syntax.toml").write_text("[agent\nmax_rounds = 3\n")
    (tmp_path / "negative.toml").write_text("[agent]\nmax_minutes = -1\n")
    (tmp_path / "list.toml").write_text("[agent]\nmax_rounds = [1, 2]\n")
    url = f"sqlite:///{tmp_path / 'ok.db'}"
    return {
        "truncated-db": Case(["leaderboard", "show", "--results-url", _damaged_db(tmp_path, "truncated")],
                             "damaged or not a database"),
        "corrupt-db": Case(["leaderboard", "show", "--results-url", _damaged_db(tmp_path, "corrupt")],
                           "damaged or not a database"),
        "corrupt-db-report": Case(["leaderboard", "report", "--results-url", _damaged_db(tmp_path, "corrupt2")],
                                  "move the file away"),
        "garbage-url": Case(["leaderboard", "show", "--results-url", "garbage"], "set --results-url"),
        "garbage-url-env": Case(["leaderboard", "show"], "AGENTFORGE_RESULTS_URL",
                                env={"AGENTFORGE_RESULTS_URL": "not a url"}),
        "toml-syntax": Case(["leaderboard", "show", "--config", str(tmp_path / "syntax.toml")], "not valid TOML"),
        "toml-negative": Case(["leaderboard", "show", "--config", str(tmp_path / "negative.toml")],
                              "fix max_minutes under [agent]"),
        "toml-list": Case(["leaderboard", "show", "--config", str(tmp_path / "list.toml")],
                          "not a whole number"),
        "env-nan": Case(["leaderboard", "show", "--results-url", url], "AGENTFORGE_SANDBOX_TIMEOUT_S",
                        env={"AGENTFORGE_SANDBOX_TIMEOUT_S": "nan"}),
        "env-negative": Case(["leaderboard", "show", "--results-url", url], "AGENTFORGE_AGENT_MAX_MINUTES",
                             env={"AGENTFORGE_AGENT_MAX_MINUTES": "-1"}),
        "config-missing": Case(["leaderboard", "show"], "AGENTFORGE_CONFIG",
                               env={"AGENTFORGE_CONFIG": "/nonexistent"}),
        "unknown-track": Case(["leaderboard", "show", "--results-url", url, "--track", "fast"],
                              "unknown track 'fast'"),
        "unknown-suite": Case(["leaderboard", "eval", str(tmp_path), "--suite", "nosuchlevel",
                               "--results-url", url, "--backend", "cpu", "--device", "cpu"], "nosuchlevel"),
        "isolation-refused": Case(
            ["optimize", str(REPO / "tasks" / "level1" / "relu.py"), "--provider", "library", "--backend", "cpu",
             "--out", str(tmp_path / "runs"), "--shape", "small"], "--isolation none", env={"PATH": "/nonexistent"}),
        "provider-down": Case(
            ["optimize", str(REPO / "tasks" / "level1" / "relu.py"), "--provider", "openai", "--base-url",
             "http://127.0.0.1:9/v1", "--backend", "cpu", "--out", str(tmp_path / "runs"), "--quick", "--shape",
             "small"],
            "the LLM server at http://127.0.0.1:9/v1 failed",
            env={"OPENAI_API_KEY": "dummy", "AGENTFORGE_PROVIDER_MAX_RETRIES": "0"},
            code=3),
    }


CASES = ["truncated-db", "corrupt-db", "corrupt-db-report", "garbage-url", "garbage-url-env", "toml-syntax",
         "toml-negative", "toml-list", "env-nan", "env-negative", "config-missing", "unknown-track",
         "unknown-suite", "provider-down"]
if os.geteuid() == 0:
    CASES.append("isolation-refused")  # as root, auto without bwrap or unshare refuses


@pytest.mark.parametrize("name", CASES)
def test_failure_is_one_line_without_traceback(tmp_path: Path, name: str) -> None:
    case = _cases(tmp_path)[name]
    proc = run_cli(case.args, case.env, cwd=tmp_path)
    assert_one_line(proc, case.expect, case.code)


def test_debug_shows_the_traceback(tmp_path: Path) -> None:
    case = _cases(tmp_path)["corrupt-db"]
    proc = run_cli([*case.args, "--debug"], {}, cwd=tmp_path)
    assert proc.returncode == 2 and "Traceback" in proc.stderr
    assert proc.stderr.rstrip().splitlines()[-1].startswith("error: ")
    env_proc = run_cli(case.args, {"AGENTFORGE_DEBUG": "1"}, cwd=tmp_path)
    assert "Traceback" in env_proc.stderr


def test_an_unforeseen_exception_says_how_to_see_it(tmp_path: Path) -> None:
    """Any exception at all ends as one line (exit 1) that points to --debug."""
    from agentforge.cli import errors

    code, message = errors.describe(ZeroDivisionError("division by zero"))
    assert code == errors.EXIT_BUG and message == "ZeroDivisionError: division by zero"
    shown: list[str] = []

    def boom() -> None:
        raise ZeroDivisionError("division\nby zero")

    import io

    saved = sys.stderr
    sys.stderr = io.StringIO()
    try:
        assert errors.run_guarded(boom) == errors.EXIT_BUG
        shown = sys.stderr.getvalue().splitlines()
    finally:
        sys.stderr = saved
    assert shown == ["error: ZeroDivisionError: division by zero (run again with --debug to see the traceback)"]
