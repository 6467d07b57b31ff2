"""`agentforge eval` with tasks that misbehave, through the real CLI and the real process sandbox:
a task that sleeps at import (a short sandbox timeout: task_error, exit 2), one whose default shape
cannot fit in this machine's sandbox (refused before anything is built, naming the shapes that
fit), and one that prints at import and in its forward beside a candidate that prints too (stdout
still carries exactly one JSON object)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

CLI = [sys.executable, "-m", "agentforge"]

SLEEPY = '''
import time
import torch
import torch.nn as nn
time.sleep(600)

class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)

def get_inputs():
    return [torch.randn(8)]

def get_init_inputs():
    return []
'''

# 2**38 fp32 elements (1 TiB) by default: no machine running these tests can evaluate it.
HUGE_DEFAULT = '''
import torch
import torch.nn as nn

N = 2 ** 38
SHAPES = {"small": {"N": 64}, "medium": {"N": 4096}}

class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)

def get_inputs():
    return [torch.randn(N)]

def get_init_inputs():
    return []
'''

NOISY = '''
import sys
import torch
import torch.nn as nn
print("task: printed at import")
sys.stdout.flush()

N = 256

class Model(nn.Module):
    def forward(self, x):
        print("task: printed in forward")
        return torch.relu(x)

def get_inputs():
    return [torch.randn(N)]

def get_init_inputs():
    return []
'''

# A lean C++ answer (agentforge.evaluator.native.load_cpp) that prints at import and per call.
NOISY_CANDIDATE = '''
import ctypes
import os
import torch
import torch.nn as nn
from agentforge.evaluator.native import load_cpp

print("candidate: printed at import")
os.write(1, b"candidate: written to fd 1\\n")

_lib = load_cpp("relu_noisy", r"""
extern "C" void relu(const float* x, float* y, long n) {
    for (long i = 0; i < n; ++i) y[i] = x[i] > 0.f ? x[i] : 0.f;
}
""")

class ModelNew(nn.Module):
    def forward(self, x):
        print("candidate: printed in forward")
        x = x.contiguous()
        y = torch.empty_like(x)
        _lib.relu(ctypes.c_void_p(x.data_ptr()), ctypes.c_void_p(y.data_ptr()), ctypes.c_long(x.numel()))
        return y
'''


@pytest.fixture
def env(tmp_path: Path, shared_cache: str) -> dict[str, str]:
    (tmp_path / "empty.toml").write_text("")
    return {**os.environ, "AGENTFORGE_CONFIG": str(tmp_path / "empty.toml"), "AGENTFORGE_CACHE_DIR": shared_cache,
            "AGENTFORGE_EVAL_PROFILE": "false"}


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


def one_object(stdout: str) -> dict:
    lines = [line for line in stdout.splitlines() if line.strip()]
    assert len(lines) == 1, stdout
    return json.loads(lines[0])


def test_a_task_that_sleeps_at_import_is_a_task_error_within_the_sandbox_timeout(tmp_path, env):
    task = write(tmp_path, "level1/sleepy.py", SLEEPY)
    candidate = write(tmp_path, "candidate.py", "import torch.nn as nn\nclass ModelNew(nn.Module):\n    pass\n")
    started = time.monotonic()
    out = subprocess.run([*CLI, "eval", str(task), str(candidate), "--json"], capture_output=True, text=True,
                         env={**env, "AGENTFORGE_SANDBOX_TIMEOUT_S": "5"}, timeout=180)
    assert out.returncode == 2, out.stderr
    assert time.monotonic() - started < 90
    result = one_object(out.stdout)
    assert result["status"] == "task_error" and result["stage"] == "task"
    assert result["error"]["type"] == "TaskTimeout"
    assert "task level1/sleepy" in result["error"]["message"] and "5 s" in result["error"]["message"]
    assert not result["accepted"]
    assert "task error, the candidate was not run" in out.stderr


def test_a_default_shape_too_large_for_this_machine_is_refused_naming_the_shapes_that_fit(tmp_path, env):
    task = write(tmp_path, "level1/huge.py", HUGE_DEFAULT)
    candidate = write(tmp_path, "candidate.py", "raise SystemExit('the candidate must not be built')\n")
    out = subprocess.run([*CLI, "eval", str(task), str(candidate)], capture_output=True, text=True, env=env,
                         timeout=180)
    assert out.returncode == 2, out.stderr
    assert out.stdout == ""
    [line] = [x for x in out.stderr.splitlines() if x.startswith("error")]
    assert "level1/huge: 'default' needs about" in line
    assert "shapes that fit: small, medium (run with --shape small --shape medium)" in line

    as_json = subprocess.run([*CLI, "eval", str(task), str(candidate), "--json"], capture_output=True, text=True,
                             env=env, timeout=180)
    obj = one_object(as_json.stdout)
    assert as_json.returncode == 2
    assert obj["status"] == "refused" and obj["error"]["type"] == "ShapeTooLarge"
    assert obj["shapes_that_fit"] == ["small", "medium"]
    assert obj["needed_bytes"]["default"] > obj["available_bytes"]


@pytest.mark.slow
def test_what_a_task_or_candidate_prints_never_reaches_stdout_with_json(tmp_path, env):
    task = write(tmp_path, "level1/noisy.py", NOISY)
    candidate = write(tmp_path, "candidate.py", NOISY_CANDIDATE)
    out = subprocess.run([*CLI, "eval", str(task), str(candidate), "--json", "--backend", "cpu",
                          "--no-compile-baseline"], capture_output=True, text=True, env=env, timeout=500)
    assert out.returncode == 0, out.stderr[-3000:]
    result = one_object(out.stdout)
    assert "printed" not in out.stdout and "written to fd 1" not in out.stdout
    assert result["task_name"] == "level1/noisy"
    assert result["status"] == "ok" and result["accepted"], result.get("error")
