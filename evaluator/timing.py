"""Timing like a kernel engineer: interleaved subjects, fresh inputs, flushed caches, robust stats.

Every subject (the candidate, eager PyTorch, each torch.compile mode) is called on the same
input buffers in the same repetition, in a shuffled order. Before each repetition the buffers
get new contents, so a result cached by pointer or content is wrong and the re-check catches it.
Before each timed call the caches are flushed (`CacheFlusher`: on CUDA the L2, by writing then
reading a buffer twice its size and synchronizing, so the timed call starts with a clean L2 and no
flush work in flight; on the CPU the core's private L1d and L2, by writing such a buffer, leaving
the shared last level warm).

On CUDA a call is timed with events on the current stream, and a second end event is recorded
after a device-wide synchronize: a candidate whose work ends well after its stream's end event
(a side stream, an async launch from a thread) is flagged and timed by the closed event. A short
device-side wait queued before the start event (`head_start`, switched by
`TimingConfig.head_start`, on the judge's side and in the candidate's worker alike) lets the host
enqueue the call's kernels while the GPU waits, so launch overhead stays outside the window, as in
Triton's `do_bench`. On the CPU the same loop uses the monotonic clock.
"""

from __future__ import annotations

import math
import random
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from agentforge.evaluator.result import TimingConfig, TimingStats

# Bound at import, before any candidate runs: patching `time` later cannot reach these.
_perf_counter_ns = time.perf_counter_ns
_Event = torch.cuda.Event
_synchronize = torch.cuda.synchronize
_sleep = getattr(torch.cuda, "_sleep", None)

# About 100 us at H100 clocks: longer than the host needs to enqueue a module's few launches.
HEAD_START_CYCLES = 200_000


@dataclass
class Subject:
    name: str
    fn: Callable[..., Any]
    samples_us: list[float] = field(default_factory=list)
    closed_us: list[float] = field(default_factory=list)  # start to an event after a device-wide sync
    # How one call is timed, when not here: the candidate's calls are timed in its worker
    # (`remote.RemoteModel.timer`), in the same way, and clocked by the judge besides.
    timer: Callable[[list[Any]], tuple[float, float, Any]] | None = None
    # The harness floor (`floor_subject`): timed like the others in every repetition, but left out of
    # the stopping rule, which its noise relative to its few microseconds would hold to the time cap.
    floor: bool = False


FLOOR = "floor"
# A subject whose median is within this factor of the harness floor measures the harness as much
# as its own work: no speedup headline is drawn from a pair that holds one (issue 17).
OVERHEAD_BOUND_FACTOR = 20.0


class NullModel(torch.nn.Module):
    """The harness floor's subject: an empty candidate that returns preallocated outputs, called
    through `nn.Module.__call__` as eager and a `ModelNew` are, doing no work."""

    def __init__(self, outputs: list[torch.Tensor]):
        super().__init__()
        self.outputs = outputs

    def forward(self, *inputs: Any) -> Any:
        return self.outputs[0] if len(self.outputs) == 1 else tuple(self.outputs)


def floor_subject(outputs_like: list[torch.Tensor], device: torch.device) -> Subject:
    """A Subject timing the harness itself: `NullModel` with outputs shaped like `outputs_like`
    (real or meta tensors), allocated once on `device`."""
    outputs = [torch.zeros(t.shape, dtype=t.dtype, device=device) for t in outputs_like]
    return Subject(FLOOR, NullModel(outputs), floor=True)


def overhead_bound(medians_us: dict[str, float], floor_us: float | None,
                   factor: float = OVERHEAD_BOUND_FACTOR) -> tuple[str, ...]:
    """The subjects (by name) whose median is within `factor` times the harness floor."""
    if floor_us is None or floor_us <= 0:
        return ()
    return tuple(name for name, median in medians_us.items() if median < factor * floor_us)


@dataclass
class TimingRun:
    subjects: dict[str, Subject]
    method: str
    l2_flushed: bool
    rechecks: int
    recheck_failures: list[str]


def llc_bytes(device: torch.device) -> int:
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        return int(getattr(props, "L2_cache_size", 50 * 2**20) or 50 * 2**20)
    size = 32 * 2**20
    try:
        with open("/sys/devices/system/cpu/cpu0/cache/index3/size") as fh:
            text = fh.read().strip().upper()
        size = int(text[:-1]) * (2**20 if text.endswith("M") else 2**10 if text.endswith("K") else 1)
    except (OSError, ValueError):
        pass
    return size


def private_cache_bytes() -> int:
    """L1d + L2 of one core (what a core keeps to itself), from sysfs; 2.5 MiB when unknown."""
    total = 0
    base = "/sys/devices/system/cpu/cpu0/cache"
    for index in ("index0", "index2"):
        try:
            with open(f"{base}/{index}/size") as fh:
                text = fh.read().strip().upper()
            total += int(text[:-1]) * (2**20 if text.endswith("M") else 2**10 if text.endswith("K") else 1)
        except (OSError, ValueError):
            return 5 * 2**19
    return total


def flush_bytes(device: torch.device) -> int:
    """How much a flush sweeps: twice the L2 on CUDA (its last-level cache); on the CPU twice the
    core's private caches (L1d + L2), not the shared last level (see `CacheFlusher`)."""
    return 2 * (llc_bytes(device) if device.type == "cuda" else private_cache_bytes())


class CacheFlusher:
    """Evicts the caches before each timed call, with a buffer of twice their size.

    CUDA: the L2, the GPU's last-level cache. CPU: the core's own L1d and L2; the shared last
    level stays warm, for the candidate and its baselines alike, as in CPU practice (oneDNN's
    benchdnn times warm unless asked for a cold cache). Sweeping a server CPU's last level costs
    what sweeping its size costs (480 MB, 0.12 s per call on the 2-core VM, a thousand times a small
    kernel) and models no real use: a layer's input comes hot from the layer before. Inputs are
    still fresh for every call, so nothing cached from an earlier call is right.

    CPU: the buffer is written. CUDA: the buffer is written, then read back into one word, then
    the device is synchronized. A write alone would leave the L2 full of the buffer's dirty lines,
    whose write-back to DRAM would land inside the next timed call; after the read pass every line
    is clean (the dirty ones were written back during the sweep), and nothing of the flush is
    still running when the timed call's start event is recorded."""

    def __init__(self, device: torch.device, enabled: bool):
        self.enabled = enabled
        self.cuda = device.type == "cuda"
        self.buffer = torch.empty(flush_bytes(device) // 4, dtype=torch.int32, device=device) if enabled else None
        # int32 like the buffer: a wider sum would first copy the whole buffer to the wider type
        # (ATen reduces in the output's dtype), twice the flush's traffic and a temporary as large
        self.sink = torch.zeros((), dtype=torch.int32, device=device) if enabled and self.cuda else None

    def __call__(self) -> None:
        if self.buffer is None:
            return
        self.buffer.zero_()
        if self.sink is not None:
            read_sweep(self.buffer, self.sink)
            _synchronize()


def read_sweep(buffer: torch.Tensor, sink: torch.Tensor) -> None:
    """Read every element of `buffer` (a sum into the preallocated scalar `sink`, in its dtype: the
    buffer's own, or ATen copies the buffer to the sink's type first; the flush's buffer is zeros,
    so an int32 sum cannot overflow)."""
    torch.sum(buffer, 0, dtype=sink.dtype, out=sink)


def head_start(cycles: int = HEAD_START_CYCLES) -> None:
    """Queue a device-side wait on the current stream before a start event: the GPU reaches the
    event only after the host has had time to enqueue the timed call's launches."""
    if _sleep is not None:
        _sleep(cycles)


def stats(samples_us: list[float]) -> TimingStats:
    n = len(samples_us)
    mean = statistics.fmean(samples_us)
    stdev = statistics.stdev(samples_us) if n > 1 else 0.0
    return TimingStats(
        median_us=statistics.median(samples_us), mean_us=mean, stdev_us=stdev,
        min_us=min(samples_us), max_us=max(samples_us), n=n,
        rel_stderr=(stdev / math.sqrt(n) / mean) if n > 1 and mean > 0 else float("inf") if n <= 1 else 0.0,
        samples_us=tuple(samples_us),
    )


_EVENTS: dict[int, tuple[Any, Any, Any]] = {}


def timing_events() -> tuple[Any, Any, Any]:
    """(start, end, closed) for timed calls on the current device, made once and recorded once:
    torch creates a CUDA event at its first record, which for a fresh end event would fall inside
    the timed window (a host call between the launches and the end record). Every timed call ends
    with a synchronize, so the next one may record them again."""
    index = torch.cuda.current_device()
    events = _EVENTS.get(index)
    if events is None:
        events = (_Event(enable_timing=True), _Event(enable_timing=True), _Event(enable_timing=True))
        for event in events:
            event.record()
        _synchronize()
        _EVENTS[index] = events
    return events


def _time_call_cuda(fn: Callable[..., Any], args: list[Any], head: bool = False) -> tuple[float, float, Any]:
    """(stream time, device-closed time, output). The second end event is recorded after a
    device-wide synchronize: work on any stream is inside it. `head`: queue `head_start` first."""
    start, end, closed = timing_events()
    if head:
        head_start()
    start.record()
    out = fn(*args)
    end.record()
    _synchronize()
    closed.record()
    closed.synchronize()
    return start.elapsed_time(end) * 1e3, start.elapsed_time(closed) * 1e3, out


def _time_call_cpu(fn: Callable[..., Any], args: list[Any], head: bool = False) -> tuple[float, float, Any]:
    begin = _perf_counter_ns()
    out = fn(*args)
    elapsed = (_perf_counter_ns() - begin) / 1e3
    return elapsed, elapsed, out  # threads left running are the concurrency watch's business


def run_interleaved(
    subjects: list[Subject], buffers: list[Any], refill: Callable[[int], None], device: torch.device,
    config: TimingConfig, recheck: Callable[[int, Any], str | None] | None, seed: int = 0,
    crosscheck: Callable[[int, Any, Any], str | None] | None = None,
) -> TimingRun:
    """Time all subjects, interleaved, until each one's standard error (a floor subject's aside) is
    under target or the time cap or max_reps is reached. `refill(rep)` writes fresh contents into `buffers`;
    `recheck(rep, output)` returns a complaint for a wrong candidate output, else None; it runs on the
    first repetition and on a secret random `recheck_fraction` of the others (a fixed schedule such as
    "every 10th" is public and a candidate can compute only on those calls). `crosscheck(rep,
    candidate_output, eager_output)` runs on every repetition where both subjects ran: cheap, since
    eager's output on the same buffers is already there."""
    cuda = device.type == "cuda"
    timer = _time_call_cuda if cuda else _time_call_cpu
    flush = CacheFlusher(device, config.flush_l2)
    rng = random.Random(seed)
    secret = random.SystemRandom()  # the re-check schedule: not derivable from the public seed

    for subject in subjects:  # warm-up, excluded
        for _ in range(config.warmup):
            if subject.timer is not None:
                subject.timer(buffers)
            else:
                subject.fn(*buffers)
        if cuda:
            _synchronize()

    failures: list[str] = []
    rechecks = 0
    deadline = _perf_counter_ns() + config.time_cap_s * 1e9 * max(1, sum(not s.floor for s in subjects))
    rep = 0
    while rep < config.max_reps:
        if config.fresh_inputs:
            refill(rep)
        order = subjects[:]
        rng.shuffle(order)
        kept: dict[str, Any] = {}
        for subject in order:
            flush()
            if subject.timer is not None:
                device_us, closed_us, out = subject.timer(buffers)
            else:
                device_us, closed_us, out = timer(subject.fn, buffers, config.head_start)
            subject.samples_us.append(device_us)
            subject.closed_us.append(closed_us)
            if subject.name in ("candidate", "eager") and crosscheck is not None:
                kept[subject.name] = out
            if (subject.name == "candidate" and recheck is not None and config.recheck_fraction > 0
                    and (rep == 0 or secret.random() < config.recheck_fraction)):
                rechecks += 1
                complaint = recheck(rep, out)
                if complaint:
                    failures.append(complaint)
            del out
        if crosscheck is not None and len(kept) == 2:
            complaint = crosscheck(rep, kept["candidate"], kept["eager"])
            if complaint:
                failures.append(complaint)
        del kept
        rep += 1
        if rep >= config.min_reps and (
            _perf_counter_ns() > deadline
            or all(stats(s.samples_us).rel_stderr < config.target_rel_stderr for s in subjects if not s.floor)
            or ratios_settled(subjects, config.target_ratio_width)
        ):
            break
    return TimingRun({s.name: s for s in subjects}, "cuda-events" if cuda else "host-monotonic",
                     flush.enabled, rechecks, failures)


def ratios_settled(subjects: list[Subject], width: float) -> bool:
    """Whether the candidate's paired speedup interval against every baseline spans at most
    `width` (hi / lo - 1); False without a candidate, a baseline, or the rule (width 0)."""
    from agentforge.evaluator.speedup_interval import ratio_interval

    candidate = next((s for s in subjects if s.name == "candidate"), None)
    baselines = [s for s in subjects if not s.floor and s is not candidate]
    if width <= 0 or candidate is None or not baselines:
        return False
    for baseline in baselines:
        interval = ratio_interval(baseline.samples_us, candidate.samples_us)
        if interval is None or interval[0] <= 0 or interval[1] / interval[0] - 1 > width:
            return False
    return True


def summarise(subject: Subject, statistic: str) -> TimingStats:
    """Stats with `median_us` holding the job's chosen statistic (KernelBench reports the mean)."""
    result = stats(subject.samples_us)
    if statistic == "mean":
        from dataclasses import replace

        return replace(result, median_us=result.mean_us)
    return result


def unsynchronized_evidence(candidate: Subject, baselines: list[Subject]) -> str | None:
    """Work that ends after the stream's end event shows up as a gap between the device-closed
    time and the stream time; honest subjects share the same small gap (the sync round trip)."""
    def gap(s: Subject) -> float:
        return statistics.median(c - d for c, d in zip(s.closed_us, s.samples_us, strict=True))

    if not candidate.closed_us or not baselines:
        return None
    normal = min(gap(b) for b in baselines if b.closed_us)
    observed = gap(candidate)
    if observed > 2 * normal + 20 and observed > 0.5 * statistics.median(candidate.samples_us):
        return (f"device-wide sync ends {observed:.1f} us after the stream's end event "
                f"(baselines: {normal:.1f} us): work runs outside the timed stream")
    return None
