"""`run_many` for local backends: a thread per in-flight child, results in input order.

Jobs on a CUDA device are exclusive: two never run on the same GPU at once (timings would
interfere). With `SandboxConfig.gpus` set, CUDA jobs are spread over those devices round-robin;
otherwise each keeps its own `device`. CPU jobs only share the worker count.

Inside the child a job on `cuda:N` sees one GPU: the child sets `CUDA_VISIBLE_DEVICES` to that GPU
before CUDA starts (in itself and in its candidate worker) and runs on `cuda:0`
(`child_device`), so events, synchronize and every kernel's current stream are on the job's GPU
without a `set_device` anywhere.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Sequence

from agentforge.evaluator.result import EvalJob, EvalResult
from agentforge.sandbox.config import SandboxConfig


def exclusive_device(device: str) -> str | None:
    """The GPU a job holds while it runs ("cuda" means cuda:0), or None for CPU jobs."""
    if not device.startswith("cuda"):
        return None
    return device if ":" in device else "cuda:0"


def child_device(device: str, inherited: str | None) -> tuple[str | None, str]:
    """(the child's CUDA_VISIBLE_DEVICES, the device name to use inside the child) for a job's
    device, given the CUDA_VISIBLE_DEVICES the child inherited (None: unset). `cuda:N` is the
    N-th GPU of the inherited list (its entry, an index or a UUID, is kept as written), or GPU N
    when nothing was inherited; `cuda` is `cuda:0`. CPU and `auto` jobs: (None, device), nothing
    changes. A GPU the inherited list does not have (an empty list hides every GPU) is a ValueError."""
    if not device.startswith("cuda"):
        return None, device
    _, _, index_text = device.partition(":")
    index = int(index_text or 0)
    if inherited is None:
        return str(index), "cuda:0"
    entries = [e.strip() for e in inherited.split(",") if e.strip()]
    if index >= len(entries):
        raise ValueError(f"job device {device} is not among the {len(entries)} GPU(s) of "
                         f"CUDA_VISIBLE_DEVICES={inherited!r}")
    return entries[index], "cuda:0"


def assign_devices(jobs: Sequence[EvalJob], gpus: Sequence[str]) -> list[EvalJob]:
    """CUDA jobs spread round-robin over `gpus` (indices or cuda:N names); others unchanged."""
    if not gpus:
        return list(jobs)
    names = [g if g.startswith("cuda") else f"cuda:{g}" for g in gpus]
    assigned, k = [], 0
    for job in jobs:
        if job.device.startswith("cuda"):
            job = dataclasses.replace(job, device=names[k % len(names)])
            k += 1
        assigned.append(job)
    return assigned


def run_pool(run: Callable[[EvalJob], EvalResult], jobs: Sequence[EvalJob], config: SandboxConfig,
             workers: int = 1, on_result: Callable[[int, EvalResult], None] | None = None) -> list[EvalResult]:
    """Run `jobs` with up to `workers` at once; `on_result(index, result)` as each finishes
    (called from one thread at a time)."""
    if workers < 1:
        raise ValueError(f"workers must be >= 1 (got {workers})")
    jobs = assign_devices(jobs, config.gpus)
    results: list[EvalResult | None] = [None] * len(jobs)
    pending = list(range(len(jobs)))
    busy: set[str] = set()
    cond = threading.Condition()
    report = threading.Lock()
    errors: list[BaseException] = []

    def take() -> int | None:
        with cond:
            while pending and not errors:
                for pos, index in enumerate(pending):
                    device = exclusive_device(jobs[index].device)
                    if device is None or device not in busy:
                        del pending[pos]
                        if device is not None:
                            busy.add(device)
                        return index
                cond.wait()
            return None

    def worker() -> None:
        while (index := take()) is not None:
            try:
                result = run(jobs[index])
                if on_result is not None:
                    with report:
                        on_result(index, result)
            except BaseException as exc:  # surfaced in the caller's thread below
                with cond:
                    errors.append(exc)
                result = None
            with cond:
                results[index] = result
                busy.discard(exclusive_device(jobs[index].device) or "")
                cond.notify_all()

    threads = [threading.Thread(target=worker, name=f"sandbox-worker-{i}", daemon=True)
               for i in range(min(workers, len(jobs)))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return [r for r in results if r is not None]
