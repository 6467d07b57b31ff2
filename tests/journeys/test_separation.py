"""`agentforge eval` as a user types it, on a candidate that renices its judge (rejected:
refused_syscall, exit 6) and on an honest one (accepted, exit 0), each verdict saying how the judge
and the worker were kept apart."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from agentforge.sandbox import isolation

from .user import type_command, user_env

EXPLOITS = Path(__file__).resolve().parents[1] / "exploits"

pytestmark = pytest.mark.skipif(
    not isolation.is_root() or all(isolation.probe(m) for m in isolation.ISOLATING_MODES),
    reason="the judge gets a uid of its own when agentforge runs as root with bwrap or unshare")


def test_eval_rejects_a_candidate_that_renices_its_judge(user_dir: Path) -> None:
    shutil.copy(EXPLOITS / "tasks" / "elementwise_relu.py", user_dir / "relu.py")
    shutil.copy(EXPLOITS / "cases" / "os_priority_judge.py", user_dir / "renice.py")
    shutil.copy(EXPLOITS / "honest" / "relu_cpp.py", user_dir / "honest.py")
    env = user_env(user_dir.parent / "home")

    typed = type_command("agentforge eval relu.py renice.py --no-timing --json", user_dir, env)
    assert typed.returncode == 6, typed.explain()
    verdict = json.loads(typed.stdout)
    assert verdict["status"] == "integrity_flag", typed.explain()
    assert [f["rule"] for f in verdict["flags"]] == ["refused_syscall"], typed.explain()
    assert "SIGSYS" in verdict["flags"][0]["evidence"]

    typed = type_command("agentforge eval relu.py honest.py --no-compile-baseline --json", user_dir, env)
    assert typed.returncode == 0, typed.explain()
    verdict = json.loads(typed.stdout)
    assert verdict["status"] == "ok" and not verdict["flags"], typed.explain()
    separation = verdict["provenance"]["track_settings"]["separation"]
    assert separation["judge_uid"] != separation["worker_uid"] == 65534
    assert separation["sealed"] == "installed" and separation["not_protected"] == []
