"""Run agentforge exactly as a user types it: the installed console script, in a fresh folder, as a
subprocess, with the environment a user's shell has (no test-only switches), and what it printed."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


@dataclass
class Typed:
    """One command as typed, and what the user saw."""

    command: str
    returncode: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return self.stdout + self.stderr

    def explain(self) -> str:
        return (f"$ {self.command}\n[exit {self.returncode}]\n--- stdout ---\n{self.stdout[-6000:]}\n"
                f"--- stderr ---\n{self.stderr[-6000:]}")


def user_env(home: Path, **extra: str) -> dict[str, str]:
    """A user's shell: the venv's bin first on PATH, a fresh HOME, no AGENTFORGE_* left over from the
    test session (the suite's conftest turns off spares and header prebuilds: a user has them on)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTFORGE_", "PYTEST_"))}
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env["HOME"] = str(home)
    env["COLUMNS"] = "100"
    env.pop("OPENAI_API_KEY", None)
    env.pop("ANTHROPIC_API_KEY", None)
    env.update(extra)
    return env


def type_command(command: str, cwd: Path, env: dict[str, str], timeout: float = 900) -> Typed:
    """Run `command` (a shell line as in the README) in `cwd`; never raises on a non-zero exit."""
    proc = subprocess.run(command, shell=True, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)
    return Typed(command, proc.returncode, proc.stdout, proc.stderr)


def quote(path: Path | str) -> str:
    return shlex.quote(str(path))
