"""End to end through the real CLI, the real sandbox and the evaluator's own task check (run in
the sandbox before any candidate code): a task whose get_inputs raises, and one whose reference
fails on one shape only, are `task_error` verdicts naming the task, the shape and the cause, and
`eval` exits 2. The preflight cannot see either (sizing on the meta device does not call the
reference, and a get_inputs failure there is left to the evaluator), so these pass only with the
evaluator's task check in place."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.fixtures import relu

CLI = [sys.executable, "-m", "agentforge"]

BROKEN_GET_INPUTS = relu.broken_get_inputs(256)

# Correct on 'default' and 'small'; its reference raises on 'odd' only.
REFERENCE_FAILS_ON_ODD = '''
import torch
import torch.nn as nn

N = 256
SHAPES = {"small": {"N": 16}, "odd": {"N": 999}}

class Model(nn.Module):
    def forward(self, x):
        if x.shape[0] == 999:
            raise ValueError("the reference cannot take an odd length")
        return torch.relu(x)

def get_inputs():
    return [torch.randn(N)]

def get_init_inputs():
    return []
'''

CANDIDATE = '''
import torch.nn as nn

class ModelNew(nn.Module):
    def forward(self, x):
        return x.clamp_min(0)
'''


@pytest.fixture
def env(tmp_path: Path, shared_cache: str) -> dict[str, str]:
    (tmp_path / "empty.toml").write_text("")
    return {**os.environ, "AGENTFORGE_CONFIG": str(tmp_path / "empty.toml"), "AGENTFORGE_CACHE_DIR": shared_cache,
            "AGENTFORGE_EVAL_PROFILE": "false"}


def _eval(tmp_path: Path, env: dict[str, str], task_source: str, *extra: str) -> tuple[int, dict, str]:
    task = tmp_path / "level1" / "broken.py"
    task.parent.mkdir(parents=True, exist_ok=True)
    task.write_text(textwrap.dedent(task_source))
    candidate = tmp_path / "candidate.py"
    candidate.write_text(textwrap.dedent(CANDIDATE))
    out = subprocess.run([*CLI, "eval", str(task), str(candidate), "--json", "--backend", "cpu",
                          "--no-compile-baseline", *extra], capture_output=True, text=True, env=env, timeout=500)
    lines = [line for line in out.stdout.splitlines() if line.strip()]
    assert len(lines) == 1, out.stdout
    return out.returncode, json.loads(lines[0]), out.stderr


def test_e2e_evaluator_task_check_get_inputs_raising_is_task_error_exit_2(tmp_path, env):
    code, result, stderr = _eval(tmp_path, env, BROKEN_GET_INPUTS)
    assert code == 2, stderr[-2000:]
    assert result["status"] == "task_error" and result["stage"] == "task"
    assert result["error"]["type"] == "TaskInputsError"
    message = result["error"]["message"]
    assert "level1/broken" in message and "'default'" in message and "deliberately broken get_inputs" in message
    assert result["compile"] is None  # nothing of the candidate was built
    assert "task error, the candidate was not run" in stderr


def test_e2e_evaluator_task_check_reference_failing_on_one_shape_names_it(tmp_path, env):
    code, result, stderr = _eval(tmp_path, env, REFERENCE_FAILS_ON_ODD)
    assert code == 2, stderr[-2000:]
    assert result["status"] == "task_error" and result["error"]["type"] == "TaskReferenceError"
    assert "shape 'odd'" in result["error"]["message"] and "odd length" in result["error"]["message"]

    # The shapes that work still evaluate the candidate: not the task's fault there, so a verdict on
    # the candidate (this one calls torch, so it is rejected: exit 6, not 2).
    code, result, stderr = _eval(tmp_path, env, REFERENCE_FAILS_ON_ODD, "--shape", "small", "--no-timing")
    assert result["status"] != "task_error", result
    assert code == (0 if result["accepted"] else 6), stderr[-2000:]
