"""EvalJob in, EvalResult out: the one contract every consumer of a measurement reads.

Frozen standard-library dataclasses that round-trip through JSON (`to_json` / `from_json`):
the evaluator runs on bare GPU images, so no pydantic. Units live in field names (`median_us`),
raw samples are kept, rounding happens only when rendering.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import types
import typing
from dataclasses import dataclass, field
from typing import Any, TypeVar

EVALUATOR_VERSION = "0.1.0"

T = TypeVar("T")


class Status(enum.StrEnum):
    """The one verdict. Ordered roughly by how far the candidate got."""

    OK = "ok"
    COMPILE_ERROR = "compile_error"
    RUNTIME_ERROR = "runtime_error"
    MISMATCH = "mismatch"
    INTEGRITY_FLAG = "integrity_flag"
    TIMEOUT = "timeout"
    CRASH = "crash"
    # The task, not the candidate, failed: it did not import, or its inputs or reference raised,
    # hung or ran out of memory on a requested shape. Nobody should "repair" the candidate for it.
    TASK_ERROR = "task_error"
    # A CUDA candidate that compiled no CUDA code (compile-only verdicts: nothing can run to say more).
    NO_CUDA_BUILD = "no_cuda_build"


class Stage(enum.StrEnum):
    """How far the evaluation got; the stage a failure is reported at."""

    SANDBOX = "sandbox"
    TASK = "task"  # importing the task and running its reference, before any candidate code
    BUILD = "build"
    LOAD = "load"
    CORRECTNESS = "correctness"
    INTEGRITY = "integrity"
    TIMING = "timing"
    PROFILE = "profile"
    DONE = "done"


TRACKS = ("hardened", "kernelbench")


# ----- the job ------------------------------------------------------------------------------
@dataclass(frozen=True)
class TimingConfig:
    warmup: int = 3
    min_reps: int = 10
    max_reps: int = 200
    target_rel_stderr: float = 0.005  # stop once stderr / mean is under this
    # per timed subject and shape; the loop stops earlier once the speedup's interval settles
    # (target_ratio_width), and the verdict says when its interval is too wide to rank. 2.5 s (it was
    # 5 s): the timing stage of a candidate and two baselines is then 7.5 s of a verdict, not 15 s.
    # On the 2-core VM a 4 ms CPU kernel gets about 70 repetitions in it, and a speedup interval
    # about 10 % wide (the per-call noise of that machine is about 10 %).
    time_cap_s: float = 2.5
    # Or stop once the speedup itself is known: the 95 % interval of the candidate's paired ratio to
    # every baseline (speedup_interval) spans at most this (hi / lo - 1). Noise that hits a whole
    # repetition cancels in the ratio, so on a busy machine it settles long before each subject's own
    # standard error does. 0 turns the rule off.
    target_ratio_width: float = 0.04
    flush_l2: bool = True
    statistic: str = "median"  # the figure speedups are computed from: median | mean
    fresh_inputs: bool = True  # new input contents for every timed call
    recheck_fraction: float = 0.1  # share of timed outputs re-checked against the reference
    # CUDA: a device-side wait queued before every start event, on both sides (the judge's
    # baselines and the candidate's worker), so the host's launch overhead stays outside the timed
    # window as in Triton's do_bench (timing.head_start). On: without it each sample of a flushed,
    # idle GPU carries the host's 5-8 us before the first launch (and any host cost of the worker's
    # operator observer); `make gpu-check` times both ways against ncu. No effect on the CPU.
    head_start: bool = True


@dataclass(frozen=True)
class CorrectnessConfig:
    trials: int = 5
    # None (the default): drawn per evaluation from the OS's random source by the judge and
    # recorded in the verdict's provenance afterwards; set it only to replay a recorded verdict.
    base_seed: int | None = None
    reference_dtype: str | None = None  # None: float64 for fp32 tasks, float32 for half tasks
    atol: float | None = None  # None: the task's tolerance
    rtol: float | None = None


@dataclass(frozen=True)
class StageBudget:
    """How the job's wall-clock budget is shared by its stages (enforced by `stage_budget.py`).

    Each share is a fraction of the usable total (the total less a reserve for writing the
    verdict). A stage may run until the shares of every stage up to and including its own are
    spent, counted from the job's start, so what a stage leaves unused passes on to the next.
    `total_s` 0 (a job run outside a sandbox): no stage is bounded. The sandbox sets it to its own
    wall-clock limit (`SandboxConfig.timeout_s`) or less, with the moment its clock started."""

    total_s: float = 0.0
    # Early stages may use most of the clock: stopping a build or a correctness check early earns
    # nothing (no verdict), while each later stage keeps a slice of its own.
    build: float = 0.80  # the task, the build (a cold nvcc build takes minutes here) and the load
    correctness: float = 0.10  # every shape against the fp64 reference, and the integrity checks
    timing: float = 0.05  # the candidate and its baselines (eager, torch.compile modes), the roofline
    profile: float = 0.05  # Nsight Compute; running out keeps the verdict, with no profile
    started_monotonic: float | None = None  # the sandbox parent's CLOCK_MONOTONIC when its clock started

    def __post_init__(self) -> None:
        shares = {name: getattr(self, name) for name in ("build", "correctness", "timing", "profile")}
        bad = {k: v for k, v in shares.items() if not (isinstance(v, int | float) and 0.0 <= v <= 1.0)}
        if bad:
            raise ValueError(f"stage budget shares must be fractions in [0, 1]; got {bad}")
        if sum(shares.values()) > 1.0 + 1e-9:
            raise ValueError(f"stage budget shares add up to {sum(shares.values()):g}, over 1: {shares}")
        if not (isinstance(self.total_s, int | float) and 0.0 <= self.total_s < float("inf")):
            raise ValueError(f"stage budget total_s must be >= 0 and finite (got {self.total_s!r})")


@dataclass(frozen=True)
class Measure:
    """What a job asks the evaluator to do beyond build and correctness."""

    timing: bool = True
    baselines: tuple[str, ...] = ("eager", "compile")  # compile = best of default, max-autotune
    compile_modes: tuple[str, ...] = ("default", "max-autotune")
    profile: bool = False
    integrity: bool = True


@dataclass(frozen=True)
class EvalJob:
    task_name: str
    task_source: str
    candidate_source: str
    backend: str = "cpu"
    device: str = "cpu"  # "cpu" or "cuda[:N]"
    track: str = "hardened"
    shapes: tuple[str, ...] = ()  # empty: every shape variant of the task
    timing_shape: str = "default"  # the variant timed and profiled
    measure: Measure = field(default_factory=Measure)
    timing: TimingConfig = field(default_factory=TimingConfig)
    correctness: CorrectnessConfig = field(default_factory=CorrectnessConfig)
    cuda_arch: str = "sm_90a"  # for compile-only CUDA verdicts without a GPU
    compile_only: bool = False
    # CUDA jobs without a GPU: run the correctness stage on the CPU emulation (cuda_emulation)
    # beside the compile-only verdict. Off for a bare job (the verdict alone); `make_job`, which
    # every command, the leaderboard and the RL reward build their jobs with, turns it on.
    emulate: bool = False
    # CPU jobs: threads for the candidate's OpenMP and PyTorch's intra-op pool alike (0: leave
    # both at their defaults). One thread keeps CPU ratios about kernels, not the scheduler, on
    # shared machines, where a woken thread pool can cost more than the op.
    cpu_threads: int = 1
    cache_dir: str | None = None
    candidate_meta: dict[str, Any] = field(default_factory=dict)  # provenance, carried through
    budget: StageBudget = field(default_factory=StageBudget)  # each stage's share of the wall clock

    def to_json(self) -> str:
        return to_json(self)

    @classmethod
    def from_json(cls, text: str) -> EvalJob:
        return from_json(cls, text)


# ----- the stage records --------------------------------------------------------------------
@dataclass(frozen=True)
class KernelResources:
    """What ptxas (or the CPU compiler) reports for one kernel."""

    name: str
    registers: int | None = None
    shared_bytes: int | None = None
    stack_bytes: int | None = None
    spill_store_bytes: int | None = None
    spill_load_bytes: int | None = None
    constant_bytes: int | None = None


@dataclass(frozen=True)
class CompileRecord:
    ok: bool
    backend: str
    seconds: float = 0.0
    cached: bool = False
    path: str = ""  # which build path served: load_inline | lean-nvcc | nvrtc | triton | ...
    arch: str | None = None
    log_tail: str = ""
    resources: tuple[KernelResources, ...] = ()
    sass_histogram: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class CorrectnessRecord:
    shape: str
    seed: int
    passed: bool
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    failed_check: str | None = None  # shape | dtype | nan | allclose | output_count | exception
    message: str = ""


@dataclass(frozen=True)
class Flag:
    """An integrity rule that fired, and the evidence for it."""

    rule: str
    evidence: str
    severity: str = "reject"  # reject | audit (marked for a person, not rejected)


@dataclass(frozen=True)
class TimingStats:
    median_us: float
    mean_us: float
    stdev_us: float
    min_us: float
    max_us: float
    n: int
    rel_stderr: float
    samples_us: tuple[float, ...] = ()


@dataclass(frozen=True)
class TimingRecord:
    shape: str
    method: str  # cuda-events | host-monotonic
    candidate: TimingStats
    baselines: dict[str, TimingStats] = field(default_factory=dict)  # eager, compile-default, ...
    l2_flushed: bool = False
    interleaved: bool = True
    rechecked_outputs: int = 0
    notes: tuple[str, ...] = ()  # e.g. a torch.compile mode that failed to build
    # The harness's own floor: an empty candidate returning preallocated outputs, timed the same way
    # in the same loop; and the subjects ("candidate", "eager", "compile-default", ...) whose median
    # is within 20x of it, which measure the harness as much as their work.
    floor: TimingStats | None = None
    overhead_bound: tuple[str, ...] = ()
    device_attribution: DeviceAttributionRecord | None = None  # CUDA: whose kernels the device ran
    # Baselines asked for and not timed (a torch.compile mode that failed), with why: never silent.
    missing_baselines: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class DeviceAttributionRecord:
    """Where the device time of a few extra timed calls went (CUDA, `device_attribution`): the
    candidate's own kernels versus torch's and its libraries'. `coverage` is own_us / total_us (the
    profiling coverage; None when no device time was recorded); below `floor` is `torch_fallback`."""

    calls: int
    total_us: float
    own_us: float
    coverage: float | None
    floor: float
    by_origin: dict[str, float] = field(default_factory=dict)  # own, torch, cublas, cudnn, cutlass, ... -> us
    kernels: tuple[tuple[str, str, float, int], ...] = ()  # (name, origin, device us, count), largest first
    problem: str = ""  # why the profile recorded nothing (the profiler failed to start or to report)


@dataclass(frozen=True)
class RooflineRecord:
    flops: float | None
    bytes: float | None
    floor_us: float | None  # speed-of-light time from the device's ceilings
    arithmetic_intensity: float | None
    sol_fraction: float | None  # floor_us / measured time
    label: str  # memory-bound | compute-bound | latency-bound | unknown
    ceilings_source: str = ""  # measured | datasheet | unknown


@dataclass(frozen=True)
class ProfileRecord:
    available: bool
    reason: str = ""  # why not, when unavailable
    tool: str = "ncu"
    kernels: tuple[dict[str, Any], ...] = ()  # per kernel: name + curated metrics
    totals: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class ErrorRecord:
    type: str
    message: str
    traceback_tail: str = ""
    signal: int | None = None
    exit_code: int | None = None
    stderr_tail: str = ""


@dataclass(frozen=True)
class DeviceInfo:
    kind: str  # cpu | cuda
    name: str
    driver: str | None = None
    capability: str | None = None
    count: int = 1


@dataclass(frozen=True)
class EvalProvenance:
    evaluator_version: str = EVALUATOR_VERSION
    track: str = "hardened"
    track_settings: dict[str, Any] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)
    device: DeviceInfo | None = None
    host: str = ""
    started_at: str = ""
    duration_s: float = 0.0
    sandbox: str = ""  # which sandbox backend ran it, with its isolation
    # The isolation the candidate ran under: bwrap | unshare | none | docker; "" in-process (or a
    # verdict recorded before this field existed). `none` means no filesystem/network isolation.
    isolation: str = ""
    # Where the job's wall time went, in seconds: sandbox (start and hand-back, seen by the parent),
    # task, build, correctness, hidden_shapes, baselines_compile, timing, profile, verdict.
    stage_seconds: dict[str, float] = field(default_factory=dict)


# ----- the verdict --------------------------------------------------------------------------
@dataclass(frozen=True)
class EvalResult:
    task_name: str
    candidate_hash: str
    backend: str
    status: Status
    stage: Stage
    compile: CompileRecord | None = None
    correctness: tuple[CorrectnessRecord, ...] = ()
    flags: tuple[Flag, ...] = ()
    timing: TimingRecord | None = None
    roofline: RooflineRecord | None = None
    profile: ProfileRecord | None = None
    error: ErrorRecord | None = None
    provenance: EvalProvenance = field(default_factory=EvalProvenance)
    candidate_meta: dict[str, Any] = field(default_factory=dict)
    # Where the kernels ran for the correctness stage: "cuda", "cpu", "cpu-emulation" (CUDA C++
    # executed on the CPU, no timing exists), "triton-interpreter"; "" when they never ran.
    executed_on: str = ""
    execution_note: str = ""

    @property
    def compiled(self) -> bool:
        return self.compile is not None and self.compile.ok

    @property
    def correct(self) -> bool:
        return bool(self.correctness) and all(r.passed for r in self.correctness)

    @property
    def rejecting_flags(self) -> tuple[Flag, ...]:
        return tuple(f for f in self.flags if f.severity == "reject")

    @property
    def accepted(self) -> bool:
        """Compiled, correct on every input set and shape, and no rejecting integrity flag."""
        return self.status == Status.OK and self.compiled and self.correct and not self.rejecting_flags

    def _time(self, subject: str | None) -> float | None:
        if self.timing is None:
            return None
        stats = self.timing.candidate if subject is None else self.timing.baselines.get(subject)
        return None if stats is None else stats.median_us

    @property
    def candidate_us(self) -> float | None:
        return self._time(None)

    @property
    def eager_us(self) -> float | None:
        return self._time("eager")

    @property
    def compile_us(self) -> float | None:
        """The best torch.compile mode measured."""
        if self.timing is None:
            return None
        modes = [s.median_us for k, s in self.timing.baselines.items() if k.startswith("compile")]
        return min(modes) if modes else None

    @property
    def speedup(self) -> float | None:
        """Eager time / candidate time, for accepted candidates only."""
        return _ratio(self.eager_us, self.candidate_us) if self.accepted else None

    @property
    def speedup_vs_compile(self) -> float | None:
        return _ratio(self.compile_us, self.candidate_us) if self.accepted else None

    @property
    def floor_us(self) -> float | None:
        """The harness floor's median (see TimingRecord.floor), None where it was not measured."""
        return None if self.timing is None or self.timing.floor is None else self.timing.floor.median_us

    def _interval(self, subject: str | None) -> tuple[float, float] | None:
        from agentforge.evaluator.speedup_interval import ratio_interval

        if not self.accepted or self.timing is None or subject is None:
            return None
        base = self.timing.baselines.get(subject)
        if base is None:
            return None
        return ratio_interval(base.samples_us, self.timing.candidate.samples_us)

    def _best_compile(self) -> str | None:
        if self.timing is None:
            return None
        modes = {k: s.median_us for k, s in self.timing.baselines.items() if k.startswith("compile")}
        return min(modes, key=modes.__getitem__) if modes else None

    @property
    def speedup_ci(self) -> tuple[float, float] | None:
        """95 % interval of the speedup vs eager over the paired repetitions (speedup_interval)."""
        return self._interval("eager")

    @property
    def speedup_vs_compile_ci(self) -> tuple[float, float] | None:
        return self._interval(self._best_compile())

    @property
    def noise_note(self) -> str:
        """One line when the speedup cannot rank kernels: its interval is too wide, or the machine
        was loaded while timing; empty otherwise."""
        from agentforge.evaluator.speedup_interval import RANK_WIDTH, describe, too_wide

        if self.speedup is None:
            return ""
        loaded = [n for n in (self.timing.notes if self.timing else ()) if n.startswith("machine loaded")]
        if too_wide(self.speedup_ci):
            return (f"noisy: the speedup's 95 % interval {describe(self.speedup_ci)} spans more than "
                    f"{RANK_WIDTH:g}x, too wide to rank kernels" + (f" ({loaded[0]})" if loaded else ""))
        return f"noisy: {loaded[0]}" if loaded else ""

    def overhead_bound_pair(self, baseline: str = "eager") -> bool:
        """True when the candidate or `baseline` ("compile" for the best torch.compile mode) is
        within 20x of the harness floor: their ratio is no speedup to headline."""
        if self.timing is None:
            return False
        bound = set(self.timing.overhead_bound)
        if baseline == "compile":
            modes = {k: s.median_us for k, s in self.timing.baselines.items() if k.startswith("compile")}
            baseline = min(modes, key=modes.__getitem__) if modes else baseline
        return "candidate" in bound or baseline in bound

    @property
    def headline_speedup(self) -> float | None:
        """`speedup`, unless the pair is overhead-bound: what a report may headline."""
        return None if self.overhead_bound_pair("eager") else self.speedup

    @property
    def headline_speedup_vs_compile(self) -> float | None:
        return None if self.overhead_bound_pair("compile") else self.speedup_vs_compile

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready data, with the derived verdict fields beside the records."""
        data = to_plain(self)
        data.update(
            accepted=self.accepted, speedup=self.speedup, speedup_vs_compile=self.speedup_vs_compile,
            candidate_us=self.candidate_us, eager_us=self.eager_us, compile_us=self.compile_us,
            floor_us=self.floor_us, headline_speedup=self.headline_speedup,
            headline_speedup_vs_compile=self.headline_speedup_vs_compile,
            speedup_ci=self.speedup_ci, speedup_vs_compile_ci=self.speedup_vs_compile_ci,
            noise_note=self.noise_note,
        )
        return data

    def to_json(self, indent: int | None = None) -> str:
        return json.dumps(self.to_dict(), indent=indent, allow_nan=False)

    @classmethod
    def from_json(cls, text: str) -> EvalResult:
        return from_json(cls, text)

    def summary(self) -> str:
        """One line for logs and progress views."""
        head = f"{self.task_name} [{self.backend}] {self.status.value} at {self.stage.value}"
        if self.speedup is not None and self.headline_speedup is None:
            head += f", {self.speedup:.2f}x vs eager (overhead-bound: within 20x of the harness floor)"
        elif self.speedup is not None:
            head += f", {self.speedup:.2f}x vs eager"
            if self.speedup_vs_compile is not None:
                head += f", {self.speedup_vs_compile:.2f}x vs compile"
        if self.flags:
            head += ", flags: " + ", ".join(f.rule for f in self.flags)
        if self.error is not None:
            head += f" ({self.error.type}: {self.error.message[:120]})"
        return head


def _ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or denominator is None or denominator <= 0:
        return None
    return numerator / denominator


# ----- JSON codec ---------------------------------------------------------------------------
# Derived fields written by EvalResult.to_dict; ignored when reading back.
_DERIVED = {"accepted", "speedup", "speedup_vs_compile", "candidate_us", "eager_us", "compile_us", "floor_us",
            "headline_speedup", "headline_speedup_vs_compile", "speedup_ci", "speedup_vs_compile_ci",
            "noise_note"}


def to_plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, dict):
        return {str(k): to_plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_plain(v) for v in value]
    return value


def to_json(value: Any) -> str:
    return json.dumps(to_plain(value), allow_nan=False)


def from_json(cls: type[T], text: str) -> T:
    return from_plain(cls, json.loads(text))


def from_plain(cls: Any, data: Any) -> Any:
    """Rebuild a dataclass tree from `to_plain` output, strictly: unknown keys are an error."""
    if data is None:
        return None
    origin = typing.get_origin(cls)
    if origin in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(cls) if a is not type(None)]
        return from_plain(options[0], data) if len(options) == 1 else data
    if origin is tuple:
        args = typing.get_args(cls)
        return tuple(from_plain(args[0], v) for v in data) if args else tuple(data)
    if origin is dict:
        _, value_type = typing.get_args(cls)
        return {k: from_plain(value_type, v) for k, v in data.items()}
    if origin is list:
        (item_type,) = typing.get_args(cls)
        return [from_plain(item_type, v) for v in data]
    if isinstance(cls, type) and issubclass(cls, enum.Enum):
        return cls(data)
    if dataclasses.is_dataclass(cls):
        hints = typing.get_type_hints(cls)
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(data) - names - _DERIVED
        if unknown:
            raise ValueError(f"{cls.__name__} has no fields {sorted(unknown)}")
        return cls(**{k: from_plain(hints[k], v) for k, v in data.items() if k in names})
    return data
