"""No operator observer runs over the judge's timed baseline calls (issue 32, finding 2): its host
cost per aten operator fell inside every window, eager's many operators paying it many times and a
fused candidate once, which inflated the speedup. A real worker, the real timing stage, on the CPU."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from agentforge.evaluator import op_observer
from agentforge.evaluator.judge.stage_correctness import build_remote
from agentforge.evaluator.judge.stage_timing import TimingRequest, measure
from agentforge.evaluator.result import TimingConfig
from agentforge.sandbox.worker import launch_worker

from agentforge.task import Task

TASK = Path(__file__).resolve().parents[1] / "exploits" / "tasks" / "elementwise_relu.py"
CANDIDATE = '''
import torch
from torch import nn


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.relu(x)
'''


@pytest.mark.slow  # a worker process and the timing stage: about a minute on the loaded 2-core machine
def test_the_judges_baselines_are_timed_without_the_operator_observer(tmp_path: Path, monkeypatch) -> None:
    started: list[str] = []
    real_start = op_observer.start

    def start() -> object:  # the real observer, its start noted
        started.append("observer")
        return real_start()

    monkeypatch.setattr(op_observer, "start", start)
    task = Task("elementwise_relu", TASK.read_text())
    device = torch.device("cpu")
    client = launch_worker()
    try:
        client.setup(workdir=os.getcwd(), cache_dir=str(tmp_path / "cache"), cpu_threads=1, device="cpu",
                     torch_switches=True)
        loaded = client.request("load", source=CANDIDATE, backend="cpu", compile_only=False, arch="sm_90a",
                                device="cpu", interpret=False, module_name="observer_free_baselines")
        assert loaded["has_model"], loaded
        reference, candidate = build_remote(task, client, "default", 1234, device)
        calls: list[int] = []
        reference.register_forward_pre_hook(lambda module, args: calls.append(len(started)))
        config = TimingConfig(warmup=1, min_reps=5, max_reps=5, time_cap_s=1.0)
        with torch.no_grad():
            outcome = measure(TimingRequest(task, "default", candidate, reference, torch.float64, device, config,
                                            ("eager",), (), (1e-5, 1e-5), seed=5, cpu_threads=1))
    finally:
        client.close()
    assert outcome.record.baselines["eager"].n == 5 and len(calls) >= 6  # eager was timed here, in this process
    assert started == []  # and no observer was started around it
