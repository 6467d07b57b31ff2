"""`isolation=auto` never turns into `none` behind the user's back, and every verdict states the
isolation it ran under in a field (`EvalProvenance.isolation`), not only in provenance prose."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from agentforge.evaluator.result import EvalProvenance, EvalResult, Stage, Status
from agentforge.sandbox import run
from agentforge.sandbox.isolation import is_root
from sandbox_helpers import MODES, fake_config, make_job

RESOLVE = "from agentforge.sandbox.isolation import resolve_mode\nprint(resolve_mode({mode!r}))"


def _resolve_without_tools(mode: str) -> subprocess.CompletedProcess:
    """resolve_mode in a process whose PATH holds neither bwrap nor unshare (as on a bare image)."""
    env = {**os.environ, "PATH": "/nonexistent"}
    return subprocess.run([sys.executable, "-c", RESOLVE.format(mode=mode)], env=env, capture_output=True,
                          text=True, timeout=60)


@pytest.mark.skipif(not is_root(), reason="the refusal protects a root parent")
def test_auto_as_root_without_isolation_refuses_and_says_what_to_do() -> None:
    proc = _resolve_without_tools("auto")
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert "SandboxUnavailable" in last and "no sandbox isolation works here" in last
    assert "bubblewrap" in last and "--isolation none" in last


def test_explicit_none_runs_without_the_tools() -> None:
    proc = _resolve_without_tools("none")
    assert proc.returncode == 0 and proc.stdout.strip() == "none"


@pytest.mark.parametrize("mode", MODES)
def test_every_verdict_states_its_isolation(tmp_path: Path, mode: str) -> None:
    config = fake_config(tmp_path, isolation=mode)
    ok = run(make_job("RESULT_NOTE = 1"), config)
    crash = run(make_job("import ctypes\nctypes.string_at(0)"), config)
    hang = run(make_job("while True:\n    pass"), config.replace(timeout_s=1.0))
    assert (ok.status, crash.status, hang.status) == (Status.OK, Status.CRASH, Status.TIMEOUT)
    assert [r.provenance.isolation for r in (ok, crash, hang)] == [mode] * 3


def test_auto_records_what_it_resolved_to(tmp_path: Path) -> None:
    result = run(make_job("RESULT_NOTE = 1"), fake_config(tmp_path, isolation="auto"))
    assert result.provenance.isolation in ("bwrap", "unshare", "none")
    assert result.provenance.isolation in result.provenance.sandbox


def test_isolation_round_trips_and_old_json_reads() -> None:
    result = EvalResult(task_name="t", candidate_hash="h", backend="cpu", status=Status.OK, stage=Stage.DONE,
                        provenance=EvalProvenance(sandbox="process+unshare(...)", isolation="unshare"))
    assert EvalResult.from_json(result.to_json()) == result
    old = json.loads(result.to_json())
    del old["provenance"]["isolation"]  # a verdict stored before the field existed
    assert EvalResult.from_json(json.dumps(old)).provenance.isolation == ""
