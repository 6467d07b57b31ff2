"""Reward evaluations as Ray tasks: placed by a custom resource, cancelled when abandoned.

Each evaluation is one Ray task that reserves `num_gpus` Ray GPUs and the custom `resources`
(e.g. `{"agentforge_eval_gpu": 1}`). On a cluster where training owns every Ray GPU (verl's
placement groups take whole nodes), evaluation nodes are started with `--num-gpus=0
--resources='{"agentforge_eval_gpu": N}'`: training never sees their GPUs, and only reward tasks
land there. Since Ray then assigns no GPU itself, a CUDA task on such a node claims one of the
node's N devices by an exclusive lock on a file per device (`claim_device`); Ray's resource
count keeps at most N tasks there, so one device is always free, and the kernel drops the lock
when the task ends however it ends.

`cancel(job)` is called by the reward service when every request waiting on `job` has timed
out: the task is interrupted (`ray.cancel`, which raises in the task, so the sandbox's own
cleanup kills its child and removes its folder), and force-killed after `cancel_grace_s` if it
is still running (the sandbox child dies with its parent). Nothing is left running for a request
nobody waits for.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from agentforge.evaluator.result import EvalJob, EvalResult

DEVICE_LOCK_DIR = Path(tempfile.gettempdir()) / "agentforge-eval-devices"


class RayEvaluate:
    """Runs `evaluate(job)` as a Ray task (on any node the resources allow); picklable."""

    def __init__(self, address: str | None = None, num_gpus: float = 0.0,
                 sandbox_options: dict[str, Any] | None = None, resources: dict[str, float] | None = None,
                 cancel_grace_s: float = 5.0) -> None:
        self.address = address
        self.num_gpus = num_gpus
        self.sandbox_options = dict(sandbox_options or {})
        self.resources = dict(resources or {})
        self.cancel_grace_s = cancel_grace_s
        self._remote: Any = None
        self._lock = threading.Lock()
        self._refs: dict[int, Any] = {}  # id(job) -> its task (None while submitted), in flight
        self._cancelled: set[int] = set()  # cancelled before their task was submitted

    def __getstate__(self) -> dict[str, Any]:
        return {"address": self.address, "num_gpus": self.num_gpus, "sandbox_options": self.sandbox_options,
                "resources": self.resources, "cancel_grace_s": self.cancel_grace_s}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(**state)

    def _task(self) -> Any:
        import ray

        with self._lock:
            if self._remote is None:
                if not ray.is_initialized():
                    ray.init(address=self.address, ignore_reinit_error=True)
                self._remote = ray.remote(num_gpus=self.num_gpus, resources=self.resources or None,
                                          max_retries=0)(_evaluate_json)
            return self._remote

    def __call__(self, job: EvalJob) -> EvalResult:
        import ray

        with self._lock:
            self._refs[id(job)] = None  # being submitted
        try:
            remote = self._task()
            claim = job.device.startswith("cuda") and self.num_gpus == 0
            ref = remote.remote(job.to_json(), self.sandbox_options, claim)
            with self._lock:
                self._refs[id(job)] = ref
                cancelled = id(job) in self._cancelled
            if cancelled:
                self._interrupt(ref)
            return EvalResult.from_json(ray.get(ref))
        finally:
            with self._lock:
                self._refs.pop(id(job), None)
                self._cancelled.discard(id(job))

    def cancel(self, job: EvalJob) -> None:
        """Stop `job`'s task: nobody waits for its verdict any more. A job not in flight here
        (finished already) is left alone."""
        with self._lock:
            if id(job) not in self._refs:
                return
            ref = self._refs[id(job)]
            if ref is None:  # its task is being submitted: interrupted as soon as it is
                self._cancelled.add(id(job))
                return
        self._interrupt(ref)

    def _interrupt(self, ref: Any) -> None:
        import ray

        ray.cancel(ref)  # KeyboardInterrupt in the task: the sandbox's cleanup runs
        threading.Thread(target=self._force_later, args=(ref,), daemon=True, name="reward-cancel").start()

    def _force_later(self, ref: Any) -> None:
        import ray

        deadline = time.monotonic() + self.cancel_grace_s
        while time.monotonic() < deadline:
            ready, _ = ray.wait([ref], timeout=0.2)
            if ready:
                return
        with contextlib.suppress(Exception):  # ended meanwhile, or Ray already shut down
            ray.cancel(ref, force=True)


def _evaluate_json(job_json: str, sandbox_options: dict[str, Any], claim: bool = False) -> str:
    """Runs on a Ray worker: the job crosses as JSON, the evaluation in a sandbox child there."""
    import dataclasses

    from agentforge.rl.service import LocalEvaluate

    job = EvalJob.from_json(job_json)
    if not claim:
        return LocalEvaluate(sandbox_options)(job).to_json()
    with claim_device(_device_count()) as index:
        return LocalEvaluate(sandbox_options)(dataclasses.replace(job, device=f"cuda:{index}")).to_json()


def _device_count() -> int:
    import torch

    return torch.cuda.device_count()


@contextlib.contextmanager
def claim_device(count: int, lock_dir: Path = DEVICE_LOCK_DIR, poll_s: float = 0.2) -> Iterator[int]:
    """Hold one of `count` devices of this machine for the duration: an exclusive `flock` on its
    file, which the kernel drops when the holder dies. Waits while all are held."""
    if count < 1:
        raise RuntimeError("no CUDA device on this node: start evaluation nodes with their GPUs "
                           "visible (ray start --num-gpus=0 hides them from Ray only)")
    lock_dir.mkdir(parents=True, exist_ok=True)
    while True:
        for index in range(count):
            fd = os.open(lock_dir / f"cuda{index}.lock", os.O_RDWR | os.O_CREAT, 0o666)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            try:
                yield index
            finally:
                os.close(fd)
            return
        time.sleep(poll_s)
