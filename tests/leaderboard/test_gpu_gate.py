"""Parallel optimisation loops never time two jobs on one GPU at once; CPU jobs run freely."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

from agentforge.candidate import Candidate
from agentforge.leaderboard.gpu_gate import DeviceGate, cuda_device_key, gated_evaluate
from agentforge.settings import Settings
from agentforge.task import Task

from .conftest import RELU


def _concurrency(backend: str, device: str, kind: str = "process") -> int:
    active, peak, lock = [0], [0], threading.Lock()

    def fake_evaluate(job, sandbox):
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        time.sleep(0.05)
        with lock:
            active[0] -= 1
        return job

    settings = Settings()
    settings.sandbox.kind = kind
    run = gated_evaluate(settings, DeviceGate(), device, evaluate=fake_evaluate)
    task = Task("level1/relu", RELU)
    with ThreadPoolExecutor(4) as pool:
        jobs = list(pool.map(lambda _: run(task, Candidate("class ModelNew: pass", backend=backend)), range(8)))
    assert all(j.device == (device if backend != "cpu" else "cpu") for j in jobs)
    return peak[0]


def test_cuda_jobs_hold_their_gpu() -> None:
    assert _concurrency("cuda", "cuda") == 1


def test_cpu_jobs_are_not_gated() -> None:
    assert _concurrency("cpu", "cuda") > 1


def test_ray_needs_no_gate() -> None:
    assert _concurrency("cuda", "cuda", kind="ray") > 1


def test_device_keys() -> None:
    assert cuda_device_key("cuda") == cuda_device_key("cuda:0") == "cuda:0"
    assert cuda_device_key("cuda:1") == "cuda:1" and cuda_device_key("cpu") is None
