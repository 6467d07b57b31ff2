"""`optimize(task_ref, settings) -> RunSummary`: one optimisation run, new or resumed.

A run lives in `<runs_dir>/<run_id>/`: `run.json` (what was asked), `checkpoints.sqlite` (the
LangGraph checkpointer: `resume=RUN_ID` continues from the last finished step, even after kill -9),
`objects/` (every prompt, reply, candidate, verdict and result, content-addressed), `events.jsonl`
(one line per finished step), and at the end `best_kernel.py`, `report.md`, `speedup.png`,
`summary.json`.

The task file is read here, never imported (it runs only in sandbox children). Before the first
paid round the sandboxed evaluator's preflight imports it and sizes its shapes there; a task that
fails on its own stops the run at once (`RunError` before it starts, or the stop reason
`task error: ...` and status `task_error` when the evaluator finds it during a round).
"""

from __future__ import annotations

import dataclasses
import json
import secrets
import sqlite3
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentforge.agent.artifacts import ArtifactStore
from agentforge.agent.nodes import TASK_ERROR_STOP
from agentforge.agent.report import write_outputs
from agentforge.agent.spec import RunSpec
from agentforge.candidate import Candidate
from agentforge.evaluator.result import EvalResult, Measure, TimingConfig
from agentforge.llm.base import Provider
from agentforge.settings import Settings
from agentforge.task import Task, TaskText, read_task

# Called with the task as read (a TaskText: name, source, path; never imported in this process).
Evaluate = Callable[[Task | TaskText, Candidate], EvalResult]


class RunError(RuntimeError):
    """A run that cannot start or resume; the message says why and what to do."""


@dataclass
class RunSummary:
    run_id: str
    run_dir: str
    task_name: str
    backend: str
    provider: str
    status: str  # finished | awaiting_review | task_error (the task failed on its own; see stop_reason)
    stop_reason: str | None
    rounds: int
    best: dict[str, Any] | None
    usage: dict[str, Any]
    approved: bool | None
    history: list[dict[str, Any]] = field(default_factory=list)
    outputs: dict[str, str | None] = field(default_factory=dict)
    notice: str | None = None  # e.g. that the offline library provider was used, and why
    # The best kernel's measurement as a headline may state it: timed shape, harness floor, the
    # overhead-bound subjects, the speedups a report may claim, its roofline fraction.
    best_measurement: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def optimize(
    task_ref: str | None, settings: Settings, spec: RunSpec | None = None, *, resume: str | None = None,
    run_id: str | None = None, approve: Callable[[dict[str, Any]], bool] | None = None,
    on_progress: Callable[[dict[str, Any]], None] | None = None,
    provider: Provider | None = None, evaluate: Evaluate | None = None, kernels_root: Path | None = None,
    limits: dict[str, Any] | None = None,
    on_activity: Callable[[str], None] | None = None, on_retry: Callable[[str], None] | None = None,
    check: Evaluate | None = None, on_note: Callable[[str], None] | None = None,
) -> RunSummary:
    """Run (or with `resume`, continue) the coder/judge loop on a task until a budget stops it.

    `spec` (`agent/spec.py`): what is measured (baselines, compile modes, timing, the shapes checked,
    the first one timed) and how the run searches (candidates per round from a beam of the best
    kernels; technique notes and exemplars in the coder's prompt; review pauses). A resumed run
    keeps the spec, task, backend, provider, models and budgets it started with (a `review` asked
    for now is added); `limits` overrides budgets (`{"max_rounds": 20}` extends a run).
    `approve` answers the review question when review is on (None: the run pauses and a later
    `resume` asks again). `provider` and `evaluate` replace the configured ones (tests, notebooks).
    `on_progress` hears each finished step; `on_activity` hears, in one line, what starts now (a
    model call, an evaluation); `on_retry` (else `on_activity`) each retry of a model call.
    `check` (build and correctness, no timing) lets the search check a round's candidates at once
    when `evaluate` is given; the sandboxed evaluator brings its own. `on_note` hears, once, what
    the preflight decided for the user to know (a derived CPU shape; what runs without a GPU).
    """
    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.types import Command

    from agentforge.agent.graph import build_graph, build_search_graph

    runs_dir = Path(settings.runs_dir).expanduser()
    if resume:
        run_dir = runs_dir / resume
        if not (run_dir / "run.json").is_file():
            raise RunError(f"no run {resume!r} under {runs_dir} (set --out to the folder that holds it)")
        meta = json.loads((run_dir / "run.json").read_text())
        saved = RunSpec.from_meta(meta)
        spec = dataclasses.replace(saved, review=saved.review or bool(spec and spec.review))
        settings = _with_run_provider(settings, meta)
        settings = dataclasses.replace(settings, agent=dataclasses.replace(settings.agent, **meta["agent"]))
    else:
        if task_ref is None:
            raise RunError("name a task, or --resume RUN_ID")
        meta = {}
        spec = spec or RunSpec()
    if limits:
        settings = dataclasses.replace(settings, agent=dataclasses.replace(settings.agent, **limits))
    task = _read_task(meta.get("task_ref", task_ref), settings)
    backend = meta.get("backend") or _backend(settings)
    device = meta.get("device") or _device(settings, backend)
    file_hash = task.source_hash  # the file's own: a derived CPU shape appended below is not in it
    if evaluate is None:  # the sandboxed evaluator: check the task before any round is paid for
        task, notes = _preflight(task, settings, backend, device, spec.shapes, spec.baselines)
        for note in notes:
            (on_note or (lambda line: None))(note)
    if provider is None:
        from agentforge.llm.registry import make_provider

        provider = make_provider(settings.provider, task_name=task.name, backend=backend,
                                 gpu=_gpu_slug(device), kernels_root=kernels_root)
    if provider.name == "library" and spec.candidates > 1:
        # It proposes its shipped variants one by one, the next untried each time: N calls at once
        # would all get the same one.
        spec = dataclasses.replace(spec, candidates=1, beam=1)
    hears = on_retry or on_activity
    if hears is not None and hasattr(provider, "on_retry") and provider.on_retry is None:
        provider.on_retry = hears
    if not resume:
        run_id = run_id or _new_run_id(task.name)
        run_dir = runs_dir / run_id
        # Before the folder exists: naming a server's model asks the server, which may be down.
        models = {"coder_model": _model(provider, "coder"), "judge_model": _model(provider, "judge")}
        run_dir.mkdir(parents=True, exist_ok=False)
        meta = {
            "run_id": run_id, "task_ref": str(task.path or task_ref), "task_name": task.name,
            "task_hash": file_hash, "backend": backend, "device": device,
            "device_spec": describe_device(device), "provider": provider.name,
            **models,
            "base_url": settings.provider.base_url, "created_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "agent": dataclasses.asdict(settings.agent), **spec.to_meta(),
            "derived_shape": getattr(task, "derived_shape", None),
        }
        (run_dir / "run.json").write_text(json.dumps(meta, indent=1))
    else:
        run_id = resume
    if meta["task_hash"] != file_hash:
        raise RunError(f"the task file {meta['task_ref']} changed since run {run_id} started; start a new run")

    store = ArtifactStore(run_dir / "objects")
    conn = sqlite3.connect(str(run_dir / "checkpoints.sqlite"), check_same_thread=False)
    if evaluate is None:
        check = _sandboxed_evaluate(settings, device, (), None, spec.shapes, timed=False)
    from agentforge.agent.knowledge import Knowledge

    try:
        graph = (build_search_graph if spec.candidates > 1 or spec.beam > 1 else build_graph)(
            SqliteSaver(conn), provider, store=store, task=task, backend=backend,
            evaluate=evaluate or _sandboxed_evaluate(settings, device, spec.baselines, spec.timing, spec.shapes,
                                                     compile_modes=spec.compile_modes),
            check=check, candidates=spec.candidates, beam_width=spec.beam,
            knowledge=Knowledge.for_run(task, backend, settings, skills=spec.skills, exemplars=spec.exemplars),
            limits=settings.agent, device_spec=meta["device_spec"],
            planned_rounds=getattr(provider, "planned_rounds", None), review=spec.review,
            shape_note=describe_shapes(task, backend, spec.shapes, settings.eval.track), notify=on_activity,
            finish=lambda state: write_outputs(run_dir, state, store, meta),
        )
        config = {"configurable": {"thread_id": run_id}}
        existing = graph.get_state(config)
        graph_input: Any
        if not existing.values:
            graph_input = {"run_id": run_id, "task_ref": meta["task_ref"], "device": device}
        else:
            graph_input = None  # continue from the last finished step
        status = _drive(graph, config, graph_input, run_dir, approve, on_progress, Command)
        state = graph.get_state(config).values
    finally:
        conn.close()
    summary = _summary(run_dir, meta, state, status, store)
    (run_dir / "summary.json").write_text(json.dumps(summary.to_dict(), indent=1, default=str))
    return summary


def run_meta(runs_dir: str | Path, run_id: str) -> dict[str, Any] | None:
    """What a run was started with (`run.json`), or None when there is no such run."""
    path = Path(runs_dir).expanduser() / run_id / "run.json"
    return json.loads(path.read_text()) if path.is_file() else None


def _drive(graph: Any, config: dict[str, Any], graph_input: Any, run_dir: Path,
           approve: Callable[[dict[str, Any]], bool] | None,
           on_progress: Callable[[dict[str, Any]], None] | None, command: Any) -> str:
    """Stream the graph to its end (or a review pause), logging each finished step."""
    with (run_dir / "events.jsonl").open("a") as events:
        while True:
            if graph.get_state(config).values.get("finished"):
                return "finished"
            for chunk in graph.stream(graph_input, config, stream_mode="updates", durability="sync"):
                for node in chunk:
                    if node == "__interrupt__":
                        continue
                    values = graph.get_state(config).values
                    view = progress_view(node, values)
                    events.write(json.dumps({"t": time.time(), **view}) + "\n")
                    events.flush()
                    if on_progress is not None:
                        on_progress(view)
            snapshot = graph.get_state(config)
            if not snapshot.interrupts:
                return "finished" if snapshot.values.get("finished") else "stopped"
            if approve is None:
                return "awaiting_review"
            graph_input = command(resume=bool(approve(dict(snapshot.interrupts[0].value))))


def progress_view(node: str, state: dict[str, Any]) -> dict[str, Any]:
    """What the live view shows after a step: round, mode, stage, best speedups, tokens, dollars."""
    best = state.get("best") or {}
    usage = state.get("usage") or {}
    pending = state.get("pending") or {}
    return {
        "run_id": state.get("run_id"), "stage": node, "round": pending.get("round", state.get("round", 0)),
        "mode": state.get("mode") or ("search" if "beam" in state else None),
        "best_speedup": best.get("speedup"), "best_speedup_vs_compile": best.get("speedup_vs_compile"),
        "input_tokens": usage.get("input_tokens", 0), "output_tokens": usage.get("output_tokens", 0),
        "cost_usd": usage.get("cost_usd", 0.0), "stop_reason": state.get("stop_reason"),
        "last": (state.get("history") or [{}])[-1] if node == "keep_best" else None,
        # the search's round closes with one record per proposal
        "records": [r for r in state.get("history") or [] if r.get("round") == state.get("round")]
        if node == "keep_best" and "beam" in state else None,
    }


def _summary(run_dir: Path, meta: dict[str, Any], state: dict[str, Any], status: str,
             store: ArtifactStore) -> RunSummary:
    outputs = {name: str(run_dir / file) if (run_dir / file).exists() else None
               for name, file in (("best_kernel", "best_kernel.py"), ("report", "report.md"),
                                  ("plot", "speedup.png"))}
    if (state.get("stop_reason") or "").startswith(TASK_ERROR_STOP):
        status = "task_error"
    notice = None
    if meta["provider"] == "library":
        notice = ("the offline `library` provider, not an LLM, proposed the shipped reference kernel and its "
                  "tunable variants (one per round, so --candidates was 1); see docs/optimize.md to use a real model")
    best_measurement = _best_measurement(store, state.get("best"))
    return RunSummary(
        best_measurement=best_measurement,
        run_id=meta["run_id"], run_dir=str(run_dir), task_name=meta["task_name"], backend=meta["backend"],
        provider=meta["provider"], status=status, stop_reason=state.get("stop_reason"),
        rounds=int(state.get("round", 0)), best=state.get("best"), usage=state.get("usage") or {},
        approved=state.get("approved"), history=list(state.get("history") or []), outputs=outputs,
        notice=notice,
    )


def _best_measurement(store: ArtifactStore, best: dict[str, Any] | None) -> dict[str, Any] | None:
    """What the summary may headline about the best kernel, read from its EvalResult."""
    if not best or not best.get("result_ref"):
        return None
    try:
        result = EvalResult.from_json(store.get_text(best["result_ref"]))
    except (OSError, KeyError, ValueError):
        return None
    timing, roof = result.timing, result.roofline
    return {
        "shape": timing.shape if timing else None, "floor_us": result.floor_us,
        "overhead_bound": list(timing.overhead_bound) if timing else [],
        "headline_speedup": result.headline_speedup, "headline_speedup_vs_compile": result.headline_speedup_vs_compile,
        "sol_fraction": roof.sol_fraction if roof else None, "roofline_label": roof.label if roof else None,
        "ceilings_source": roof.ceilings_source if roof else None,
    }


def _sandboxed_evaluate(settings: Settings, device: str, baselines: tuple[str, ...],
                        timing: TimingConfig | None, shapes: tuple[str, ...], timed: bool = True,
                        compile_modes: Sequence[str] | None = None) -> Evaluate:
    """The sandboxed evaluator; `timed=False`: build and correctness only (the search's checks);
    `compile_modes`: the torch.compile modes of the `compile` baseline (default: Measure's)."""
    from agentforge.evaluation import evaluate, make_job
    from agentforge.sandbox.config import from_settings

    sandbox = from_settings(settings.sandbox, settings.cache_dir)
    modes = {"compile_modes": tuple(compile_modes)} if compile_modes else {}
    measure = (Measure(baselines=baselines, profile=settings.eval.profile, **modes) if timed
               else Measure(timing=False, baselines=(), profile=False))

    def run(task: Task | TaskText, candidate: Candidate) -> EvalResult:
        job = make_job(task, candidate, device=device, track=settings.eval.track, measure=measure,
                       timing=timing, cuda_arch=settings.eval.cuda_arch, shapes=shapes,
                       timing_shape=shapes[0] if shapes else "default",
                       cache_dir=str(Path(settings.cache_dir).expanduser()))
        return evaluate(job, sandbox)

    return run


def describe_shapes(task: TaskText, backend: str, shapes: tuple[str, ...], track: str) -> str:
    """Which shape variants every candidate is checked on and which one is timed, for the
    prompts; the same choice `evaluator.api.make_job` makes."""
    from agentforge.task import backend_default_shapes

    names = task.shape_names
    preferred = backend_default_shapes(names, backend) if track == "hardened" else ()
    if shapes or preferred:
        checked = shapes or preferred
        timed = checked[0]
    else:
        checked = ("default",) if track == "kernelbench" else names or ()
        timed = "default"
    listed = ", ".join(f"'{s}'" for s in checked) if checked else "every variant its SHAPES declares"
    return (f"Correctness is checked on the shape variants {listed}; only '{timed}' is timed, so tune for "
            f"it and keep the others correct. 'default' is the reference's module-level sizes (what "
            f"get_inputs() uses); the other variants' sizes are in its SHAPES.")


def _read_task(ref: str | None, settings: Settings) -> TaskText:
    root = Path(settings.tasks_root).expanduser() if settings.tasks_root else None
    return read_task(str(ref), root)


def _preflight(task: TaskText, settings: Settings, backend: str, device: str, shapes: tuple[str, ...],
               baselines: tuple[str, ...]) -> tuple[TaskText, tuple[str, ...]]:
    """RunError, before the first round, for a task that cannot be evaluated here: it fails to
    import or hangs in the sandbox, needs a model hub, lacks a --shape, or is too large. Else the
    task to run (with a derived `cpu` shape, for a CPU run on a file that declares none) and the
    notes to tell the user."""
    from agentforge.agent.nodes import task_error_reason
    from agentforge.agent.preflight import PreflightError, prepare
    from agentforge.evaluator.api import make_job
    from agentforge.sandbox.config import from_settings

    job = make_job(task, Candidate("", backend), device=device, track=settings.eval.track, shapes=shapes,
                   measure=Measure(baselines=baselines), cache_dir=str(Path(settings.cache_dir).expanduser()))
    try:
        prepared = prepare(task, job, from_settings(settings.sandbox, settings.cache_dir), settings.sandbox.memory_gb)
    except PreflightError as exc:
        raise RunError(exc.message) from exc
    failed = prepared.failed
    if failed is not None:
        raise RunError(task_error_reason(failed) if failed.status.value == "task_error"
                       else f"the sandbox could not run: {failed.summary()}")
    return prepared.task, prepared.notes


def _backend(settings: Settings) -> str:
    if settings.eval.backend != "auto":
        return settings.eval.backend
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _device(settings: Settings, backend: str) -> str:
    if settings.eval.device != "auto":
        return settings.eval.device
    from agentforge.evaluator.api import default_device

    return default_device(backend)


def _gpu_slug(device: str) -> str:
    if not device.startswith("cuda"):
        return "cpu"
    import torch

    from agentforge.kernel_library import gpu_slug

    index = int(device.split(":")[1]) if ":" in device else 0
    return gpu_slug(torch.cuda.get_device_name(index)) if torch.cuda.is_available() else "h100"


def describe_device(device: str) -> str:
    """The device's spec in a few lines, for the coder and the judge."""
    from agentforge.evaluator.hardware import specs

    spec: Any = None
    if device.startswith("cuda"):
        spec = specs.probe_gpu(int(device.split(":")[1]) if ":" in device else 0)
    if spec is None:
        spec = specs.probe_cpu()
    fields = {k: v for k, v in spec.to_dict().items() if v not in (None, (), [], {}, "")}
    return "; ".join(f"{k}: {v}" for k, v in fields.items())


def _model(provider: Provider, role: str) -> str:
    model_for = getattr(provider, "model_for", None)
    return model_for(role) if callable(model_for) else "?"


def _with_run_provider(settings: Settings, meta: dict[str, Any]) -> Settings:
    """A resumed run keeps its provider, models and server; only the key and budgets come anew."""
    provider = dataclasses.replace(settings.provider, name=meta["provider"])
    if meta["provider"] != "library":
        provider.model = meta.get("coder_model") or provider.model
        provider.judge_model = meta.get("judge_model") or provider.judge_model
        provider.base_url = meta.get("base_url") or provider.base_url
    return dataclasses.replace(settings, provider=provider)


def _new_run_id(task_name: str) -> str:
    slug = "".join(ch if ch.isalnum() else "-" for ch in task_name).strip("-")[:40]
    return f"{slug}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"


