"""A candidate timed through a real spawned worker on the CPU (the real wire and timing stage), as
the pipeline does, without the pipeline's static rules: for tests of the timing protocol itself."""

from __future__ import annotations

import os
from pathlib import Path

import torch
from agentforge.evaluator.judge.stage_correctness import build_remote
from agentforge.evaluator.judge.stage_timing import TimingOutcome, TimingRequest, measure
from agentforge.evaluator.result import TimingConfig
from agentforge.sandbox.worker import launch_worker

from agentforge.task import Task

TASK = Path(__file__).resolve().parents[1] / "exploits" / "tasks" / "elementwise_relu.py"


def time_in_worker(source: str, tmp_path: Path, config: TimingConfig, module_name: str, seed: int = 99
                   ) -> TimingOutcome:
    task = Task("elementwise_relu", TASK.read_text())
    device = torch.device("cpu")
    client = launch_worker()
    try:
        client.setup(workdir=os.getcwd(), cache_dir=str(tmp_path / "cache"), cpu_threads=1, device="cpu",
                     torch_switches=True)
        loaded = client.request("load", source=source, backend="cpu", compile_only=False, arch="sm_90a",
                                device="cpu", interpret=False, module_name=module_name)
        assert loaded["has_model"], loaded
        reference, candidate = build_remote(task, client, "default", 1234, device)
        with torch.no_grad():
            return measure(TimingRequest(task, "default", candidate, reference, torch.float64, device, config, (), (),
                                         (1e-5, 1e-5), seed=seed, cpu_threads=1))
    finally:
        client.close()
