"""A round's candidates evaluated together: built and checked concurrently, timed one at a time.

Stage 1 (check): every candidate's build and correctness run at once, each in its own sandbox
child, on up to `workers` CPU workers. Stage 2 (measure): the candidates that passed are timed one
after another, each holding the device exclusively. A build beside a timing would pollute it (on
the CPU backend it takes the cores the timed code runs on; on a GPU a correctness run shares the
device), so no check starts while a timing runs, and no timing starts while a check runs:
`TimingGate` is a readers-writer lock per device (the CPU is one device), shared by every run in
this process, as `leaderboard.gpu_gate` shares one lock per GPU between a leaderboard's loops.

The measure job repeats the build (a hit in the build cache, keyed by source hash) and the
correctness check: an evaluation is one sandboxed job, and a timing of code nobody checked in the
same job would not be a verdict.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass

from agentforge.candidate import Candidate
from agentforge.evaluator.result import EvalResult
from agentforge.leaderboard.gpu_gate import cuda_device_key
from agentforge.task import Task, TaskText

EvaluateFn = Callable[[Task | TaskText, Candidate], EvalResult]


class _ReadWrite:
    """Many checks at once, or one timing alone."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._readers = 0
        self._writing = False
        self._waiting_writers = 0

    @contextmanager
    def shared(self) -> Iterator[None]:
        with self._cond:
            # A waiting timing goes first: checks arrive in bursts and would starve it.
            self._cond.wait_for(lambda: not self._writing and not self._waiting_writers)
            self._readers += 1
        try:
            yield
        finally:
            with self._cond:
                self._readers -= 1
                self._cond.notify_all()

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        with self._cond:
            self._waiting_writers += 1
            self._cond.wait_for(lambda: not self._writing and not self._readers)
            self._waiting_writers -= 1
            self._writing = True
        try:
            yield
        finally:
            with self._cond:
                self._writing = False
                self._cond.notify_all()


class TimingGate:
    """One readers-writer lock per device: "cpu", or the CUDA device a job holds."""

    def __init__(self) -> None:
        self._locks: dict[str, _ReadWrite] = {}
        self._guard = threading.Lock()

    def _lock(self, device: str) -> _ReadWrite:
        key = cuda_device_key(device) or "cpu"
        with self._guard:
            return self._locks.setdefault(key, _ReadWrite())

    def checking(self, device: str) -> Iterator[None]:
        return self._lock(device).shared()  # type: ignore[return-value]

    def timing(self, device: str) -> Iterator[None]:
        return self._lock(device).exclusive()  # type: ignore[return-value]


GATE = TimingGate()  # shared by every run of this process


@dataclass
class BatchTimes:
    """Where a batch's wall time went, for the report."""

    check_s: float = 0.0
    measure_s: float = 0.0
    checked: int = 0
    measured: int = 0


def evaluate_batch(
    task: Task | TaskText, candidates: Sequence[Candidate], evaluate: EvaluateFn, *, device: str,
    check: EvaluateFn | None = None, workers: int = 2, gate: TimingGate = GATE,
    times: BatchTimes | None = None,
) -> list[EvalResult]:
    """Results in input order. Without `check` (an evaluate function from outside, which cannot be
    split), or for a single candidate, each candidate is evaluated whole, one at a time."""
    import time

    times = times if times is not None else BatchTimes()
    results: list[EvalResult | None] = [None] * len(candidates)
    to_time = list(range(len(candidates)))
    if check is not None and len(candidates) > 1:
        started = time.monotonic()

        def checked(i: int) -> EvalResult:
            with gate.checking(device):
                return check(task, candidates[i])

        with ThreadPoolExecutor(max_workers=max(1, min(workers, len(candidates)))) as pool:
            first = list(pool.map(checked, range(len(candidates))))
        times.check_s += time.monotonic() - started
        times.checked += len(candidates)
        to_time = []
        for i, result in enumerate(first):
            if result.accepted:
                to_time.append(i)
            else:
                results[i] = result  # its verdict is final: a failed check is not timed
    started = time.monotonic()
    for i in to_time:
        with gate.timing(device):
            results[i] = evaluate(task, candidates[i])
    times.measure_s += time.monotonic() - started
    times.measured += len(to_time)
    return [r for r in results if r is not None]
