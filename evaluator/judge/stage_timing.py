"""Timing stage: the candidate and its baselines, in one process, on the same inputs, interleaved."""

from __future__ import annotations

import copy
import math
import random
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from agentforge.evaluator import build_cache, device_attribution, timing
from agentforge.evaluator.guards import ConcurrencyWatch
from agentforge.evaluator.judge import baseline_cache
from agentforge.evaluator.judge.compare import compare, reference_output_dtypes
from agentforge.evaluator.judge.proc_view import cpu_ns, thread_cpu_us
from agentforge.evaluator.judge.remote import Clock, RemoteModel, spread
from agentforge.evaluator.models import upcast
from agentforge.evaluator.result import TimingConfig, TimingRecord

from agentforge.task import Task

POOL_SIZE = 4  # input contents for inputs too large to draw anew every repetition
FRESH_INPUT_BYTES = 64 * 2**20  # inputs up to this size are drawn anew for every timed repetition
# The judge holds the worker's timing samples against two clocks of its own.
# Wall: each timed round trip less the null round trip beside it. On a loaded 2-core machine honest
# round trips were seen to run up to ten times the call (scheduling, not work), so a median below a
# tenth of this estimate, beyond the noise, is flagged; a median below CLOCK_SUBSTITUTE of it, beyond
# the noise, is not believed: the verdict times the candidate by the judge's estimate instead.
CLOCK_AGREEMENT = 0.1
CLOCK_SUBSTITUTE = 1 / 1.5
CLOCK_SLACK_US = 30.0
# CPU: the worker process's CPU time in each round trip less its null's, read from the kernel. A call
# cannot spend more CPU than its threads times its duration, so a worker that spent more than
# CPU_AGREEMENT x (its thread allowance x the time it reported), beyond the noise, either lies about
# its time or ran on more threads than it was given (honest workers measured 0.8-1.0x on one thread).
CPU_AGREEMENT = 1.5
CPU_SLACK_US = 20.0
# Outside the timed windows (from the judge's writing the inputs to the timed request: the input
# staging and the cache flush) a worker runs harness code only, the same before a candidate's call as
# before a null's. On the worker's CPU clock, with one thread allowed on the CPU backend:
# - before a null and before a call on inputs just written (both stage them cold), the trimmed means
#   (the middle 60 %, robust to the odd collection, page fault or preemption) may differ by no more
#   than three standard errors, OUTSIDE_SLACK_US and OUTSIDE_RELATIVE of the dearer; before a call
#   on the inputs its null just staged (warm in cache, cheaper), no more than the dearer of those two
#   plus as much (work moved before the calls);
# - the two together may cost no more than OUTSIDE_RATIO x what the same staging and flush cost the
#   judge's own thread, plus OUTSIDE_FLOOR_US (work moved before every round trip alike, which the
#   null would cancel). Honest workers measured 1.4x of the judge's cost plus 120 us of protocol on
#   the 2-core VM (204 vs 52 us for 256 KB of input, 2,560 vs 1,820 us for 32 MB). At load 6 on its
#   2 cores an honest worker's protocol cost 4x as much (739 vs 114 us, flagged); a floor of 600 us
#   that let it pass let `cases/work_in_flush_window` (2.3 ms moved) through in a fresh-clone CI run.
#   A cheat accepted is worse than a false flag on an overloaded machine: 300 us stays, until a clean
#   reference worker gives a bound that follows the load.
OUTSIDE_SLACK_US = 30.0
# ... and, between calls and nulls, a share of the staging's own cost: with 8 MB of input on a loaded
# 2-core Intel VM (CI) an honest worker's windows before nulls and before calls differed by 25 % of
# their 7 ms (beyond three standard errors of the trimmed means: the load's tails are heavy). Work
# moved before every round trip alike is bounded by the control worker, not by this comparison.
OUTSIDE_RELATIVE = 0.3
OUTSIDE_TRIM = 0.2
OUTSIDE_RATIO = 2.0
OUTSIDE_FLOOR_US = 300.0
OUTSIDE_MIN_READINGS = 6  # of each side, the first null (which maps the arenas) left out
# Held to the control worker's outside windows instead (`judge.control`: a worker forked and set up
# as the candidate's, loaded with the judge's own module, its nulls sent beside the candidate's), the
# bound follows the machine's load.
CONTROL_RATIO = 1.3
CONTROL_FLOOR_US = 100.0
REPLICA_MAX_BYTES = 256 * 2**20  # inputs the judge copies once more to learn what staging costs
# A worker thread other than the serving one that ran at least this long during the timed loop, and
# at least this share of the time the candidate's timed calls took by its own account, is a thread
# the candidate computes on (each member of a team of four ran 1.4 ms in a CI loop of small GEMMs;
# the harness's own threads ran 0 us with one thread allowed).
BUSY_THREAD_US = 200.0
BUSY_THREAD_SHARE = 0.02


@dataclass
class ClockCheck:
    """What the judge's clocks say of the worker's samples: evidence per rule, a note for the
    record, and the judge's own per-call estimates when the worker's figure is not believed."""

    evidence: list[tuple[str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    substitute_us: list[float] | None = None


@dataclass
class TimingOutcome:
    record: TimingRecord
    evidence: list[tuple[str, str]] = field(default_factory=list)
    # Threads and processes that torch.compile started (tqdm's monitor, compile workers): the
    # harness's, not the candidate's, so the final background-work check leaves them out.
    baseline_threads: set[int] = field(default_factory=set)
    baseline_children: set[int] = field(default_factory=set)
    compile_seconds: float = 0.0  # of the stage's time, torch.compile's (cache copy and wait included)


def _input_bytes(values: list[Any]) -> int:
    return sum(v.numel() * v.element_size() for v in values if isinstance(v, torch.Tensor))


# Normal noise: a standard deviation is 1.4826 median absolute deviations, and the median of n
# readings has a standard error of 1.2533 standard deviations / sqrt(n).
MAD_TO_SD = 1.4826
MEDIAN_SE = 1.2533


def _uncertainty(estimates: list[float], noise: float, absolute: float) -> float:
    """Three standard errors of the median of `estimates`, from the larger of their own median absolute
    deviation and `noise` (the null round trips'), plus an absolute floor. (Until 2026-12-02 this took
    3 x MAD / sqrt(n), about 1.6 standard errors: under normal noise an honest median crosses that
    about one time in 18, where three standard errors allow one in 740.)"""
    centre = statistics.median(estimates)
    spread = statistics.median(abs(e - centre) for e in estimates)
    return absolute + 3 * MEDIAN_SE * MAD_TO_SD * max(noise, spread) / len(estimates) ** 0.5


def clock_disagreement(samples_us: list[float], clock: Clock, threads: int | None = None) -> ClockCheck:
    """Hold the worker's samples against the judge's wall clock and, with `threads` (the CPU threads
    the candidate was given; None on a GPU), against the worker's CPU time. A worker can make its
    calls look slower than the judge's clocks say, never faster."""
    check = ClockCheck()
    estimates = clock.per_call_us(last=len(samples_us)) if samples_us else []
    if not estimates:
        check.notes.append("judge's clock: no null round trips")
        return check
    claimed = statistics.median(samples_us)
    estimate = statistics.median(estimates)
    base = statistics.median(clock.null_wall_us)
    slack = _uncertainty(estimates, clock.noise_us(), CLOCK_SLACK_US)
    check.notes.append(f"judge's clock: {estimate:.1f} us per call (round trip less the null round trip beside "
                       f"it, median {base:.1f} us); worker reported {claimed:.1f} us")
    if claimed < CLOCK_AGREEMENT * estimate - slack:
        check.evidence.append(("timing_disagreement", (
            f"the worker reported a median of {claimed:.1f} us per call; the judge's own clock measured "
            f"{estimate:.1f} us (null round trip {base:.1f} us, noise {clock.noise_us():.1f} us)")))
    elif claimed < CLOCK_SUBSTITUTE * estimate - slack:
        check.substitute_us = [max(e, 0.0) for e in estimates]
        check.notes.append(f"the worker's {claimed:.1f} us is below what the judge's clock supports beyond its "
                           f"noise ({slack:.1f} us): the candidate is timed by the judge's estimate")
    if threads is not None:
        check.evidence += _cpu_disagreement(claimed, clock, threads, len(samples_us), check.notes)
    return check


def _cpu_disagreement(claimed: float, clock: Clock, threads: int, n: int, notes: list[str]) -> list[tuple[str, str]]:
    cpu = clock.per_call_cpu_us(last=n)
    if not cpu:
        notes.append("worker CPU clock: unreadable")
        return []
    spent = statistics.median(cpu)
    slack = _uncertainty(cpu, clock.cpu_noise_us(), CPU_SLACK_US)
    notes.append(f"worker CPU clock: {spent:.1f} us of CPU per call on {threads} thread(s) allowed")
    if CPU_AGREEMENT * claimed * threads >= spent - slack:
        return []
    return [("timing_disagreement", (
        f"the worker process spent a median of {spent:.1f} us of CPU per call (read from the kernel by the "
        f"judge, noise {slack:.1f} us), {spent / max(claimed, 1e-3):.1f}x the {claimed:.1f} us it reported: "
        f"more than {threads} thread(s) can spend in {CPU_AGREEMENT}x that time. Its clock lies, or it ran "
        f"on more threads than the {threads} it was given"))]


def outside_disagreement(clock: Clock, calls: int) -> tuple[list[tuple[str, str]], list[str]]:
    """Work done outside every timed window, on the worker's CPU clock: before the timed calls
    (`calls` of them counted, after the warm-up) against before the nulls, and all of it against
    what the same staging and flush cost the judge. Returns (evidence, notes)."""
    if (len(clock.outside_cpu_us) != len(clock.wall_us) or len(clock.outside_fresh) != len(clock.wall_us)
            or len(clock.null_outside_cpu_us) != len(clock.null_wall_us)):
        return [], ["outside the timed windows: not recorded"]
    # Every round trip, the warm-up's too (work moved there is as much outside the clocks), but the
    # first call and the first null, which map the arenas and touch their buffers for the first time.
    recent = range(1, len(clock.wall_us)) if calls else range(0)
    nulls = sorted({clock.paired_null[i] for i in recent} - {0})
    cold = _readings(clock.outside_cpu_us, [i for i in recent if clock.outside_fresh[i]])
    warm = _readings(clock.outside_cpu_us, [i for i in recent if not clock.outside_fresh[i]])
    null = _readings(clock.null_outside_cpu_us, nulls)
    if len(cold) < OUTSIDE_MIN_READINGS or len(null) < OUTSIDE_MIN_READINGS:
        return [], [f"outside the timed windows: too few readings ({len(cold)} before calls on new inputs, "
                    f"{len(null)} before nulls; {OUTSIDE_MIN_READINGS} needed)"]
    before_cold, before_null = _trimmed_mean(cold), _trimmed_mean(null)
    # A standard deviation, from the windows every worker stages alike: not from the windows before
    # the calls that reuse their null's inputs, which are the ones tested below. Work done before some
    # of those calls and not others spreads them; counted as noise, it bought its own slack (a cheat
    # that worked before most such calls, 3.2 ms against 0.7 ms, passed beside a 4 ms allowance).
    noise = max(spread(cold), spread(null)) * MAD_TO_SD
    slack = (OUTSIDE_SLACK_US + OUTSIDE_RELATIVE * max(before_cold, before_null)
             + 3 * noise * (1 / len(cold) + 1 / len(null)) ** 0.5)
    staged = cold + null  # every window that staged new inputs: where work on them can first be done
    reference = _outside_reference(clock, nulls)
    bound = (reference.ratio * reference.us + reference.floor_us + 3 * noise / len(staged) ** 0.5
             if reference is not None else math.inf)
    before_warm = _trimmed_mean(warm) if len(warm) >= 3 else None
    notes = [f"outside the timed windows (worker CPU, trimmed means): {before_cold:.1f} us before each call on "
             f"new inputs, {before_null:.1f} us before each null, "
             + (f"{before_warm:.1f} us before each call on its null's inputs; " if before_warm is not None else "")
             + (f"the same staging and flush cost {reference.who} {reference.us:.1f} us" if reference is not None
                else "no clean side to bound them by (no control worker, and inputs too large for the judge "
                     "to repeat the staging)")]
    if clock.control_lost:
        notes.append(f"the control worker stopped answering in the loop ({clock.control_lost})")
    found: str | None = None
    if reference is not None and _trimmed_mean(staged) > bound:
        found = (f"{_trimmed_mean(staged):.1f} us per round trip on new inputs, where the same staging and flush "
                 f"cost {reference.who} {reference.us:.1f} us (allowed: {reference.ratio:g}x plus "
                 f"{reference.floor_us:g} us): it works outside the judge's clocks, before calls and nulls alike, "
                 "where the null's subtraction would cancel it")
    elif abs(before_cold - before_null) > slack:
        where = "call" if before_cold > before_null else "null round trip"
        found = (f"{before_cold:.1f} us before each call on new inputs and {before_null:.1f} us before each null "
                 f"round trip (noise {slack:.1f} us): it works outside the judge's clocks before each {where}")
    elif before_warm is not None and before_warm > max(before_cold, before_null) + slack:
        found = (f"{before_warm:.1f} us before each call on the inputs its null had just staged, more than before "
                 f"a null ({before_null:.1f} us) or a call on new inputs ({before_cold:.1f} us), beyond the noise "
                 f"({slack:.1f} us): it works outside the judge's clocks before those calls")
    if found is None:
        return [], notes
    return [("timing_disagreement", "the worker's CPU time outside the timed windows (while its inputs are "
                                    f"staged and the cache flushed, trimmed means) was {found}")], notes


def null_disagreement(clock: Clock) -> tuple[list[tuple[str, str]], list[str]]:
    """The worker's null round trips against the control worker's beside them (`judge.control`), on
    its CPU clock: the judge subtracts a null's round trip from its call's
    as harness cost, so work done inside the null's window (the inputs are already there: the call
    after it reads the same ones) would pass as harness. Returns (evidence, notes)."""
    nulls = list(range(1, min(len(clock.null_wall_us), len(clock.control_null_wall_us))))
    control_cpu = _readings(clock.control_null_cpu_us, [i for i in nulls if i < len(clock.control_null_cpu_us)])
    if len(nulls) < OUTSIDE_MIN_READINGS or len(control_cpu) < OUTSIDE_MIN_READINGS:
        return [], []
    found: list[str] = []
    notes: list[str] = []
    # CPU only: the wall clock of a null is the scheduler's too (an honest worker's nulls read 4.3 ms of
    # wall beside the control's 0.9 ms in a loaded fresh-clone CI run, preempted, not working).
    pairs = [("CPU", _readings(clock.null_cpu_us, [i for i in nulls if i < len(clock.null_cpu_us)]), control_cpu)]
    for clock_name, mine, control in pairs:
        if len(mine) < OUTSIDE_MIN_READINGS:
            continue
        ours, theirs = _trimmed_mean(mine), _trimmed_mean(control)
        # The clean side's spread: the worker's own is what is tested (work in some of its nulls and
        # not others spreads them, and would widen its own allowance).
        noise = spread(control) * MAD_TO_SD
        bound = CONTROL_RATIO * theirs + CONTROL_FLOOR_US + 3 * noise * (1 / len(mine) + 1 / len(control)) ** 0.5
        notes.append(f"null round trips ({clock_name}, trimmed means): {ours:.1f} us in the worker, {theirs:.1f} us "
                     "in the control worker")
        if ours > bound:
            found.append(f"{ours:.1f} us of {clock_name} per null round trip, where the control worker's nulls beside "
                         f"them took {theirs:.1f} us (allowed: {CONTROL_RATIO:g}x plus {CONTROL_FLOOR_US:g} us)")
    if not found:
        return [], notes
    return [("timing_disagreement", "the worker's null round trips cost more than a clean worker's: "
                                    + "; ".join(found) + ": it works inside the windows the judge subtracts as "
                                    "harness cost")], notes


@dataclass(frozen=True)
class OutsideReference:
    """What the outside windows are held to: `us` (a trimmed mean) measured by `who`, allowed
    `ratio` x that plus `floor_us`."""

    who: str
    us: float
    ratio: float
    floor_us: float


def _outside_reference(clock: Clock, nulls: list[int]) -> OutsideReference | None:
    """The control worker's outside windows beside the same nulls, where it answered for enough of
    them; else the judge's own staging (`replica_cpu_us`, not above REPLICA_MAX_BYTES of input)."""
    control = _readings(clock.control_outside_cpu_us, [i for i in nulls if i < len(clock.control_outside_cpu_us)])
    if len(control) >= OUTSIDE_MIN_READINGS:
        return OutsideReference("the control worker", _trimmed_mean(control), CONTROL_RATIO, CONTROL_FLOOR_US)
    judge = [clock.replica_cpu_us[i] for i in nulls if i < len(clock.replica_cpu_us)]
    if len(judge) >= OUTSIDE_MIN_READINGS:
        return OutsideReference("the judge's own thread", _trimmed_mean(judge), OUTSIDE_RATIO, OUTSIDE_FLOOR_US)
    return None


def _readings(values: list[float], indices: list[int]) -> list[float]:
    return [values[i] for i in indices if not math.isnan(values[i])]


def _trimmed_mean(values: list[float]) -> float:
    ordered = sorted(values)
    cut = int(len(ordered) * OUTSIDE_TRIM)
    kept = ordered[cut:len(ordered) - cut] or ordered
    return sum(kept) / len(kept)


def busy_threads(before: dict[int, float], after: dict[int, float], main: int, calls_us: float,
                 ) -> dict[int, float]:
    """Threads of the worker (by id, with their CPU time in the loop) that worked during the timed
    loop: the serving thread `main`, and every other that ran at least BUSY_THREAD_US and
    BUSY_THREAD_SHARE of `calls_us` (the timed calls' total, as the worker reported them: a worker
    that under-reports lowers the bar)."""
    ran = {tid: cpu - before.get(tid, 0.0) for tid, cpu in after.items()}
    floor = max(BUSY_THREAD_US, BUSY_THREAD_SHARE * calls_us)
    return {tid: cpu for tid, cpu in ran.items() if tid == main or cpu >= floor}


def ended_threads_us(process_us: float, before: dict[int, float], after: dict[int, float]) -> float:
    """CPU time (us) in the loop of worker threads that are no longer listed at its end: the process's
    CPU-time clock counts every thread, live or ended; the census only the live ones. A thread started
    and joined inside each call leaves its work here."""
    live = sum(cpu - before.get(tid, 0.0) for tid, cpu in after.items())
    return max(process_us - live, 0.0)


def thread_oversubscription(busy: dict[int, float], threads: int, ended_us: float = 0.0) -> str | None:
    """Evidence when more threads worked than the candidate may use. On one thread nothing else in the
    worker runs; with T > 1 two OpenMP runtimes (torch's, for the harness's flush and copies, and the
    candidate's own) may each keep T - 1 workers, so up to 2T - 1 busy threads are allowed there and
    the CPU clock bounds the rest. Threads that ended during the loop having worked at least
    BUSY_THREAD_US count as one more."""
    allowed = 1 if threads <= 1 else 2 * threads - 1
    working = len(busy) + (1 if ended_us >= BUSY_THREAD_US else 0)
    if working <= allowed:
        return None
    ran = ", ".join(f"{cpu / 1e3:.1f} ms" for cpu in sorted(busy.values(), reverse=True)[:8])
    ended = f"; threads that ended during the loop ran {ended_us / 1e3:.1f} ms" if ended_us >= BUSY_THREAD_US else ""
    return (f"{working} threads of the worker worked during the timed loop (live, CPU each: {ran}{ended}; read "
            f"by the judge from /proc and the process's CPU clock); the candidate was given {threads} thread(s), "
            "as the baselines were")


def task_precision(outputs: Any, dtypes: tuple[torch.dtype, ...] | None) -> list[torch.Tensor]:
    """Empty (meta) tensors shaped like `outputs`, in the dtypes a task-precision run returns: the
    landing arena and the null candidate are made from them. (The correctness stage's outputs are the
    fp64 reference's: an arena of those would not fit the candidate's outputs, which then travelled
    the slow way outside the worker's timed window, and only for real calls, never for the null.)"""
    from agentforge.task import flatten_tensors

    tensors = list(flatten_tensors(outputs))
    if dtypes is None or len(dtypes) != len(tensors):
        return [torch.empty(t.shape, dtype=t.dtype, device="meta") for t in tensors]
    return [torch.empty(t.shape, dtype=d, device="meta") for t, d in zip(tensors, dtypes, strict=True)]


def _compiled(model: torch.nn.Module, mode: str) -> Any:
    # Inductor's settings (one compile thread, no precompiled header) are the builder's, so the
    # judge's compile is answered by the cache the builder filled (`baseline_cache`).
    baseline_cache.configure_inductor()
    return torch.compile(copy.deepcopy(model), mode=None if mode == "default" else mode)


@dataclass
class CompiledBaselines:
    subjects: list[timing.Subject] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    missing: dict[str, str] = field(default_factory=dict)  # subject name -> why it is not timed
    seconds: float = 0.0
    source: str = ""  # judge-cache | cold


def compile_baselines(task: Task, shape: str, reference: torch.nn.Module, buffers: list[Any],
                      modes: tuple[str, ...], device: torch.device, cpu_threads: int | None,
                      wait_s: float) -> CompiledBaselines:
    """torch.compile of the reference in each mode, from the judge's cache when the parent's builder
    filled it (waiting up to `wait_s` for one at work), else cold; each mode that fails is named."""
    started = time.perf_counter()
    out = CompiledBaselines()
    threads = (cpu_threads or torch.get_num_threads()) if device.type == "cpu" else 0
    spec = baseline_cache.BaselineSpec(task.name, task.source, shape, tuple(modes), device.type, threads)
    with baseline_cache.judge_cache_dir(build_cache.cache_root(), spec, wait_s) as cache:
        out.source = cache.source
        out.notes.append(cache.note)
        for mode in modes:
            try:
                fn = _compiled(reference, mode)
                fn(*buffers)  # compile outside the timed loop
                out.subjects.append(timing.Subject(f"compile-{mode}", fn))
            except Exception as exc:
                why = f"torch.compile mode={mode} failed: {type(exc).__name__}: {str(exc)[:200]}"
                out.notes.append(why)
                out.missing[f"compile-{mode}"] = why
    out.seconds = time.perf_counter() - started
    out.notes.append(f"torch.compile baselines ready in {out.seconds:.1f} s ({out.source})")
    return out


def mix_pool(buffers: list[Any], pool: list[list[Any]], secret: random.SystemRandom, device: torch.device) -> None:
    """Inputs too large to draw anew each repetition, never a simple function of earlier ones: each
    floating-point element taken from one of two secretly chosen pool entries by a fresh secret
    mask, then scaled by a secret factor. A scale alone left every output of a linear operation an
    exact multiple of a pooled one, so a cache keyed on sampled contents replayed it (147x accepted);
    a per-element mixture makes a replay cost a pass over every element, as the work does. Other
    tensors (indices, masks) keep one entry's contents, whose structure a mixture could break."""
    first, second = secret.sample(range(len(pool)), 2)
    scale = secret.uniform(0.5, 1.5)
    generator = torch.Generator(device=device)
    generator.manual_seed(secret.randrange(2**62))
    for index, buffer in enumerate(buffers):
        if not isinstance(buffer, torch.Tensor):
            continue
        a, b = pool[first][index], pool[second][index]
        if not buffer.is_floating_point() or buffer.numel() == 0:
            buffer.copy_(a)
            continue
        take = torch.randint(0, 2, buffer.shape, dtype=torch.uint8, generator=generator, device=device).bool()
        torch.where(take, a, b, out=buffer)
        buffer.mul_(scale)


CROSSCHECK_SAMPLE = 4096  # elements of each output the per-repetition cross-check compares


def secret_sample(output: Any, eager: Any, secret: random.SystemRandom) -> tuple[Any, Any]:
    """The same CROSSCHECK_SAMPLE elements of each output tensor of both sides, at positions drawn
    from `secret` now (after the call); the outputs as they are where their structure differs."""
    from agentforge.task import flatten_tensors

    mine, theirs = list(flatten_tensors(output)), list(flatten_tensors(eager))
    if len(mine) != len(theirs) or any(not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor)
                                       or a.shape != b.shape for a, b in zip(mine, theirs, strict=True)):
        return output, eager  # compare says what is wrong
    generator = torch.Generator()
    generator.manual_seed(secret.randrange(2**62))
    picked_mine, picked_theirs = [], []
    for a, b in zip(mine, theirs, strict=True):
        if a.numel() <= CROSSCHECK_SAMPLE:
            picked_mine.append(a.reshape(-1))
            picked_theirs.append(b.reshape(-1))
            continue
        index = torch.randint(0, a.numel(), (CROSSCHECK_SAMPLE,), generator=generator).to(a.device)
        picked_mine.append(a.reshape(-1)[index])
        picked_theirs.append(b.reshape(-1)[index])
    return picked_mine, picked_theirs


def cand_samples(run: timing.TimingRun) -> list[float]:
    return run.subjects["candidate"].samples_us


@dataclass(frozen=True)
class TimingRequest:
    """What the timing stage times, and how. `cpu_threads`: the threads the candidate may use on the
    CPU; by default the judge's own, which its baselines run with. `candidate_source` names the
    kernels the source defines, for the device attribution on CUDA."""

    task: Task
    shape: str
    candidate: RemoteModel
    reference: torch.nn.Module
    reference_dtype: torch.dtype
    device: torch.device
    config: TimingConfig
    baselines: tuple[str, ...]
    compile_modes: tuple[str, ...]
    tolerance: tuple[float, float]
    seed: int
    outputs_like: Any = None
    cpu_threads: int | None = None
    candidate_source: str = ""
    compile_wait_s: float = 0.0
    control: RemoteModel | None = None  # the control worker's null (`judge.control`), where there is one

    @property
    def threads(self) -> int | None:
        """The CPU threads the candidate may use (None on a GPU)."""
        return (self.cpu_threads or torch.get_num_threads()) if self.device.type == "cpu" else None

    @property
    def outside_checked(self) -> bool:
        """Whether the worker's CPU outside the timed windows is held (one thread on the CPU backend:
        on more, or on a GPU, the runtimes' helper threads make those windows noisy)."""
        return self.threads == 1


@dataclass
class TimedRun:
    """What one interleaved timing loop left, for the checks that read it (`TIMING_CHECKS`)."""

    request: TimingRequest
    run: Any  # timing.run_interleaved's result
    buffers: list[Any]
    refill: Any
    threads_before: dict[int, float]
    threads_after: dict[int, float]
    process_cpu_us: float | None  # the worker process's CPU over the loop, every thread
    notes: list[str] = field(default_factory=list)
    evidence: list[tuple[str, str]] = field(default_factory=list)
    shares: Any = None  # the device attribution on CUDA

    @property
    def cand(self) -> Any:
        return self.run.subjects["candidate"]


TimingCheck = Callable[[TimedRun], None]  # adds its evidence and notes to the TimedRun
TIMING_CHECKS: dict[str, TimingCheck] = {}


def timing_check(name: str) -> Callable[[TimingCheck], TimingCheck]:
    """Register a check over the timed loop, run in registration order (a check may replace the
    candidate's samples, e.g. by the judge's clock, for the checks and the summary after it)."""

    def register(fn: TimingCheck) -> TimingCheck:
        if name in TIMING_CHECKS:
            raise ValueError(f"timing check {name!r} is registered twice")
        TIMING_CHECKS[name] = fn
        return fn

    return register


@timing_check("timed_outputs")
def _timed_outputs(t: TimedRun) -> None:
    """The re-checked repetitions, and what the worker's watches saw on timed calls (each rule once,
    with its count)."""
    t.evidence += [("timed_output_mismatch", f) for f in t.run.recheck_failures[:3]]
    timed = t.request.candidate.timed_evidence
    for rule in dict.fromkeys(r for r, _ in timed):
        hits = [e for r, e in timed if r == rule]
        t.evidence.append((rule, f"{hits[0]} ({len(hits)} of {len(cand_samples(t.run))} timed calls)"))


@timing_check("clocks")
def _clocks(t: TimedRun) -> None:
    """The worker's samples against the judge's wall and CPU clocks; the judge's clock stands in
    where they disagree."""
    clock = clock_disagreement(t.cand.samples_us, t.request.candidate.clock, t.request.threads)
    t.notes += clock.notes
    t.evidence += clock.evidence
    if clock.substitute_us is not None:
        t.cand.samples_us = clock.substitute_us


@timing_check("outside_windows")
def _outside_windows(t: TimedRun) -> None:
    if t.request.outside_checked:
        outside, notes = outside_disagreement(t.request.candidate.clock, len(t.cand.samples_us))
        t.notes += notes
        t.evidence += outside


@timing_check("null_windows")
def _null_windows(t: TimedRun) -> None:
    """The worker's nulls against the control worker's, where there is one."""
    evidence, notes = null_disagreement(t.request.candidate.clock)
    t.notes += notes
    t.evidence += evidence


@timing_check("threads")
def _threads(t: TimedRun) -> None:
    """How many of the worker's threads worked in the loop, against the threads allowed."""
    threads = t.request.threads
    if threads is None or not t.threads_after:
        return
    pid = t.request.candidate.client.pid
    busy = busy_threads(t.threads_before, t.threads_after, pid, sum(t.cand.samples_us))
    ended = (ended_threads_us(t.process_cpu_us, t.threads_before, t.threads_after)
             if t.process_cpu_us is not None else 0.0)
    t.notes.append(f"worker threads that worked in the timed loop: {len(busy)} of {len(t.threads_after)} "
                   "(CPU ms: " + ", ".join(f"{cpu / 1e3:.1f}" for cpu in busy.values())
                   + f"; ended threads {ended / 1e3:.2f})")
    oversubscribed = thread_oversubscription(busy, threads, ended)
    if oversubscribed:
        t.evidence.append(("thread_oversubscription", oversubscribed))


@timing_check("device")
def _device(t: TimedRun) -> None:
    """On CUDA: work left running after the call returned, and whose kernels the device ran."""
    request = t.request
    if request.device.type != "cuda":
        return
    gap = timing.unsynchronized_evidence(t.cand, [s for s in t.run.subjects.values() if s is not t.cand])
    if gap:
        t.evidence.append(("unsynchronized_work", gap))
        t.cand.samples_us = t.cand.closed_us  # time it by what the device really did
    t.refill(-1)
    t.shares = device_attribution.judge(request.candidate, t.buffers, request.task, request.candidate_source,
                                        build_cache.cache_root())
    t.notes.append(device_attribution.describe(t.shares))
    below = device_attribution.evidence(t.shares)
    if below:
        t.evidence.append(("torch_fallback", below))


def measure(request: TimingRequest) -> TimingOutcome:
    """Time the candidate (in its worker) and the baselines (here) interleaved on the same fresh
    inputs, then run every registered check over the loop (`TIMING_CHECKS`): the worker's samples
    held against the judge's clocks, its CPU outside the timed windows and its threads, and on CUDA
    whose kernels the device ran."""
    task, shape, device, config = request.task, request.shape, request.device, request.config
    candidate, reference = request.candidate, request.reference
    notes: list[str] = []
    pool = [task.make_inputs(request.seed + 7919, shape, device)]
    buffers = [v.clone() if isinstance(v, torch.Tensor) else v for v in pool[0]]
    reference_hi = copy.deepcopy(reference).to(request.reference_dtype)
    dtypes = reference_output_dtypes(reference, pool[0])
    atol, rtol = request.tolerance

    fresh_each_rep = _input_bytes(pool[0]) <= FRESH_INPUT_BYTES
    if not fresh_each_rep:  # the entries mix_pool draws from
        pool += [task.make_inputs(request.seed + 7919 * (k + 1), shape, device) for k in range(1, POOL_SIZE)]
    secret = random.SystemRandom()  # not derivable from anything the candidate can see

    def refill(rep: int) -> None:
        """New contents every repetition, never a cycle: drawn anew from a secret seed (the task's own
        input distribution); above FRESH_INPUT_BYTES, a secret mixture of two pool entries
        (`mix_pool`)."""
        if fresh_each_rep:
            values = task.make_inputs(secret.randrange(2**62), shape, device)
            for buffer, value in zip(buffers, values, strict=True):
                if isinstance(buffer, torch.Tensor):
                    buffer.copy_(value)
            return
        mix_pool(buffers, pool, secret, device)

    def recheck(rep: int, output: Any) -> str | None:
        expected = reference_hi(*upcast(buffers, request.reference_dtype))
        result = compare(output, expected, task.dtype, atol=atol, rtol=rtol, dtypes=dtypes)
        return None if result.passed else f"repetition {rep}: {result.message or result.failed_check}"

    def crosscheck(rep: int, output: Any, eager: Any) -> str | None:
        # Against eager's output on the same buffers, at twice the tolerance (both sides carry their own
        # rounding): catches a skipped or stale call on every repetition, not just the re-checked ones.
        # On CROSSCHECK_SAMPLE elements drawn in secret after the call (a stale or skipped output is
        # wrong almost everywhere); the re-checked repetitions compare every element.
        output, eager = secret_sample(output, eager, secret)
        result = compare(output, eager, task.dtype, atol=2 * atol, rtol=2 * rtol, dtypes=dtypes)
        return None if result.passed else f"repetition {rep}, against eager: {result.message or result.failed_check}"

    candidate.flush, candidate.head_start = config.flush_l2, config.head_start
    candidate.replica = request.outside_checked and _input_bytes(buffers) <= REPLICA_MAX_BYTES
    candidate.control = request.control if request.outside_checked else None
    outputs_like = request.outputs_like if request.outputs_like is not None else reference(*buffers)
    candidate.calibrate(task_precision(outputs_like, dtypes))
    subjects = [timing.Subject("candidate", candidate.timer, timer=candidate.timer)]
    if "eager" in request.baselines:
        subjects.append(timing.Subject("eager", reference))
    before_compile = ConcurrencyWatch.start()
    compiled = CompiledBaselines()
    if "compile" in request.baselines and request.compile_modes:
        compiled = compile_baselines(task, shape, reference, buffers, request.compile_modes, device,
                                     request.cpu_threads, request.compile_wait_s)
        subjects += compiled.subjects
        notes += compiled.notes
    after_compile = ConcurrencyWatch.start()
    subjects.append(timing.floor_subject(task_precision(outputs_like, dtypes), device))
    process_before = cpu_ns(candidate.cpu_clock)
    threads_before = thread_cpu_us(candidate.client.pid)
    # No operator observer over the baselines' timed calls: its host cost per aten operator (about 1-8 us
    # on the 2-core machine) fell inside every window, eager's many operators paying it many times and a
    # fused candidate once, which inflated the speedup. (The candidate's worker keeps its observer,
    # an integrity check: what it costs there falls on the candidate alone; on CUDA the head start
    # hides it, which gpu-check measures.)
    run = timing.run_interleaved(subjects, buffers, refill, device, config, recheck, seed=request.seed,
                                 crosscheck=crosscheck if config.recheck_fraction > 0 else None)
    threads_after = thread_cpu_us(candidate.client.pid)
    process_after = cpu_ns(candidate.cpu_clock)
    process_cpu_us = ((process_after - process_before) / 1e3
                      if process_before is not None and process_after is not None else None)
    timed = TimedRun(request, run, buffers, refill, threads_before, threads_after, process_cpu_us, notes)
    for check in TIMING_CHECKS.values():
        check(timed)
    summaries = {name: timing.summarise(s, config.statistic) for name, s in run.subjects.items()
                 if name != timing.FLOOR}
    floor = timing.summarise(run.subjects[timing.FLOOR], "median")
    bound = timing.overhead_bound({k: v.median_us for k, v in summaries.items()}, floor.median_us)
    if bound:
        notes.append(f"overhead-bound (within {timing.OVERHEAD_BOUND_FACTOR:g}x of the harness floor, "
                     f"{floor.median_us:.1f} us): {', '.join(bound)}; no speedup is claimed from such a pair")
    record = TimingRecord(
        shape=shape, method=run.method, candidate=summaries.pop("candidate"), baselines=summaries,
        l2_flushed=run.l2_flushed, interleaved=True, rechecked_outputs=run.rechecks, notes=tuple(notes),
        floor=floor, overhead_bound=bound, device_attribution=timed.shares, missing_baselines=compiled.missing,
    )
    return TimingOutcome(record, timed.evidence, after_compile.threads - before_compile.threads,
                         after_compile.children - before_compile.children, compile_seconds=compiled.seconds)
