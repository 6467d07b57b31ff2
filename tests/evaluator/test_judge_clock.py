"""The judge's clock: a worker that reports faster calls than it made is caught by time the judge
measured itself (`timing_disagreement`), and an honest one is not.

Real parts: a real worker process (spawned), the real wire, the real timing stage. The lying
candidate rewrites the worker's own clock, which only a candidate that owns its process can do;
it is driven here without the static rules (which would stop a candidate importing the evaluator
before timing), so that the clock alone has to catch it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from agentforge.evaluator.remote import WorkerClient
from agentforge.evaluator.result import TimingConfig
from agentforge.evaluator.stage_correctness import build_remote
from agentforge.evaluator.stage_timing import measure

from agentforge.task import Task

TASK = Path(__file__).resolve().parents[1] / "exploits" / "tasks" / "elementwise_relu.py"
SLOW_RELU = '''
import time
import torch
from torch import nn
{lie}

class ModelNew(nn.Module):
    def forward(self, x):
        time.sleep(0.1)
        return torch.relu(x)
'''
LIE = '''
import agentforge.evaluator.candidate_side as _side
_real = _side._perf_counter_ns
_side._perf_counter_ns = lambda: _real() // 1000   # every interval it measures looks 1000x shorter
'''
CONFIG = TimingConfig(warmup=1, min_reps=6, max_reps=6, flush_l2=False, recheck_fraction=0.0)


def timed(source: str, tmp_path: Path) -> tuple[list[tuple[str, str]], float]:
    task = Task("elementwise_relu", TASK.read_text())
    device = torch.device("cpu")
    client = WorkerClient.spawn()
    try:
        client.setup(workdir=os.getcwd(), cache_dir=str(tmp_path / "cache"), cpu_threads=1, device="cpu",
                     torch_switches=True)
        loaded = client.request("load", source=source, backend="cpu", compile_only=False, arch="sm_90a",
                                device="cpu", interpret=False, module_name="clock_test_candidate")
        assert loaded["has_model"], loaded
        reference, candidate = build_remote(task, client, "default", 1234, device)
        with torch.no_grad():
            outcome = measure(task, "default", candidate, reference, torch.float64, device, CONFIG, (), (),
                              (1e-5, 1e-5), seed=99)
    finally:
        client.close()
    return outcome.evidence, outcome.record.candidate.median_us


@pytest.mark.parametrize("lie", [False, True], ids=["honest", "lying"])
def test_the_judges_clock_catches_a_lying_worker(lie: bool, tmp_path: Path) -> None:
    evidence, median_us = timed(SLOW_RELU.format(lie=LIE if lie else ""), tmp_path)
    rules = {rule for rule, _ in evidence}
    if lie:
        assert median_us < 5_000, "the lie did not take: the worker reported the real time"
        assert "timing_disagreement" in rules, evidence
    else:
        assert median_us >= 100_000
        assert "timing_disagreement" not in rules, evidence


REPEAT_DETECTOR = '''
import hashlib
import torch
from torch import nn

SEEN = set()

class ModelNew(nn.Module):
    def forward(self, x):
        key = hashlib.sha256(x.contiguous().numpy().tobytes()).hexdigest()
        if key in SEEN:
            raise RuntimeError("timed input contents came back: a cache keyed on them would hit")
        SEEN.add(key)
        return torch.relu(x)
'''


def test_timed_input_contents_never_repeat(tmp_path: Path) -> None:
    """More repetitions than the old 4-contents x 17-scales cycle (68): every one is new, so a result
    cache keyed on the contents never hits. The candidate raises on the first repeat it sees."""
    config = TimingConfig(warmup=1, min_reps=90, max_reps=90, flush_l2=False, recheck_fraction=0.0)
    task = Task("elementwise_relu", TASK.read_text())
    client = WorkerClient.spawn()
    try:
        client.setup(workdir=os.getcwd(), cache_dir=str(tmp_path / "cache"), cpu_threads=1, device="cpu",
                     torch_switches=True)
        client.request("load", source=REPEAT_DETECTOR, backend="cpu", compile_only=False, arch="sm_90a",
                       device="cpu", interpret=False, module_name="repeat_test_candidate")
        reference, candidate = build_remote(task, client, "default", 1234, torch.device("cpu"))
        with torch.no_grad():
            outcome = measure(task, "default", candidate, reference, torch.float64, torch.device("cpu"), config,
                              (), (), (1e-5, 1e-5), seed=99)
    finally:
        client.close()
    assert outcome.record.candidate.n == 90
