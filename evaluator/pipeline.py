"""The evaluator, as a list of stages: build, load, correctness, integrity, timing, profile.

`run_pipeline(job)` runs inside the sandbox child and never raises: every failure is a value in
the returned EvalResult. It stops at the first failing stage.
"""

from __future__ import annotations

import contextlib
import os
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

import torch
from agentforge.evaluator import (
    build_cache,
    device_state,
    integrity,
    native,
    roofline_stage,
    triton_aot,
    triton_interpret,
)
from agentforge.evaluator.guards import ConcurrencyWatch, TamperSnapshot
from agentforge.evaluator.loading import load_candidate
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
from agentforge.evaluator.stage_correctness import (
    CorrectnessOutcome,
    CorrectnessSettings,
    check_shape,
    reference_dtype_for,
)
from agentforge.evaluator.stage_timing import measure

from agentforge.candidate import code_hash
from agentforge.task import DEFAULT_SHAPE, Task, TaskLoadError

SPEEDUP_AUDIT = 10.0
_perf_counter = time.perf_counter  # bound before any candidate can patch `time`

# KernelBench's published settings (see FIELD.md): compare with its numbers on this track.
KERNELBENCH_TIMING = TimingConfig(warmup=3, min_reps=100, max_reps=100, target_rel_stderr=0.0, flush_l2=False,
                                  statistic="mean", fresh_inputs=False, recheck_fraction=0.0)
KERNELBENCH_CORRECTNESS = CorrectnessConfig(trials=5, base_seed=42, atol=1e-2, rtol=1e-2)


@dataclass
class Context:
    job: EvalJob
    started: float = field(default_factory=lambda: _perf_counter())
    started_at: str = field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))
    stage: Stage = Stage.LOAD
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    flags: list[Flag] = field(default_factory=list)
    compile: CompileRecord | None = None


def track_settings(job: EvalJob) -> tuple[TimingConfig, CorrectnessConfig]:
    if job.track == "kernelbench":
        return KERNELBENCH_TIMING, KERNELBENCH_CORRECTNESS
    return job.timing, job.correctness


def run_pipeline(job: EvalJob) -> EvalResult:
    ctx = Context(job)
    build_cache.set_cache_root(job.cache_dir)
    try:
        with _cpu_threads(job):
            return _run(ctx)
    except Exception as exc:
        status = Status.RUNTIME_ERROR
        return _finish(ctx, status, error=ErrorRecord(
            type=type(exc).__name__, message=str(exc)[:2000], traceback_tail=traceback.format_exc()[-4000:]))


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


def _run(ctx: Context) -> EvalResult:
    job = ctx.job
    try:
        task = Task(job.task_name, job.task_source)
    except TaskLoadError as exc:
        return _finish(ctx, Status.RUNTIME_ERROR, error=ErrorRecord(type="TaskLoadError", message=str(exc)))
    ctx.device = device_state.resolve_device(job.device)
    # Triton without a GPU runs in Triton's interpreter (correctness, then an ahead-of-time compile
    # for the target); CUDA without a GPU gets the nvcc verdict alone.
    interpret = job.backend == "triton" and ctx.device.type != "cuda" and not job.compile_only
    compile_only = job.compile_only or (job.backend in ("cuda", "triton") and ctx.device.type != "cuda"
                                        and not interpret)
    if interpret:
        try:
            triton_interpret.enable()
        except (ImportError, triton_interpret.TritonImportedTooEarly) as exc:
            return _finish(ctx, Status.RUNTIME_ERROR, error=ErrorRecord(
                type=type(exc).__name__, message=f"Triton's interpreter is unavailable here: {exc}"))
    static = integrity.static_findings(job.candidate_source)
    snapshot = TamperSnapshot.take()
    watch = ConcurrencyWatch.start()

    # ----- build and load
    ctx.stage = Stage.BUILD
    loaded = load_candidate(job.candidate_source, job.backend, compile_only, job.cuda_arch,
                            module_name=f"agentforge_candidate_{code_hash(job.candidate_source)}")
    ctx.compile = loaded.compile
    if loaded.compile_failed:
        return _finish(ctx, Status.COMPILE_ERROR, error=loaded.error)
    # What was actually built (flags and sources as the compiler got them, assembled at run time
    # or not) joins the static evidence.
    static += integrity.build_findings(native.BUILD_EVENTS)
    if compile_only:
        _collect_flags(ctx, static, CorrectnessOutcome(), task, snapshot, watch)
        if loaded.error is not None:
            ctx.stage = Stage.LOAD
            return _finish(ctx, Status.RUNTIME_ERROR, error=loaded.error)
        # No GPU: the build verdict is all there is; `accepted` stays false without correctness.
        return _finish(ctx, Status.OK)
    ctx.stage = Stage.LOAD
    if loaded.error is not None or loaded.model_cls is None:
        return _finish(ctx, Status.RUNTIME_ERROR, error=loaded.error)

    # ----- correctness, gathering run-time evidence for the integrity rules
    ctx.stage = Stage.CORRECTNESS
    timing_cfg, correctness_cfg = track_settings(job)
    tol = task.tolerance
    settings = CorrectnessSettings(
        trials=correctness_cfg.trials, base_seed=correctness_cfg.base_seed,
        reference_dtype=reference_dtype_for(task.dtype, job.track, correctness_cfg.reference_dtype),
        atol=correctness_cfg.atol if correctness_cfg.atol is not None else tol.atol,
        rtol=correctness_cfg.rtol if correctness_cfg.rtol is not None else tol.rtol,
        extra_checks=True,
    )
    shapes = _shapes(task, job)
    outcome = CorrectnessOutcome()
    device_state.reset_persisting_l2()
    launches = triton_aot.capture() if interpret else contextlib.nullcontext(None)
    try:
        with torch.no_grad(), launches as launch_log:
            for index, shape in enumerate(shapes):
                check_shape(task, loaded.model_cls, shape, index, ctx.device, settings, outcome,
                            task.allowed_torch_ops)
    except Exception as exc:
        _collect_flags(ctx, static, outcome, task, snapshot, watch)
        return _finish(ctx, Status.RUNTIME_ERROR, correctness=outcome.records, error=ErrorRecord(
            type=type(exc).__name__, message=str(exc)[:2000], traceback_tail=traceback.format_exc()[-4000:]))

    _collect_flags(ctx, static, outcome, task, snapshot, watch)
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
    if interpret:
        dry_launch_notes = triton_aot.dry_launch(task, loaded.model_cls, shapes, ctx.device, launch_log)
        return _interpreted_verdict(ctx, launch_log, outcome, dry_launch_notes)
    if not job.measure.timing:
        ctx.stage = Stage.DONE
        return _finish(ctx, Status.OK, correctness=outcome.records)

    # ----- timing
    ctx.stage = Stage.TIMING
    timing_shape = job.timing_shape if job.timing_shape in shapes else shapes[0]
    reference, candidate = outcome.models[timing_shape]
    with torch.no_grad():
        timed = measure(task, timing_shape, candidate, reference, settings.reference_dtype, ctx.device, timing_cfg,
                        job.measure.baselines, _compile_modes(job, ctx.device), (settings.atol, settings.rtol),
                        seed=correctness_cfg.base_seed + 99991)
    ctx.flags += [integrity.flag(rule, ev) for rule, ev in timed.evidence]
    watch.threads |= timed.baseline_threads
    watch.children |= timed.baseline_children
    _collect_flags(ctx, [], CorrectnessOutcome(), task, snapshot, watch)
    roofline = roofline_stage.roofline_for(task, timing_shape, ctx.device, timed.record.candidate.median_us)
    _speed_flags(ctx, timed.record, roofline)
    if _rejecting(ctx):
        return _finish(ctx, Status.INTEGRITY_FLAG, correctness=outcome.records, timing=timed.record,
                       roofline=roofline)
    ctx.stage = Stage.PROFILE
    profile = roofline_stage.profile(job, ctx.device)
    ctx.stage = Stage.DONE
    return _finish(ctx, Status.OK, correctness=outcome.records, timing=timed.record, roofline=roofline,
                   profile=profile)


def _interpreted_verdict(ctx: Context, launch_log: Any, outcome: CorrectnessOutcome,
                         notes: list[str]) -> EvalResult:
    """Correct in the interpreter: compile what was launched for the job's GPU arch, report its
    resources, and stop (an interpreter's timing means nothing)."""
    ctx.stage = Stage.BUILD
    job = ctx.job
    started = _perf_counter()
    if not launch_log.specs:
        log = "no Triton kernel was launched: " + ("; ".join(launch_log.problems) or "ModelNew ran no kernel")
        ctx.compile = replace(ctx.compile, ok=False, path="triton-interpreter", log_tail=log)
        return _finish(ctx, Status.COMPILE_ERROR, correctness=outcome.records,
                       error=ErrorRecord(type="NoTritonLaunch", message=log))
    report = triton_aot.compile_launches(job.candidate_source, launch_log.specs, job.cuda_arch)
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


def _compile_modes(job: EvalJob, device: torch.device) -> tuple[str, ...]:
    # max-autotune on the CPU benchmarks GEMM templates for minutes; it is a GPU baseline.
    if device.type == "cpu":
        return tuple(m for m in job.measure.compile_modes if m != "max-autotune")
    return job.measure.compile_modes


def _collect_flags(ctx: Context, static: list[integrity.StaticFinding], outcome: CorrectnessOutcome, task: Task,
                   snapshot: TamperSnapshot, watch: ConcurrencyWatch) -> None:
    seen = {(f.rule, f.evidence) for f in ctx.flags}

    def add(rule: str, evidence: str, severity: str = "reject") -> None:
        if (rule, evidence) not in seen:
            seen.add((rule, evidence))
            ctx.flags.append(integrity.flag(rule, evidence, severity))

    for finding in static:
        add(finding.rule, finding.evidence)
    for rule, evidence in outcome.evidence:
        add(rule, evidence)
    compute = outcome.recorder.compute_ops(task.allowed_torch_ops)
    if compute:
        listed = ", ".join(f"{op} x{n}" for op, n in sorted(compute.items(), key=lambda kv: -kv[1])[:8])
        add("torch_fallback", f"ModelNew.forward dispatched PyTorch compute: {listed}")
    patched, switched = snapshot.changes()
    if patched:
        add("monkey_patch", "replaced: " + ", ".join(patched[:10]))
    if switched:
        add("precision_switch", "; ".join(switched))
    leftovers = watch.leftovers()
    if leftovers:
        add("background_work", "; ".join(leftovers[:5]))
    l2 = device_state.persisting_l2_bytes() if ctx.device.type == "cuda" else None
    if l2:
        add("l2_persistence", f"persisting L2 carve-out of {l2} bytes left set")


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
        track_settings={"timing": to_plain(timing_cfg), "correctness": to_plain(correctness_cfg),
                        "measure": to_plain(job.measure), "shapes": list(job.shapes),
                        "cpu_threads": job.cpu_threads if ctx.device.type == "cpu" else None},
        versions=device_state.versions(), device=info, host=device_state.host(), started_at=ctx.started_at,
        duration_s=round(_perf_counter() - ctx.started, 3),
    )
    result = EvalResult(
        task_name=job.task_name, candidate_hash=code_hash(job.candidate_source), backend=job.backend,
        status=status, stage=ctx.stage, compile=ctx.compile, flags=_merge_flags(ctx.flags), provenance=provenance,
        candidate_meta=dict(job.candidate_meta),
        **{k: tuple(v) if isinstance(v, list) else v for k, v in records.items()},
    )
    return replace(result, stage=Stage.DONE) if status == Status.OK and ctx.stage == Stage.DONE else result
