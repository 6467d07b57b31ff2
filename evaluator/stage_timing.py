"""Timing stage: the candidate and its baselines, in one process, on the same inputs, interleaved."""

from __future__ import annotations

import copy
import random
import statistics
from dataclasses import dataclass, field
from typing import Any

import torch
from agentforge.evaluator import op_observer, timing
from agentforge.evaluator.compare import compare, reference_output_dtypes
from agentforge.evaluator.guards import ConcurrencyWatch
from agentforge.evaluator.remote import Clock, RemoteModel
from agentforge.evaluator.result import TimingConfig, TimingRecord
from agentforge.evaluator.stage_correctness import upcast

from agentforge.task import Task

POOL_SIZE = 4  # input contents for inputs too large to draw anew every repetition
FRESH_INPUT_BYTES = 64 * 2**20  # inputs up to this size are drawn anew for every timed repetition
# The worker's median must not be below this share of what the judge's own clock supports, less
# the round trips' noise: an honest worker reports about 1.0, and on a loaded 2-core machine its
# round trips were seen to run up to ten times its own figure (scheduling, not work), so only a
# worker that under-reports by more than that, beyond the noise, is flagged.
CLOCK_AGREEMENT = 0.1
CLOCK_SLACK_US = 30.0


@dataclass
class TimingOutcome:
    record: TimingRecord
    evidence: list[tuple[str, str]] = field(default_factory=list)
    # Threads and processes that torch.compile started (tqdm's monitor, compile workers): the
    # harness's, not the candidate's, so the final background-work check leaves them out.
    baseline_threads: set[int] = field(default_factory=set)
    baseline_children: set[int] = field(default_factory=set)


def _input_bytes(values: list[Any]) -> int:
    return sum(v.numel() * v.element_size() for v in values if isinstance(v, torch.Tensor))


def clock_disagreement(samples_us: list[float], clock: Clock) -> tuple[str | None, str]:
    """(evidence when the worker's samples are faster than the judge's clock allows, a note with the
    judge's own estimate). The judge's estimate of a call is its round trip less the round trip of
    the null candidate next to it; a worker can make its calls look slower, never faster."""
    estimates = clock.per_call_us(last=len(samples_us)) if samples_us else []
    if not estimates:
        return None, "judge's clock: no null round trips"
    estimate = statistics.median(estimates)
    base = statistics.median(clock.null_wall_us)
    claimed = statistics.median(samples_us)
    spread = statistics.median(abs(e - estimate) for e in estimates)
    # The uncertainty of a median of n round trips, not of one: three of its standard errors.
    slack = CLOCK_SLACK_US + 3 * max(clock.noise_us(), spread) / len(estimates) ** 0.5
    note = (f"judge's clock: {estimate:.1f} us per call (round trip less the null round trip beside it, "
            f"median {base:.1f} us); worker reported {claimed:.1f} us")
    if claimed < CLOCK_AGREEMENT * estimate - slack:
        return (f"the worker reported a median of {claimed:.1f} us per call; the judge's own clock measured "
                f"{estimate:.1f} us (null round trip {base:.1f} us, noise {clock.noise_us():.1f} us)"), note
    return None, note


def _compiled(model: torch.nn.Module, mode: str) -> Any:
    # One compile thread: inductor's worker pool would otherwise leave processes running that the
    # integrity check for background work must not blame on the candidate.
    import os
    import tempfile

    import torch._inductor.config as inductor_config

    inductor_config.compile_threads = 1
    # The judge's own cache, named for its real uid: inductor's default path is named for the user
    # the process had when torch was imported (root, before the sandbox dropped it), and the
    # candidate worker shares that temporary folder.
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(tempfile.gettempdir(), f"inductor-judge-{os.getuid()}")
    return torch.compile(copy.deepcopy(model), mode=None if mode == "default" else mode)


def _load_notes(device: torch.device) -> list[str]:
    """CPU timings on an oversubscribed machine measure the scheduler, not the kernels: say so.
    (PyTorch's intra-op thread pool suffers most: a 70 us op can take 25 ms to wake its threads.)"""
    if device.type != "cpu":
        return []
    import os

    load = os.getloadavg()[0]
    cores = os.cpu_count() or 1
    if load <= cores:
        return []
    return [f"machine loaded: load average {load:.1f} on {cores} cores; CPU timings and their ratios are unreliable"]


def measure(task: Task, shape: str, candidate: RemoteModel, reference: torch.nn.Module,
            reference_dtype: torch.dtype, device: torch.device, config: TimingConfig,
            baselines: tuple[str, ...], compile_modes: tuple[str, ...], tolerance: tuple[float, float],
            seed: int, outputs_like: Any = None) -> TimingOutcome:
    notes: list[str] = []
    pool = [task.make_inputs(seed + 7919 * (k + 1), shape, device) for k in range(POOL_SIZE)]
    buffers = [v.clone() if isinstance(v, torch.Tensor) else v for v in pool[0]]
    reference_hi = copy.deepcopy(reference).to(reference_dtype)
    dtypes = reference_output_dtypes(reference, pool[0])

    fresh_each_rep = _input_bytes(pool[0]) <= FRESH_INPUT_BYTES
    secret = random.SystemRandom()  # not derivable from anything the candidate can see

    def refill(rep: int) -> None:
        """New contents every repetition, never a cycle: drawn anew from a secret seed (the task's own
        input distribution); above FRESH_INPUT_BYTES, a pool entry at a secret random scale."""
        if fresh_each_rep:
            values, scale = task.make_inputs(secret.randrange(2**62), shape, device), None
        else:
            values, scale = pool[secret.randrange(POOL_SIZE)], secret.uniform(0.5, 1.5)
        for buffer, value in zip(buffers, values, strict=True):
            if isinstance(buffer, torch.Tensor):
                buffer.copy_(value)
                if scale is not None and buffer.is_floating_point():
                    buffer.mul_(scale)

    def recheck(rep: int, output: Any) -> str | None:
        expected = reference_hi(*upcast(buffers, reference_dtype))
        result = compare(output, expected, task.dtype, atol=tolerance[0], rtol=tolerance[1], dtypes=dtypes)
        return None if result.passed else f"repetition {rep}: {result.message or result.failed_check}"

    def crosscheck(rep: int, output: Any, eager: Any) -> str | None:
        # Against eager's output on the same buffers, at twice the tolerance (both sides carry their own
        # rounding): catches a skipped or stale call on every repetition, not just the re-checked ones.
        result = compare(output, eager, task.dtype, atol=2 * tolerance[0], rtol=2 * tolerance[1], dtypes=dtypes)
        return None if result.passed else f"repetition {rep}, against eager: {result.message or result.failed_check}"

    candidate.flush = config.flush_l2
    if outputs_like is None:
        outputs_like = reference(*buffers)
    candidate.calibrate(outputs_like)
    subjects = [timing.Subject("candidate", candidate.timer, timer=candidate.timer)]
    if "eager" in baselines:
        subjects.append(timing.Subject("eager", reference))
    before_compile = ConcurrencyWatch.start()
    if "compile" in baselines:
        for mode in compile_modes:
            try:
                fn = _compiled(reference, mode)
                fn(*buffers)  # compile outside the timed loop
                subjects.append(timing.Subject(f"compile-{mode}", fn))
            except Exception as exc:
                notes.append(f"torch.compile mode={mode} failed: {type(exc).__name__}: {str(exc)[:200]}")
    after_compile = ConcurrencyWatch.start()
    with op_observer.observing():  # the worker times the candidate under it: the same cost for every subject
        run = timing.run_interleaved(subjects, buffers, refill, device, config, recheck, seed=seed,
                                     crosscheck=crosscheck if config.recheck_fraction > 0 else None)
    evidence = [("timed_output_mismatch", f) for f in run.recheck_failures[:3]]
    cand = run.subjects["candidate"]
    disagreement, judge_note = clock_disagreement(cand.samples_us, candidate.clock)
    notes.append(judge_note)
    if disagreement:
        evidence.append(("timing_disagreement", disagreement))
    if device.type == "cuda":
        gap = timing.unsynchronized_evidence(cand, [s for s in run.subjects.values() if s is not cand])
        if gap:
            evidence.append(("unsynchronized_work", gap))
            cand.samples_us = cand.closed_us  # time it by what the device really did
    record = TimingRecord(
        shape=shape, method=run.method, candidate=timing.summarise(cand, config.statistic),
        baselines={name: timing.summarise(s, config.statistic) for name, s in run.subjects.items()
                   if name != "candidate"},
        l2_flushed=run.l2_flushed, interleaved=True, rechecked_outputs=run.rechecks, notes=tuple(notes),
    )
    return TimingOutcome(record, evidence, after_compile.threads - before_compile.threads,
                         after_compile.children - before_compile.children)
