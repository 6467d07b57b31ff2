"""No two timings on one GPU while several optimisation loops run at once.

`leaderboard run --workers N` runs N agent loops in threads; each loop evaluates its candidates
itself. With the process sandbox those evaluations would meet on the same GPU, so every loop of
a leaderboard run evaluates through one shared gate: a lock per CUDA device. CPU jobs pass
freely. On Ray no gate is needed: each job asks Ray for a whole GPU.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from agentforge.candidate import Candidate
from agentforge.evaluator.result import EvalResult, Measure, TimingConfig
from agentforge.task import Task


def cuda_device_key(device: str) -> str | None:
    """The GPU a job holds ("cuda" is cuda:0), or None for CPU jobs."""
    if not device.startswith("cuda"):
        return None
    return device if ":" in device else "cuda:0"


class DeviceGate:
    """One lock per CUDA device, shared by every loop of a leaderboard run."""

    def __init__(self) -> None:
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()

    @contextmanager
    def hold(self, device: str) -> Iterator[None]:
        key = cuda_device_key(device)
        if key is None:
            yield
            return
        with self._guard:
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:
            yield


def gated_evaluate(
    settings: Any, gate: DeviceGate, device: str, *, evaluate: Callable[..., EvalResult] | None = None,
    baselines: tuple[str, ...] = ("eager", "compile"), shapes: tuple[str, ...] = (),
    timing: TimingConfig | None = None, compile_modes: tuple[str, ...] = (),
) -> Callable[[Task, Candidate], EvalResult]:
    """The agent loop's `evaluate`, with each CUDA job holding its GPU through `gate`; `baselines`
    as `leaderboard run --no-compile-baseline` asks (torch.compile is slow to build). `shapes`,
    `timing` and `compile_modes` as `--shape` and `--quick` ask (empty or None: the evaluator's
    defaults, the backend's shapes among them)."""
    from agentforge.evaluation import evaluate as sandbox_evaluate
    from agentforge.evaluator.api import make_job
    from agentforge.sandbox.config import from_settings

    sandbox = from_settings(settings.sandbox, settings.cache_dir)
    run_job = evaluate or sandbox_evaluate
    modes = {"compile_modes": compile_modes} if compile_modes else {}
    measure = Measure(baselines=baselines, profile=settings.eval.profile, **modes)

    def run(task: Task, candidate: Candidate) -> EvalResult:
        job = make_job(task, candidate, device="cpu" if candidate.backend == "cpu" else device,
                       track=settings.eval.track, measure=measure, cuda_arch=settings.eval.cuda_arch,
                       shapes=shapes, timing=timing, timing_shape=shapes[0] if shapes else "default",
                       cache_dir=str(Path(settings.cache_dir).expanduser()))
        if sandbox.kind == "ray":
            return run_job(job, sandbox)
        with gate.hold(job.device):
            return run_job(job, sandbox)

    return run
