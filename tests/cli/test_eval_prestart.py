"""`agentforge eval` starts its job's sandbox child before it imports torch itself, so that the two
imports (about 3 s each on two cores) run at once; a GPU job starts no spare."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CANDIDATE = REPO / "results" / "kernels" / "cpu" / "level1" / "relu" / "kernel.py"

# The CLI as typed, with `sandbox.prestart` replaced by a recorder that ends the process: what it
# was asked for, and whether torch was imported by then.
PROBE = r"""
import json, os, sys
import agentforge.sandbox as sandbox

def prestart(config=None, *, device="auto", backend="auto", compiles=False):
    said = {"torch": "torch" in sys.modules, "device": device, "backend": backend, "compiles": compiles}
    os.write(1, json.dumps(said).encode() + b"\n")
    os._exit(0)  # past the CLI's own handling of an exit

sandbox.prestart = prestart
from agentforge.cli import main
sys.argv = ["agentforge", *sys.argv[1:]]
main()
"""


def _prestart_of(*args: str) -> dict[str, object] | None:
    done = subprocess.run([sys.executable, "-c", PROBE, "eval", *args], capture_output=True, text=True,
                          cwd=REPO, timeout=120)
    # (fd 1 may be the CLI's stderr by then: --json keeps stdout for its one object)
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.startswith('{"torch"')]
    return json.loads(lines[0]) if lines else None


def test_the_cpu_job_child_is_started_before_the_cli_imports_torch() -> None:
    said = _prestart_of("level1/relu", str(CANDIDATE), "--backend", "cpu", "--json")
    assert said == {"torch": False, "device": "cpu", "backend": "cpu", "compiles": True}


def test_the_backend_is_read_from_the_candidate_when_auto() -> None:
    said = _prestart_of("level1/relu", str(CANDIDATE), "--json")
    assert said is not None and said["backend"] == "cpu" and said["torch"] is False


def test_the_child_of_an_eager_only_job_is_not_asked_to_import_inductor() -> None:
    """Inductor's import (1.6 s of CPU) would only hold a `--no-compile-baseline` job's request."""
    said = _prestart_of("level1/relu", str(CANDIDATE), "--backend", "cpu", "--no-compile-baseline", "--json")
    assert said is not None and said["compiles"] is False and said["torch"] is False
    said = _prestart_of("level1/relu", str(CANDIDATE), "--backend", "cpu", "--no-timing", "--json")
    assert said is not None and said["compiles"] is False
