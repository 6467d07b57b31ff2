"""Leaderboard runs: score a kernels folder, or optimise every task of a suite, resumably.

Both paths turn (task, sample, track) into an EvalJob, skip jobs whose key is already in the
results store, hand the rest to an executor (the local process pool, or Ray), and store each
result as it arrives, so an interrupted run resumes where it stopped and a result reported
twice is stored once.

Task files are read here, never imported (they run only in sandbox children). A task that fails
on its own (`task_error`: it does not import, or its inputs or reference fail) fails every job of
it, whatever the candidate: one job per task runs first, and a task that comes back task_error
has its other jobs skipped, nothing stored against the entry, and the reason in
`RunReport.task_errors`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentforge.candidate import Candidate, Provenance, code_hash
from agentforge.evaluator.api import make_job as evaluator_make_job
from agentforge.evaluator.result import TRACKS, EvalJob, EvalResult, Measure, Status, TimingConfig
from agentforge.leaderboard.kernels_dir import scan_kernels
from agentforge.leaderboard.suites import Holdout, Suite, SuiteTask
from agentforge.store import ResultsStore
from agentforge.task import CPU_SHAPE, TaskText, declared_shape_names

if TYPE_CHECKING:
    from agentforge.sandbox.config import SandboxConfig

# jobs, on_result(result) -> results in job order
Executor = Callable[[Sequence[EvalJob], Callable[[EvalResult], None]], list[EvalResult]]


@dataclass(frozen=True)
class JobOptions:
    """What every job of a leaderboard run shares."""

    backend: str = "cpu"  # cpu | cuda | triton, or "detect" (from each candidate's source)
    device: str = "cpu"
    tracks: tuple[str, ...] = ("hardened", "kernelbench")
    cache_dir: str | None = None
    measure: Measure | None = None  # None: the evaluator's default (eager and torch.compile baselines)
    # () checks the backend's shapes (on the CPU the task's `cpu` variant, then `small`), as
    # `agentforge eval` does; else these variants, the first one timed
    shapes: tuple[str, ...] = ()
    timing: TimingConfig | None = None  # None: the track's default (`--quick` lowers it)
    # A CPU job on a task that declares no shape variants (KernelBench's files) gets the probe's
    # derived `cpu` variant from this, as `agentforge eval` does (`cpu_shape_deriver`); None: none.
    derive: Callable[[TaskText, EvalJob], EvalJob] | None = None


@dataclass(frozen=True)
class PlannedJob:
    key: str
    task: SuiteTask
    sample: int
    track: str
    job: EvalJob


@dataclass
class RunReport:
    planned: int = 0
    skipped: int = 0  # already in the store
    stored: int = 0
    stored_elsewhere: int = 0  # evaluated here, but another run stored the same job first
    unmatched: list[Path] = field(default_factory=list)
    results: list[EvalResult] = field(default_factory=list)  # of the jobs that ran, in plan order
    task_errors: dict[str, str] = field(default_factory=dict)  # task -> why it failed on its own
    skipped_task_error: int = 0  # jobs not run because their task failed on its own


CPU_TRACK_NOTE = ("on the CPU, ranking on the hardened track only: the kernelbench track always checks and times "
                  "each task's default shape, and a task with a `cpu` shape variant sizes that default for a GPU; "
                  "ask for it with --track kernelbench")


def default_tracks(suite: Suite, on_cpu: bool) -> tuple[str, ...]:
    """The tracks ranked when none is named: both, but on the CPU only the hardened one when a
    task of the suite declares a `cpu` shape variant (its default shape, the only one the
    kernelbench track uses, is sized for a GPU: 16 GiB jobs killed for memory)."""
    if not on_cpu:
        return TRACKS
    for task in suite.tasks:
        try:
            names = declared_shape_names(task.path.read_text())
        except (OSError, UnicodeDecodeError):
            continue
        if names and CPU_SHAPE in names:
            return ("hardened",)
    return TRACKS


def unknown_shapes(suite: Suite, shapes: Sequence[str]) -> str | None:
    """Why `--shape` cannot be checked on every task of the suite (the first task that lacks one
    of them, and its shapes, read from its text), or None. A task whose SHAPES only running it
    would tell is not judged here."""
    for task in suite.tasks:
        try:
            known = declared_shape_names(task.path.read_text())
        except (OSError, UnicodeDecodeError):
            continue
        missing = [s for s in shapes if known is not None and s not in known]
        if missing:
            return (f"task {task.name} has no shape {', '.join(repr(s) for s in missing)}; its shapes: "
                    f"{', '.join(known or ())}. Name shapes every task of the suite has, or leave out --shape")
    return None


def job_key(entry: str, suite: str, track: str, task: str, sample: int, source: str) -> str:
    """The store key of one evaluation: the same candidate of the same entry, task and track is
    one job, whoever submits it and however often."""
    text = "\0".join((entry, suite, track, task, str(sample), hashlib.sha256(source.encode()).hexdigest()))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def detect_backend(source: str) -> str:
    """The backend a KernelBench-format answer targets, from its source."""
    if "import triton" in source or "@triton.jit" in source:
        return "triton"
    if "__global__" in source or ("load_inline" in source and "cuda_sources" in source):
        return "cuda"
    return "cpu"


def make_job(
    task: SuiteTask, source: str, *, track: str, options: JobOptions, meta: dict[str, Any],
) -> EvalJob:
    """One evaluation job, built by the evaluator's `make_job` (it knows each track's settings)."""
    backend = detect_backend(source) if options.backend == "detect" else options.backend
    candidate = Candidate(source=source, backend=backend, provenance=Provenance(source="file"))
    text = task.path.read_text()
    # The shape names, read from the file's text, let the evaluator pick the backend's shapes:
    # without them a CPU job checks and times the task's GPU-sized default shape.
    task_text = TaskText(task.name, text, task.path, declared_shape_names(text))
    job = evaluator_make_job(task_text, candidate,
                             device=options.device, track=track, cache_dir=options.cache_dir,
                             measure=options.measure, shapes=options.shapes, timing=options.timing,
                             timing_shape=options.shapes[0] if options.shapes else "default")
    job = dataclasses.replace(job, candidate_meta={**job.candidate_meta, **meta})
    return options.derive(task_text, job) if options.derive is not None and not options.shapes else job


def cpu_shape_deriver(sandbox: SandboxConfig, on_note: Callable[[str], None] = lambda _: None,
                      ) -> Callable[[TaskText, EvalJob], EvalJob]:
    """`JobOptions.derive` for a CPU run: a task that declares no shape variants (a KernelBench
    file sizes its globals for a GPU: level 1's ReLU is 12 GiB a call) is probed once in a sandbox
    child (no candidate code), and its jobs check and time the derived `cpu` variant, said once per
    task through `on_note`. A task whose probe fails keeps its job: the run reports it as the
    task's error."""
    from agentforge.agent.preflight import derived_note, run_probe, with_derived_shape

    derived: dict[str, dict[str, Any] | None] = {}

    def derive(task: TaskText, job: EvalJob) -> EvalJob:
        if job.device != "cpu" or task.shape_names is None or set(task.shape_names) - {"default"}:
            return job
        key = task.source_hash
        if key not in derived:
            probe = run_probe(job, sandbox)
            figures = probe.candidate_meta.get("task_probe") if probe.status == Status.OK else None
            derived[key] = (figures or {}).get("derived")
            if derived[key]:
                on_note(derived_note(task.with_derived_shape(derived[key]), hint=""))
        if not derived[key]:
            return job
        return with_derived_shape(task, job, derived[key])[1]

    return derive


def plan_kernels(
    suite: Suite, kernels_dir: Path, *, entry: str, options: JobOptions, holdout: Holdout | None = None,
) -> tuple[list[PlannedJob], list[Path]]:
    """A job per (kernel file, track), and the kernel files that match no task of the suite."""
    scan = scan_kernels(kernels_dir, suite)
    planned = []
    for s in scan.samples:
        source = s.path.read_text()
        for track in options.tracks:
            key = job_key(entry, suite.name, track, s.task.name, s.sample, source)
            meta = {"job_key": key, "sample": s.sample, "file": str(s.path)}
            job = make_job(s.task, source, track=track, options=options, meta=meta)
            planned.append(PlannedJob(key, s.task, s.sample, track, (holdout or Holdout()).apply(job)))
    return planned, list(scan.unmatched)


def execute(
    planned: Sequence[PlannedJob], *, store: ResultsStore, entry: str, suite: Suite, executor: Executor,
    holdout: Holdout | None = None, progress: bool = False, description: str = "evaluating",
) -> RunReport:
    """Run the planned jobs not yet stored, storing each result as it arrives."""
    holdout = holdout or Holdout()
    store.register_suite(suite.name, [(t.name, t.level, None) for t in suite.tasks])
    done = store.stored_keys(p.key for p in planned)
    todo = [p for p in planned if p.key not in done]
    report = RunReport(planned=len(planned), skipped=len(planned) - len(todo))
    by_key = {p.key: p for p in todo}
    lock = threading.Lock()

    handled: set[str] = set()

    def store_one(p: PlannedJob, result: EvalResult) -> None:
        handled.add(p.key)
        if result.status == Status.TASK_ERROR:  # the task's failure, not the entry's: not scored
            return
        if store.add_evaluation(p.key, entry=entry, suite=suite.name, task=p.task.name, track=p.track,
                                sample=p.sample, result=holdout.redact(result)):
            report.stored += 1
        else:  # a run on the same store (another process) stored this job while we evaluated it
            report.stored_elsewhere += 1

    ran: dict[str, EvalResult] = {}
    with _progress(progress, description, len(todo)) as (advance, note):
        def on_result(result: EvalResult) -> None:
            p = by_key.get(str(result.candidate_meta.get("job_key")))
            if p is None:
                return
            with lock:
                if p.key not in handled:
                    store_one(p, result)
                advance(result)

        for wave in _first_job_per_task(todo):
            wave = [p for p in wave if p.task.name not in report.task_errors]
            if not wave:
                continue
            for p, result in zip(wave, executor([p.job for p in wave], on_result), strict=True):
                ran[p.key] = result
                if result.status == Status.TASK_ERROR and p.task.name not in report.task_errors:
                    report.task_errors[p.task.name] = _task_error_line(result)
                    note(f"skipped {p.task.name}: {report.task_errors[p.task.name]}")
        for _ in range(len(todo) - len(ran)):
            advance(None)
    report.results = [ran[p.key] for p in todo if p.key in ran]
    report.skipped_task_error = len(todo) - len(ran)
    # A result the executor returned without reporting it (an executor without callbacks).
    for p in todo:
        if p.key in ran and p.key not in handled:
            store_one(p, ran[p.key])
    return report


def _first_job_per_task(todo: Sequence[PlannedJob]) -> tuple[list[PlannedJob], list[PlannedJob]]:
    """Two waves: one job of each task, then the rest (run only for tasks that did not fail on
    their own in the first)."""
    seen: set[str] = set()
    first, rest = [], []
    for p in todo:
        (rest if p.task.name in seen else first).append(p)
        seen.add(p.task.name)
    return first, rest


def _task_error_line(result: EvalResult) -> str:
    error = result.error
    cause = f"{error.type}: {error.message}" if error is not None else "the task failed"
    return f"task error, its jobs skipped (the task failed before any candidate code ran): {cause}"


def eval_kernels(
    suite: Suite, kernels_dir: Path, *, store: ResultsStore, entry: str, options: JobOptions,
    executor: Executor, holdout: Holdout | None = None, progress: bool = False,
) -> RunReport:
    """`agentforge leaderboard eval`: score every kernel of a KernelBench-layout folder."""
    store.ensure_entry(entry, kind="eval", meta={"kernels_dir": str(kernels_dir)})
    planned, unmatched = plan_kernels(suite, kernels_dir, entry=entry, options=options, holdout=holdout)
    report = execute(planned, store=store, entry=entry, suite=suite, executor=executor, holdout=holdout,
                     progress=progress)
    report.unmatched = unmatched
    return report


# ----- leaderboard run: optimise each task, then rank its best kernel -------------------------
@dataclass(frozen=True)
class OptimizeOutcome:
    """What the leaderboard needs from one optimisation run."""

    best_source: str | None
    status: str = "done"
    cost_usd: float = 0.0
    tokens: int = 0
    minutes: float = 0.0
    summary: dict[str, Any] = field(default_factory=dict)


Optimizer = Callable[[SuiteTask], OptimizeOutcome]


def run_suite(
    suite: Suite, *, store: ResultsStore, entry: str, optimizer: Optimizer, options: JobOptions,
    executor: Executor, holdout: Holdout | None = None, workers: int = 1, progress: bool = False,
    provider: str | None = None, model: str | None = None,
) -> RunReport:
    """`agentforge leaderboard run`: one optimisation per task (in parallel, `workers` at a
    time), then the best kernel of each is evaluated on every track with the hold-out applied.
    Tasks whose run is finished are not optimised again; their missing evaluations are redone."""
    store.ensure_entry(entry, kind="run", provider=provider, model=model)
    finished = {r.task: r for r in store.runs(entry=entry, suite=suite.name) if r.status == "done"}
    todo = [t for t in suite.tasks if t.name not in finished]
    lock = threading.Lock()

    def optimise(task: SuiteTask) -> None:
        with lock:
            store.record_run(entry=entry, suite=suite.name, task=task.name, status="running")
        try:
            outcome = optimizer(task)
        except Exception as exc:  # one task's failure must not end the suite
            error = f"{type(exc).__name__}: {exc}"
            outcome = OptimizeOutcome(None, status="failed", summary={"error": error})
        summary = {**outcome.summary, "best_source": outcome.best_source}
        with lock:
            store.record_run(entry=entry, suite=suite.name, task=task.name, status=outcome.status,
                             cost_usd=outcome.cost_usd, tokens=outcome.tokens, minutes=outcome.minutes,
                             best_code_hash=_hash(outcome.best_source), summary=summary)

    with _progress(progress, "optimising", len(todo)) as (advance, _note):
        pool = ThreadPoolExecutor(max(1, workers))
        try:
            for _ in pool.map(optimise, todo):
                advance(None)
        except BaseException:
            # Interrupted (Ctrl-C, SIGTERM): do not wait for the loops in flight; each resumes
            # from its checkpoint on the next run, and unfinished tasks are still "running".
            pool.shutdown(wait=False, cancel_futures=True)
            raise
        pool.shutdown()

    planned = []
    tasks = {t.name: t for t in suite.tasks}
    for run in store.runs(entry=entry, suite=suite.name):
        source = run.summary.get("best_source")
        if run.status != "done" or not source or run.task not in tasks:
            continue
        for track in options.tracks:
            key = job_key(entry, suite.name, track, run.task, 0, source)
            job = make_job(tasks[run.task], source, track=track, options=options,
                           meta={"job_key": key, "sample": 0})
            planned.append(PlannedJob(key, tasks[run.task], 0, track, (holdout or Holdout()).apply(job)))
    report = execute(planned, store=store, entry=entry, suite=suite, executor=executor, holdout=holdout,
                     progress=progress, description="ranking")
    _record_task_errors(store, entry, suite.name, report.task_errors)
    return report


def _record_task_errors(store: ResultsStore, entry: str, suite: str, errors: dict[str, str]) -> None:
    """A task that failed on its own when ranked has no verdict stored against the entry: its run
    keeps the reason, so `show` and the reports can say why the task has no row."""
    for run in store.runs(entry=entry, suite=suite):
        if run.task in errors:
            store.record_run(entry=entry, suite=suite, task=run.task, status=run.status, cost_usd=run.cost_usd,
                             tokens=run.tokens, minutes=run.minutes, best_code_hash=run.best_code_hash,
                             summary={**run.summary, "rank_error": errors[run.task]})


def _hash(source: str | None) -> str | None:
    return code_hash(source) if source else None


@contextmanager
def _progress(enabled: bool, description: str, total: int
              ) -> Iterator[tuple[Callable[[EvalResult | None], None], Callable[[str], None]]]:
    """A rich progress bar (when enabled), the function that advances it, and one that prints a
    line above it (a skipped task)."""
    if not enabled or total == 0:
        yield (lambda _result: None), (lambda _line: None)
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
               TextColumn("{task.fields[last]}"))
    with Progress(*columns, transient=False) as bar:
        handle = bar.add_task(description, total=total, last="")

        def advance(result: EvalResult | None) -> None:
            last = f"{result.task_name}: {result.status.value}" if result is not None else ""
            bar.update(handle, advance=1, last=last)

        def note(line: str) -> None:
            bar.console.print(line, markup=False, highlight=False, soft_wrap=True)

        yield advance, note
