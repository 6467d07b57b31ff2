"""The evaluator, as a list of stages: task, build, load, correctness, integrity, timing, profile.

`run_pipeline(job, worker)` is the judge: it runs inside the sandbox child and never raises, every
failure is a value in the returned EvalResult, and it stops at the first failing stage. It never
imports or runs candidate code: the candidate worker (`sandbox/worker.py`, `candidate_side.py`)
does, and everything it sends back is data (`remote.py`). The seeds are drawn here, after the
worker started, and reach the verdict's provenance only when it is written.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

import torch
from agentforge.evaluator import build_cache, device_state, integrity, triton_aot
from agentforge.evaluator.cuda_emulation import judge as cuda_emulated
from agentforge.evaluator.cuda_source import missing_cuda_source
from agentforge.evaluator.judge import (
    checks,
    compile_verdict,
    redact,
    roofline_stage,
    stage_budget,
    task_check,
)
from agentforge.evaluator.judge.control import load_control
from agentforge.evaluator.judge.remote import WorkerClient, refused_syscall_evidence
from agentforge.evaluator.judge.stage_correctness import (
    CorrectnessOutcome,
    CorrectnessSettings,
    build_remote,
    check_hidden_shapes,
    check_shape,
    precision_policy,
    reference_dtype_for,
)
from agentforge.evaluator.judge.stage_timing import TimingRequest, measure
from agentforge.evaluator.protocol.messages import (
    CandidateRaised,
    Finish,
    FinishReply,
    Load,
    LoadReply,
    WorkerBroken,
    evidence_items,
)
from agentforge.evaluator.result import (
    CompileRecord,
    CorrectnessConfig,
    ErrorRecord,
    EvalJob,
    EvalProvenance,
    EvalResult,
    Flag,
    Stage,
    Status,
    TimingConfig,
    to_plain,
)

from agentforge.candidate import code_hash
from agentforge.task import DEFAULT_SHAPE, Task, TaskLoadError

SPEEDUP_AUDIT = 10.0
_SIGNAL_TYPES = {signal.SIGSEGV: "Segfault", signal.SIGBUS: "BusError", signal.SIGABRT: "Abort",
                 signal.SIGFPE: "FloatingPointError", signal.SIGILL: "IllegalInstruction",
                 signal.SIGXCPU: "CpuLimit", signal.SIGKILL: "Killed", signal.SIGXFSZ: "FileSizeLimit"}
_perf_counter = time.perf_counter  # bound before any candidate can patch `time`
WorkerLauncher = Callable[[bool], WorkerClient]  # interpret -> a started worker (the sandbox's to give)

# KernelBench's current timing (see FIELD.md): 3 warm-ups, then 100 trials with the L2 flushed
# before each (since Dec 2025) and the first trial discarded (counted here as a fourth warm-up),
# CUDA events, the mean. Its first release flushed nothing: compare old published numbers with care.
KERNELBENCH_TIMING = TimingConfig(warmup=4, min_reps=100, max_reps=100, target_rel_stderr=0.0, flush_l2=True,
                                  statistic="mean", fresh_inputs=False, recheck_fraction=0.0,
                                  target_ratio_width=0.0)
KERNELBENCH_CORRECTNESS = CorrectnessConfig(trials=5, atol=1e-2, rtol=1e-2)


@dataclass
class Context:
    job: EvalJob
    started: float = field(default_factory=lambda: _perf_counter())
    started_at: str = field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))
    stage: Stage = Stage.LOAD
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    flags: list[Flag] = field(default_factory=list)
    compile: CompileRecord | None = None
    seeds: dict[str, int] = field(default_factory=dict)  # secret until the verdict is written
    executed_on: str = ""  # where the kernels ran: the device type, "cpu-emulation", "triton-interpreter"
    execution_note: str = ""
    correctness_notes: dict[str, Any] = field(default_factory=dict)  # tolerances used, hidden shapes run
    clock: stage_budget.StageClock | None = None  # each stage's share of the job's wall clock
    seconds: dict[str, float] = field(default_factory=dict)  # where the wall time went (stage_seconds)

    @contextlib.contextmanager
    def timed(self, name: str) -> Iterator[None]:
        started = _perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = round(self.seconds.get(name, 0.0) + _perf_counter() - started, 3)


def _enter(ctx: Context, stage: Stage, status: Status = Status.TIMEOUT, **records: Any) -> None:
    """`stage` starts, with the verdict it leaves if it runs out of its budget: `status` (timeout,
    or for the optional profile the verdict already earned) and the finished stages' records."""
    ctx.stage = stage
    if ctx.clock is not None and ctx.clock.active:
        ctx.clock.enter(stage, _finish(ctx, status, **records))


def track_settings(job: EvalJob) -> tuple[TimingConfig, CorrectnessConfig]:
    if job.track == "kernelbench":
        return KERNELBENCH_TIMING, replace(KERNELBENCH_CORRECTNESS, base_seed=job.correctness.base_seed)
    return job.timing, job.correctness


def run_pipeline(job: EvalJob, worker: WorkerClient | WorkerLauncher) -> EvalResult:
    """The verdict on `job`. Candidate code runs only in `worker`: a started, set-up worker process,
    or a launcher that starts one for this job (`sandbox.worker.launch_worker`; it is told whether
    Triton runs interpreted). This process holds the seeds, the reference and the verdict, and never
    imports the candidate."""
    ctx = Context(job)
    ctx.clock = clock = stage_budget.StageClock(job.budget)
    build_cache.set_cache_root(job.cache_dir)
    try:
        with _cpu_threads(job):
            result = _run(ctx, worker)
    except Exception as exc:
        status = Status.RUNTIME_ERROR
        result = _finish(ctx, status, error=ErrorRecord(
            type=type(exc).__name__, message=str(exc)[:2000], traceback_tail=traceback.format_exc()[-4000:]))
    return clock.close(result)  # a stage that ran out: the verdict kept for it, whatever came after


@contextlib.contextmanager
def _cpu_threads(job: EvalJob) -> Iterator[None]:
    """Pin PyTorch's intra-op pool and OpenMP (read when the candidate's library loads) to the
    same thread count for CPU jobs; restored afterwards."""
    if job.cpu_threads <= 0 or device_state.resolve_device(job.device).type != "cpu":
        yield
        return
    saved_threads, saved_env = torch.get_num_threads(), os.environ.get("OMP_NUM_THREADS")
    torch.set_num_threads(job.cpu_threads)
    os.environ["OMP_NUM_THREADS"] = str(job.cpu_threads)
    try:
        yield
    finally:
        torch.set_num_threads(saved_threads)
        if saved_env is None:
            os.environ.pop("OMP_NUM_THREADS", None)
        else:
            os.environ["OMP_NUM_THREADS"] = saved_env


class Mode(StrEnum):
    """How this job's candidate runs, decided once, from the job and the machine (`execution_mode`)."""

    NATIVE = "native"  # built and run where it is: correctness, integrity, timing, profile
    INTERPRETED = "interpreted"  # Triton without a GPU: Triton's interpreter, then an ahead-of-time compile
    EMULATED = "emulated"  # CUDA without a GPU: the CPU emulation, each build judged by nvcc on the way
    COMPILE_ONLY = "compile_only"  # the build verdict alone (a bare job, or nothing here can run it)


@dataclass
class Run:
    """One job's state as it passes from stage to stage."""

    ctx: Context
    task: Task
    client: WorkerClient
    mode: Mode
    shapes: list[str]
    static: list[integrity.StaticFinding]
    settings: CorrectnessSettings
    timing_cfg: TimingConfig
    too_large: str = ""  # the shapes the CPU emulation could not run, said beside a compile-only verdict
    loaded: dict[str, Any] = field(default_factory=dict)  # the worker's build report
    load_error: ErrorRecord | None = None
    outcome: CorrectnessOutcome = field(default_factory=CorrectnessOutcome)
    raised: ErrorRecord | None = None  # the candidate raised during the emulated correctness stage
    final: dict[str, Any] = field(default_factory=dict)  # what the worker's watches saw (`_final`)
    timing: Any = None  # the timing stage's record
    roofline: Any = None

    @property
    def job(self) -> EvalJob:
        return self.ctx.job


StageFn = Callable[[Run], EvalResult | None]  # a verdict ends the job; None: the next stage goes on


def execution_mode(ctx: Context, task: Task, shapes: list[str]) -> tuple[Mode, list[str]]:
    """The mode, and the shapes it runs (the CPU emulation runs only those small enough)."""
    job = ctx.job
    if interpreted(job, ctx.device):
        return Mode.INTERPRETED, shapes
    emulate, shapes = _emulation(ctx, task, shapes)
    if emulate:
        return Mode.EMULATED, shapes
    if job.compile_only or (job.backend in ("cuda", "triton") and ctx.device.type != "cuda"):
        return Mode.COMPILE_ONLY, shapes
    return Mode.NATIVE, shapes


def _run(ctx: Context, worker: WorkerClient | WorkerLauncher) -> EvalResult:
    job = ctx.job
    _enter(ctx, Stage.TASK)
    task_started = _perf_counter()
    try:
        task = Task(job.task_name, job.task_source)
    except TaskLoadError as exc:
        return _finish(ctx, Status.TASK_ERROR, error=ErrorRecord(type="TaskLoadError", message=str(exc)))
    ctx.device = device_state.resolve_device(job.device)
    missing = device_state.unavailable_reason(ctx.device)
    if missing is not None:  # the machine's lack, neither the task's fault nor the candidate's
        ctx.stage = Stage.SANDBOX
        return _finish(ctx, Status.CRASH, error=ErrorRecord(type="SandboxError", message=missing))
    try:
        shapes = _shapes(task, job)
    except KeyError as exc:
        return _finish(ctx, Status.TASK_ERROR, error=ErrorRecord(type="UnknownShape", message=str(exc.args[0])))
    no_cuda = missing_cuda_source(job.candidate_source) if (
        job.backend == "cuda" and ctx.device.type != "cuda") else None
    if no_cuda is not None:  # told before anything is built: the build would end in no_cuda_build
        ctx.stage = Stage.BUILD
        return _finish(ctx, Status.NO_CUDA_BUILD, error=ErrorRecord(type="NoCudaBuild", message=no_cuda))
    mode, shapes = execution_mode(ctx, task, shapes)
    timing_cfg, correctness_cfg = track_settings(job)
    settings = _correctness_settings(task, job, correctness_cfg)
    ctx.seeds = {"base_seed": settings.base_seed}
    if mode != Mode.COMPILE_ONLY:
        problem = task_check.check(task, shapes, settings.base_seed, ctx.device)
        if problem is not None:
            return _finish(ctx, Status.TASK_ERROR, error=problem)
    static = integrity.static_findings(job.candidate_source)
    ctx.seconds["task"] = round(_perf_counter() - task_started, 3)

    # ----- the worker, then the mode's stages in order, until one gives the verdict
    _enter(ctx, Stage.BUILD)
    owned = not isinstance(worker, WorkerClient)
    client = worker(mode == Mode.INTERPRETED) if owned else worker
    if ctx.clock is not None:
        ctx.clock.watch_worker(client.pid)
    try:
        if owned:
            client.setup(workdir=os.getcwd(), cache_dir=str(build_cache.cache_root()), cpu_threads=job.cpu_threads,
                         device=str(ctx.device), torch_switches=True)
        run = Run(ctx, task, client, mode, shapes, static, settings, timing_cfg)
        for stage in STAGES[mode]:
            verdict = stage(run)
            if verdict is not None:
                return verdict
        raise AssertionError(f"no stage of {mode} gave a verdict")
    except WorkerBroken as exc:
        if exc.signal == signal.SIGSYS:  # its seccomp filter killed it (the sandbox's guard or seal)
            ctx.flags.append(integrity.flag("refused_syscall", refused_syscall_evidence(client, str(exc))))
            return _finish(ctx, Status.INTEGRITY_FLAG, error=ErrorRecord(
                type="RefusedSyscall", message=f"candidate worker {exc}", signal=exc.signal))
        if exc.signal is not None:  # the candidate's code crashed its process: a crash, with the signal
            return _finish(ctx, Status.CRASH, error=ErrorRecord(
                type=_SIGNAL_TYPES.get(exc.signal, "Signal"), message=f"candidate worker {exc}", signal=exc.signal))
        return _finish(ctx, Status.RUNTIME_ERROR, error=ErrorRecord(type="WorkerBroken", message=str(exc)))
    finally:
        client.close()


def _emulation(ctx: Context, task: Task, shapes: list[str]) -> tuple[bool, list[str]]:
    """Whether this CUDA job runs in the CPU emulation, and its shapes there (those small enough;
    the others named in the execution note)."""
    if not cuda_emulated.applies(ctx.job) or ctx.device.type == "cuda":
        return False, shapes
    runnable, too_large = cuda_emulated.runnable_shapes(task, shapes)
    if not runnable:
        ctx.execution_note = f"not executed: every shape is too large for the CPU emulation ({too_large})"
        return False, shapes
    if too_large:
        ctx.execution_note = f"shapes not executed (too large for the CPU emulation): {too_large}"
    return True, runnable


def _load(run: Run, drive_only: bool = False) -> dict[str, Any]:
    job, mode = run.job, run.mode
    return run.client.send(Load(
        source=job.candidate_source, backend=job.backend, compile_only=mode == Mode.COMPILE_ONLY,
        arch=job.cuda_arch, device=str(run.ctx.device), interpret=mode == Mode.INTERPRETED,
        emulate=mode == Mode.EMULATED, drive_only=drive_only,
        module_name=f"agentforge_candidate_{code_hash(job.candidate_source)}"))


def _build_findings(reply: dict[str, Any], client: WorkerClient) -> list[integrity.StaticFinding]:
    """What was actually built (flags and sources as the compiler got them, assembled at run time or
    not), from the worker's build report and, where the judge built them (`judge_builds`), from the
    judge's own record of what it was asked to build: static evidence like the source's own."""
    found = _findings(evidence_items(reply.get("build_findings", [])))
    builds = getattr(client, "builds", None)
    if builds is not None:
        found += integrity.build_findings(builds.served)
    return found


def _findings(pairs: list[tuple[str, str]]) -> list[integrity.StaticFinding]:
    return [integrity.StaticFinding(rule, evidence) for rule, evidence in pairs]


# ----- the stages ------------------------------------------------------------------------------

def _build(run: Run) -> EvalResult | None:
    """Build and load in the worker: a failed build is the verdict."""
    ctx = run.ctx
    run.too_large, ctx.execution_note = ctx.execution_note, ""  # said only beside a verdict that stands
    with ctx.timed("build"):
        run.loaded = _load(run)
    ctx.compile, run.load_error = _load_reply(run.loaded, run.job.backend)
    if run.loaded.get("compile_failed") is True:
        return _finish(ctx, Status.COMPILE_ERROR, error=run.load_error)
    run.static += _build_findings(run.loaded, run.client)
    return None


def _compile_only_verdict(run: Run) -> EvalResult:
    """The build verdict is all there is; `accepted` stays false without correctness. A CUDA module
    that loaded has ModelNew constructed and driven under a CUDA lookalike, so every build is reached."""
    ctx, job, error, status = run.ctx, run.job, run.load_error, Status.OK
    if job.backend == "cuda" and error is None and run.loaded.get("has_model") is True:
        verdict = compile_verdict.judge(run.client, run.task, run.shapes[0], job.backend, job.cuda_arch)
        ctx.compile, status, error = verdict.compile, verdict.status, verdict.error
        run.static += _findings(verdict.build_findings)
    _collect_flags(ctx, run.static, CorrectnessOutcome(), run.task, _final(run.client))
    if status != Status.OK:
        return _finish(ctx, status, error=error)
    if error is not None:
        ctx.stage = Stage.LOAD
        return _finish(ctx, Status.RUNTIME_ERROR, error=error)
    ctx.execution_note = run.too_large
    return _finish(ctx, Status.OK)


def _loaded(run: Run) -> EvalResult | None:
    """The module loaded and defines ModelNew."""
    run.ctx.stage = Stage.LOAD
    if run.load_error is not None or run.loaded.get("has_model") is not True:
        return _finish(run.ctx, Status.RUNTIME_ERROR, error=run.load_error or ErrorRecord(
            type="MissingModelNew", message="the candidate defines no class `ModelNew`"))
    return None


def _check_shapes(run: Run) -> None:
    """The correctness stage proper: every declared shape, then the hidden ones (raises
    CandidateRaised where the candidate raised)."""
    ctx = run.ctx
    ctx.correctness_notes = run.outcome.notes
    _enter(ctx, Stage.CORRECTNESS)
    with torch.no_grad():
        with ctx.timed("correctness"):
            for index, shape in enumerate(run.shapes):
                check_shape(run.task, run.client, shape, index, ctx.device, run.settings, run.outcome)
        with ctx.timed("hidden_shapes"):
            check_hidden_shapes(run.task, run.client, run.shapes, ctx.device, run.settings, run.outcome)


def _correctness(run: Run) -> EvalResult | None:
    """Correctness on fresh inputs, gathering run-time evidence for the integrity rules."""
    try:
        _check_shapes(run)
    except CandidateRaised as exc:
        _collect_flags(run.ctx, run.static, run.outcome, run.task, _final(run.client))
        return _finish(run.ctx, Status.RUNTIME_ERROR, correctness=run.outcome.records, error=exc.record)
    run.final = _final(run.client)
    _collect_flags(run.ctx, run.static, run.outcome, run.task, run.final)
    return _checked(run.ctx, run.outcome)


def _interpreted_compile(run: Run) -> EvalResult:
    """Correct in Triton's interpreter: dry-launch the shapes it did not run, then compile what was
    launched for the job's GPU arch."""
    specs, problems = run.final.get("launch_specs", []), run.final.get("launch_problems", [])
    notes = _dry_launches(run.task, run.client, run.shapes, run.ctx.device, specs)
    return _interpreted_verdict(run.ctx, specs, problems, run.outcome, notes)


def _timing(run: Run) -> EvalResult | None:
    """The worker times the candidate, this process the baselines, interleaved (after the seal: no
    new process from here)."""
    ctx, job, outcome, settings = run.ctx, run.job, run.outcome, run.settings
    if not job.measure.timing:
        ctx.stage = Stage.DONE
        return _finish(ctx, Status.OK, correctness=outcome.records)
    _enter(ctx, Stage.TIMING, correctness=outcome.records)
    timing_shape = job.timing_shape if job.timing_shape in run.shapes else run.shapes[0]
    reference, candidate = outcome.models[timing_shape]
    control = load_control(run.client, ctx.device, job.backend) if ctx.device.type == "cpu" else None
    ctx.flags += [integrity.flag(rule, evidence) for rule, evidence in run.client.seal()]
    timing_started = _perf_counter()
    try:
        with torch.no_grad():
            timed = measure(TimingRequest(
                task=run.task, shape=timing_shape, candidate=candidate, reference=reference,
                reference_dtype=settings.reference_dtype, device=ctx.device, config=run.timing_cfg,
                baselines=job.measure.baselines, compile_modes=_compile_modes(job, ctx.device),
                tolerance=outcome.timing_tolerance.get(timing_shape, (settings.atol, settings.rtol)),
                seed=settings.base_seed + 99991, outputs_like=outcome.expected.get(timing_shape),
                candidate_source=job.candidate_source, compile_wait_s=_compile_wait_s(ctx),
                control=control if run.client.control is not None else None))  # the seal drops one that fails
    except CandidateRaised as exc:  # on the timing's fresh inputs: the verdict keeps what correctness found
        _collect_flags(ctx, [], CorrectnessOutcome(), run.task, _final(run.client))
        return _finish(ctx, Status.RUNTIME_ERROR, correctness=outcome.records, error=exc.record)
    ctx.seconds["baselines_compile"] = round(timed.compile_seconds, 3)
    ctx.seconds["timing"] = round(_perf_counter() - timing_started - timed.compile_seconds, 3)
    ctx.flags += [integrity.flag(rule, ev) for rule, ev in timed.evidence]
    _collect_flags(ctx, [], CorrectnessOutcome(), run.task, _final(run.client))
    run.timing = timed.record
    run.roofline = roofline_stage.roofline_for(run.task, timing_shape, ctx.device, timed.record.candidate.median_us)
    _speed_flags(ctx, timed.record, run.roofline)
    if _rejecting(ctx):
        return _finish(ctx, Status.INTEGRITY_FLAG, correctness=outcome.records, timing=run.timing,
                       roofline=run.roofline)
    return None


def _profile(run: Run) -> EvalResult:
    ctx = run.ctx
    _enter(ctx, Stage.PROFILE, Status.OK, correctness=run.outcome.records, timing=run.timing, roofline=run.roofline)
    with ctx.timed("profile"):
        profile = roofline_stage.profile(run.job, ctx.device)
    ctx.stage = Stage.DONE
    return _finish(ctx, Status.OK, correctness=run.outcome.records, timing=run.timing, roofline=run.roofline,
                   profile=profile)


def _emulated_drive(run: Run) -> EvalResult | None:
    """One worker, one drive: the correctness stage runs the candidate in the CPU emulation, and
    every build it attempts on the way is first the compile-only build (nvcc and g++ with torch's
    flags). Static findings that reject already: the drive decides the build stage only (one call),
    as the compile-only verdict would; so do builds whose flags or sources are flagged (the worker
    stops at the first call after them). The build stage is decided afterwards (`_emulated_build`)."""
    run.loaded = _load(run, drive_only=bool(run.static))
    _, run.load_error = _load_reply(run.loaded, run.job.backend)
    run.static += _build_findings(run.loaded, run.client)
    if run.load_error is None and run.loaded.get("has_model") is True:
        try:
            _check_shapes(run)
        except CandidateRaised as exc:
            run.raised = exc.record
    return None


def _emulated_build(run: Run) -> EvalResult | None:
    """The build stage, from the builds the drive made: a failed one, a construct that needs a GPU,
    or no CUDA built ends the job at the build stage (`_build_decided`)."""
    ctx, job = run.ctx, run.job
    verdict = compile_verdict.judge_emulated(run.client, job.backend, job.cuda_arch)
    ctx.compile = verdict.compile
    run.static += _findings(verdict.build_findings)
    run.final = _final(run.client)
    not_run = cuda_emulated.failed_builds(run.final)
    if run.load_error is not None or verdict.status != Status.OK or not_run:
        return _build_decided(ctx, run.task, run.static, run.final, verdict, run.load_error, not_run)
    return None


def _emulated_verdict(run: Run) -> EvalResult:
    ctx, outcome = run.ctx, run.outcome
    ctx.executed_on = cuda_emulated.EXECUTED_ON
    ctx.execution_note = "; ".join(x for x in (cuda_emulated.NOTE, ctx.execution_note) if x)
    if run.static:  # rejecting findings (every static one rejects): the verdict, as the drive left it
        _collect_flags(ctx, run.static, CorrectnessOutcome(), run.task, _drive_evidence(run.final))
        ctx.stage, ctx.executed_on, ctx.execution_note, ctx.correctness_notes = Stage.BUILD, "", "", {}
        return _finish(ctx, Status.OK)
    _collect_flags(ctx, run.static, outcome, run.task, run.final)
    if run.raised is not None:
        return _finish(ctx, Status.RUNTIME_ERROR, correctness=outcome.records, error=run.raised)
    rejected = _checked(ctx, outcome)
    if rejected is not None:
        return rejected
    ctx.stage = Stage.DONE  # correct in the emulation: no timing exists without a GPU
    return _finish(ctx, Status.OK, correctness=outcome.records)


STAGES: dict[Mode, tuple[StageFn, ...]] = {
    Mode.NATIVE: (_build, _loaded, _correctness, _timing, _profile),
    Mode.INTERPRETED: (_build, _loaded, _correctness, _interpreted_compile),
    Mode.EMULATED: (_emulated_drive, _emulated_build, _emulated_verdict),
    Mode.COMPILE_ONLY: (_build, _compile_only_verdict),
}


def _build_decided(ctx: Context, task: Task, static: list[integrity.StaticFinding], final: dict[str, Any],
                   verdict: compile_verdict.CompileVerdict, error: ErrorRecord | None, not_run: str) -> EvalResult:
    """The emulated run ended at the build stage: the compile verdict, in today's order (a failed
    build, then a module that did not load, then no CUDA built), or the verdict standing with a
    note when the emulation cannot execute what nvcc built. The operators its calls dispatched do
    not count: the drive was not a correctness run."""
    ctx.stage, ctx.executed_on, ctx.execution_note, ctx.correctness_notes = Stage.BUILD, "", "", {}
    _collect_flags(ctx, static, CorrectnessOutcome(), task, _drive_evidence(final))
    if verdict.status == Status.COMPILE_ERROR:
        return _finish(ctx, verdict.status, error=verdict.error)
    if error is not None:
        ctx.stage = Stage.LOAD
        return _finish(ctx, Status.RUNTIME_ERROR, error=error)
    if verdict.status != Status.OK:
        return _finish(ctx, verdict.status, error=verdict.error)
    return _not_emulated(ctx, not_run)


def _drive_evidence(final: dict[str, Any]) -> dict[str, Any]:
    """What the worker's watches saw, less the operators its calls dispatched: a drive that ended
    at the build stage (stand-ins for what cannot run, a fallback after a failed build) was no
    correctness run, and a compile-only verdict counts no operators."""
    return {k: v for k, v in final.items() if k not in ("op_counts", "observed_ops", "background_ops")}


def _checked(ctx: Context, outcome: CorrectnessOutcome) -> EvalResult | None:
    """The correctness stage's verdict when it fails the candidate (a mismatch, a rejecting
    integrity flag); None when the candidate goes on."""
    ctx.flags += [integrity.flag(rule, evidence, "audit") for rule, evidence in outcome.audits]
    failed = [r for r in outcome.records if not r.passed]
    if failed:
        passed_shapes = {r.shape for r in outcome.records} - {r.shape for r in failed}
        if DEFAULT_SHAPE in passed_shapes:
            ctx.flags.append(integrity.flag("shape_specialised", "correct on 'default', wrong on "
                                            + ", ".join(sorted({r.shape for r in failed}))))
        return _finish(ctx, Status.MISMATCH, correctness=outcome.records)
    ctx.stage = Stage.INTEGRITY
    if _rejecting(ctx):
        return _finish(ctx, Status.INTEGRITY_FLAG, correctness=outcome.records)
    return None


def _not_emulated(ctx: Context, why: str) -> EvalResult:
    """The emulation could not run what nvcc built (a construct that needs a GPU, a build only the
    emulation failed): the compile-only verdict stands alone, saying why."""
    ctx.stage, ctx.executed_on, ctx.execution_note = Stage.BUILD, "", why
    return _finish(ctx, Status.OK)


def interpreted(job: EvalJob, device: torch.device) -> bool:
    """Whether this job's Triton kernels run in Triton's interpreter (no GPU here)."""
    return job.backend == "triton" and device.type != "cuda" and not job.compile_only


def _correctness_settings(task: Task, job: EvalJob, config: CorrectnessConfig) -> CorrectnessSettings:
    """Tolerances and the seeds. A seed the job does not fix (every job but a replay) is drawn here,
    from the OS's random source, after the worker started: it never enters the worker's process."""
    tol = task.tolerance
    base_seed = config.base_seed if config.base_seed is not None else secrets.randbelow(2**31 - 2**20)
    return CorrectnessSettings(
        trials=config.trials, base_seed=base_seed,
        reference_dtype=reference_dtype_for(task.dtype, job.track, config.reference_dtype),
        atol=config.atol if config.atol is not None else tol.atol,
        rtol=config.rtol if config.rtol is not None else tol.rtol,
        extra_checks=True, **precision_policy(task, job.track, config.atol, config.rtol),
    )


def _load_reply(reply: dict[str, Any], backend: str) -> tuple[CompileRecord, ErrorRecord | None]:
    """The worker's build report, read as data: a malformed one is the worker's failure."""
    loaded = LoadReply.parse(reply, backend)
    return loaded.compile, loaded.error


def _final(client: WorkerClient) -> dict[str, Any]:
    """What the worker's process-wide watches saw (its own to spoil, like everything it says)."""
    reply = client.send(Finish())
    reply["evidence"] = FinishReply.parse(reply).evidence  # checked: counts, evidence, launches
    reply["mapped_since_setup"] = client.libraries_since_setup()  # the judge's own reading, not the worker's
    reply["code_it_wrote"] = client.code_it_wrote()  # likewise
    return reply


def _dry_launches(task: Task, client: WorkerClient, checked: list[str], device: torch.device,
                  specs: list[dict[str, Any]]) -> list[str]:
    """ModelNew's host code on the shapes the interpreter did not check, launches recorded but not
    run, so the compile covers what a GPU would launch there (see `triton_aot.dry_launch`)."""
    notes = []
    seen = {json.dumps(s, sort_keys=True) for s in specs}
    for shape in [s for s in task.shapes if s not in checked]:
        numel = task.input_numel(shape)
        if numel is None or numel > triton_aot.DRY_LAUNCH_MAX_ELEMENTS:
            notes.append(f"{shape}: not dry-launched ({numel} elements)")
            continue
        try:
            _, candidate = build_remote(task, client, shape, 0, device)
            found, note = candidate.dry_call(task.make_inputs(1, shape, device), shape)
        except CandidateRaised as exc:
            notes.append(f"{shape}: host code failed ({exc.record.type}: {exc.record.message[:200]})")
            continue
        if note:
            notes.append(note)
        for spec in found:
            key = json.dumps(spec, sort_keys=True)
            if key not in seen:
                seen.add(key)
                specs.append(spec)
    return notes


def _interpreted_verdict(ctx: Context, specs: list[dict[str, Any]], problems: list[str],
                         outcome: CorrectnessOutcome, notes: list[str]) -> EvalResult:
    """Correct in the interpreter: compile what was launched for the job's GPU arch, report its
    resources, and stop (an interpreter's timing means nothing)."""
    ctx.stage = Stage.BUILD
    job = ctx.job
    started = _perf_counter()
    if not specs:
        log = "no Triton kernel was launched: " + ("; ".join(str(p)[:300] for p in problems[:10])
                                                   or "ModelNew ran no kernel")
        ctx.compile = replace(ctx.compile, ok=False, path="triton-interpreter", log_tail=log)
        return _finish(ctx, Status.COMPILE_ERROR, correctness=outcome.records,
                       error=ErrorRecord(type="NoTritonLaunch", message=log))
    # A separate process imports the candidate's source to compile its kernels: never this one.
    report = triton_aot.compile_launches(job.candidate_source, specs, job.cuda_arch)
    log = "\n".join(k.get("ptxas_log") or k.get("error") or "" for k in report["kernels"]) or report.get("log", "")
    log = "\n".join([*notes, log])
    resources = triton_aot.kernel_resources(report)
    ctx.compile = replace(ctx.compile, ok=report["ok"], path="triton-interpreter", arch=job.cuda_arch,
                          seconds=round(ctx.compile.seconds + _perf_counter() - started, 3),
                          log_tail=log[-6000:], resources=resources)
    if not report["ok"]:
        failed = [k for k in report["kernels"] if not k["ok"]]
        message = "; ".join(f"{k['name']}: {k['error']}" for k in failed)[:2000] or report.get("log", "")[-2000:]
        return _finish(ctx, Status.COMPILE_ERROR, correctness=outcome.records,
                       error=ErrorRecord(type="TritonCompileError", message=f"for {job.cuda_arch}: {message}"))
    ctx.stage = Stage.DONE
    return _finish(ctx, Status.OK, correctness=outcome.records)


def _shapes(task: Task, job: EvalJob) -> list[str]:
    if job.track == "kernelbench":
        return [DEFAULT_SHAPE]
    if job.shapes:
        unknown = [s for s in job.shapes if s not in task.shapes]
        if unknown:
            raise KeyError(f"task {task.name} has no shapes {unknown}; it has {sorted(task.shapes)}")
        return list(job.shapes)
    return [DEFAULT_SHAPE, *sorted(s for s in task.shapes if s != DEFAULT_SHAPE)]


def _compile_wait_s(ctx: Context) -> float:
    """How long the judge may wait for the parent's baseline builder: half of what the timing
    stage has left (it still has to time), at most five minutes."""
    left = ctx.clock.left_s() if ctx.clock is not None else 600.0
    return max(0.0, min(left / 2, 300.0))


def _compile_modes(job: EvalJob, device: torch.device) -> tuple[str, ...]:
    # max-autotune on the CPU benchmarks GEMM templates for minutes; it is a GPU baseline.
    if device.type == "cpu":
        return tuple(m for m in job.measure.compile_modes if m != "max-autotune")
    return job.measure.compile_modes


def _collect_flags(ctx: Context, static: list[integrity.StaticFinding], outcome: CorrectnessOutcome, task: Task,
                   final: dict[str, Any]) -> None:
    """Every registered integrity check (`checks`) over what the stages left, each finding flagged once."""
    seen = {(f.rule, f.evidence) for f in ctx.flags}
    for rule, evidence in checks.collect(checks.Evidence(task, list(static), list(outcome.evidence), final)):
        if (rule, evidence) not in seen:
            seen.add((rule, evidence))
            ctx.flags.append(integrity.flag(rule, evidence))


def _speed_flags(ctx: Context, timing_record: Any, roofline: Any) -> None:
    cand = timing_record.candidate.median_us
    eager = timing_record.baselines.get("eager")
    if roofline is not None and roofline.floor_us and cand < 0.9 * roofline.floor_us:
        ctx.flags.append(integrity.flag(
            "below_speed_of_light",
            f"{cand:.2f} us is below the speed-of-light floor of {roofline.floor_us:.2f} us "
            f"({roofline.ceilings_source} ceilings)"))
    if eager is not None and cand > 0 and eager.median_us / cand > SPEEDUP_AUDIT:
        ctx.flags.append(integrity.flag("speedup_over_10x", f"{eager.median_us / cand:.1f}x vs eager",
                                        severity="audit"))


def _merge_flags(flags: list[Flag]) -> tuple[Flag, ...]:
    """One flag per rule: the first pieces of evidence, and how many more there were."""
    merged: dict[str, list[Flag]] = {}
    for f in flags:
        merged.setdefault(f.rule, []).append(f)
    out = []
    for rule, group in merged.items():
        evidence = "; ".join(f.evidence for f in group[:3])
        if len(group) > 3:
            evidence += f"; and {len(group) - 3} more"
        severity = "reject" if any(f.severity == "reject" for f in group) else group[0].severity
        out.append(Flag(rule=rule, evidence=evidence, severity=severity))
    return tuple(out)


def _rejecting(ctx: Context) -> bool:
    return any(f.severity == "reject" for f in ctx.flags)


def _executed_on(ctx: Context, records: dict[str, Any]) -> str:
    if ctx.executed_on or not records.get("correctness"):
        return ctx.executed_on
    return "triton-interpreter" if interpreted(ctx.job, ctx.device) else ctx.device.type


def _finish(ctx: Context, status: Status, **records: Any) -> EvalResult:
    job = ctx.job
    if status == Status.OK and _rejecting(ctx):
        status = Status.INTEGRITY_FLAG
    timing_cfg, correctness_cfg = track_settings(job)
    try:
        info = device_state.device_info(ctx.device)
    except Exception:
        info = None
    provenance = EvalProvenance(
        track=job.track,
        track_settings={"timing": to_plain(timing_cfg),
                        "correctness": {**to_plain(correctness_cfg), **ctx.seeds, **ctx.correctness_notes},
                        "measure": to_plain(job.measure), "shapes": list(job.shapes),
                        "cpu_threads": job.cpu_threads if ctx.device.type == "cpu" else None},
        versions=device_state.versions(), device=info, host=device_state.host(), started_at=ctx.started_at,
        duration_s=round(_perf_counter() - ctx.started, 3), stage_seconds=dict(ctx.seconds),
    )
    result = EvalResult(
        task_name=job.task_name, candidate_hash=code_hash(job.candidate_source), backend=job.backend,
        status=status, stage=ctx.stage, compile=ctx.compile, flags=_merge_flags(ctx.flags), provenance=provenance,
        candidate_meta=dict(job.candidate_meta), executed_on=_executed_on(ctx, records),
        execution_note=ctx.execution_note,
        **{k: tuple(v) if isinstance(v, list) else v for k, v in records.items()},
    )
    result = redact.redact_result(result, redact.secret_strings(ctx.seeds))
    return replace(result, stage=Stage.DONE) if status == Status.OK and ctx.stage == Stage.DONE else result
