"""A user prepacks a linear layer's weight (issue 30, item 7) and evaluates it as typed: in
`ModelNew.prepare_weights()` it is accepted; prepacked in `__init__` only, the verdict says the weight
is stale and where to prepack instead."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from .user import REPO_ROOT, type_command, user_env

EXPLOITS = REPO_ROOT / "tests" / "exploits"


def test_a_prepacked_weight_is_accepted_in_the_hook_and_named_stale_in_init(user_dir: Path) -> None:
    env = user_env(user_dir.parent / "home", OMP_NUM_THREADS="1")
    shutil.copy(EXPLOITS / "tasks" / "small_linear.py", user_dir / "linear_task.py")
    shutil.copy(EXPLOITS / "honest" / "linear_prepacked_cpp.py", user_dir / "packed.py")
    shutil.copy(EXPLOITS / "cases" / "prepack_stale_init.py", user_dir / "packed_in_init.py")

    typed = type_command("agentforge eval linear_task.py packed.py --json", user_dir, env, timeout=600)
    assert typed.returncode == 0, typed.explain()
    verdict = json.loads(typed.stdout)
    assert verdict["status"] == "ok" and verdict["flags"] == [], typed.explain()

    typed = type_command("agentforge eval linear_task.py packed_in_init.py", user_dir, env, timeout=600)
    assert typed.returncode == 6, typed.explain()
    assert "stale_weights" in typed.output and "prepare_weights" in typed.output, typed.explain()
    assert "linear.weight" in typed.output, typed.explain()
