"""A candidate that takes over its own process can spoil its own result, nothing more.

Each candidate here runs through the real sandbox and the real pipeline: the judge forks the
worker, the worker runs the candidate, and nothing the worker sends (or fails to send) may turn
into `ok`. The task is ReLU on zero-mean inputs, so a kernel that returns zeros is wrong.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from agentforge.evaluator.result import Measure, Status, TimingConfig
from agentforge.sandbox import SandboxConfig

from agentforge.candidate import Candidate
from agentforge.evaluation import evaluate, make_job
from agentforge.task import Task
from tests.fixtures.sandbox import quiet

TASK = Path(__file__).resolve().parents[1] / "exploits" / "tasks" / "elementwise_relu.py"

# Helpers pasted into the hostile candidates: find the worker's socket among its own descriptors
# and write a well-formed message of the judge's protocol to it, by hand.
FORGE = '''
import json, os, socket, stat, struct

def _socket_fds():
    fds = []
    for name in os.listdir("/proc/self/fd"):
        try:
            if stat.S_ISSOCK(os.fstat(int(name)).st_mode):
                fds.append(int(name))
        except OSError:
            pass
    return fds

def _forge(message):
    body = json.dumps({"m": message, "t": []}).encode()
    data = struct.pack(">I", len(body)) + body
    for fd in _socket_fds():
        try:
            os.write(fd, data)
        except OSError:
            pass
'''

RELU_ZEROS = '''
import torch
from torch import nn

class ModelNew(nn.Module):
    def forward(self, x):
        {body}
        return torch.zeros_like(x)
'''

HOSTILE = {
    # Exits in the middle of its import: no reply at all.
    "exits_at_import": ("import os\nos._exit(0)\n", {Status.RUNTIME_ERROR}),
    # Prints a verdict-shaped JSON object and exits 0, the way a leaky harness would read it.
    "prints_a_verdict": (
        'import json, os, sys\n'
        'print(json.dumps({"status": "ok", "accepted": True, "speedup_vs_eager": 6.0}))\n'
        'sys.stdout.flush()\nos._exit(0)\n', {Status.RUNTIME_ERROR}),
    # Writes a verdict-shaped frame to every descriptor it can find, then returns zeros.
    "writes_to_every_fd": (
        'import os\nimport torch\nfrom torch import nn\n'
        'frame = b"AFRAME01" + bytes(16) + (40).to_bytes(8, "big") + b\'{"status": "ok", "accepted": true}     \'\n'
        'for fd in range(3, 256):\n    try:\n        os.write(fd, frame)\n    except OSError:\n        pass\n'
        + RELU_ZEROS.format(body="pass"), {Status.MISMATCH, Status.RUNTIME_ERROR, Status.INTEGRITY_FLAG}),
    # Answers the call itself, with zeros and the right id, before the real reply goes out.
    "answers_twice": (
        FORGE + RELU_ZEROS.format(body='_forge({"id": 3, "output": 0.0, "evidence": []})'),
        {Status.RUNTIME_ERROR, Status.MISMATCH, Status.INTEGRITY_FLAG}),
    # Answers a question the judge never asked (a far-future id), then computes honestly.
    "answers_unasked": (
        FORGE + 'import torch\nfrom torch import nn\n\nclass ModelNew(nn.Module):\n'
        '    def forward(self, x):\n        _forge({"id": 999, "device_us": 0.1, "closed_us": 0.1})\n'
        '        return torch.relu(x)\n', {Status.RUNTIME_ERROR, Status.INTEGRITY_FLAG}),
    # Kills the process that judges it.
    "kills_its_parent": (
        'import os, signal\nimport torch\nfrom torch import nn\n\nclass ModelNew(nn.Module):\n'
        '    def forward(self, x):\n        os.kill(os.getppid(), signal.SIGKILL)\n        return torch.relu(x)\n',
        {Status.CRASH, Status.RUNTIME_ERROR, Status.INTEGRITY_FLAG}),  # the seccomp guard: refused_syscall
    # Never answers.
    "never_answers": (
        'import time\nimport torch\nfrom torch import nn\n\nclass ModelNew(nn.Module):\n'
        '    def forward(self, x):\n        time.sleep(3600)\n        return x\n', {Status.TIMEOUT}),
}


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> SandboxConfig:
    root = tmp_path_factory.mktemp("hostile")
    return quiet(root, timeout_s=60)


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_nothing_the_worker_does_becomes_ok(name: str, config: SandboxConfig) -> None:
    source, allowed = HOSTILE[name]
    task = Task("elementwise_relu", TASK.read_text())
    job = make_job(task, Candidate(source, backend="cpu"), device="cpu", measure=Measure(timing=False),
                   timing=TimingConfig(warmup=1, min_reps=3, max_reps=3))
    if name == "never_answers":  # the sandbox's budget is what ends it: keep it short
        config = dataclasses.replace(config, timeout_s=15)
    result = evaluate(job, config)
    assert result.status != Status.OK and not result.accepted, result.summary()
    assert result.status in allowed, f"{name}: {result.summary()} {result.error}"


def test_the_worker_holds_no_secret(config: SandboxConfig) -> None:
    """The candidate's process never sees the seeds: a candidate that searches its own memory for
    the verdict's seeds (read back after the run) finds none of them."""
    source = (
        'import torch\nfrom torch import nn\n\nclass ModelNew(nn.Module):\n'
        '    def forward(self, x):\n'
        '        with open("/proc/self/maps") as fh:\n            maps = fh.read()\n'
        '        raise RuntimeError("MEMDUMP " + str(_numbers()))\n\n'
        'def _numbers():\n'
        '    import gc, re\n'
        '    found = set()\n'
        '    for obj in gc.get_objects():\n'
        '        if isinstance(obj, int) and not isinstance(obj, bool) and 10**6 <= obj < 2**31:\n'
        '            found.add(obj)\n'
        '        elif isinstance(obj, dict):\n'
        '            found.update(v for v in obj.values() if isinstance(v, int) and 10**6 <= v < 2**31)\n'
        '    return sorted(found)\n'
    )
    task = Task("elementwise_relu", TASK.read_text())
    job = make_job(task, Candidate(source, backend="cpu"), device="cpu", measure=Measure(timing=False))
    result = evaluate(job, config)
    assert result.status == Status.RUNTIME_ERROR
    seed = result.provenance.track_settings["correctness"]["base_seed"]
    assert isinstance(seed, int)
    seen = result.error.message
    assert "MEMDUMP" in seen or "[redacted]" in seen, seen
    derived = {seed + 1 + trial + 1000 * shape for trial in range(5) for shape in range(2)} | {seed}
    assert not any(str(s) in seen for s in derived), "a seed reached the candidate's process"
