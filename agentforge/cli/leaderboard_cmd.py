"""`agentforge leaderboard`: rank entries on suites (run, eval, show, report)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer

from agentforge.cli.common import build_settings, check_sandbox, console, err_console, say_error
from agentforge.settings import describe

SUITE_HELP = ("which tasks: tasks (all of them), level1, tasks:level1 (add ,level2 for more), "
              "kernelbench:DIR (a KernelBench checkout; add :level1 for one level), or a .toml file listing tasks")
HOLDOUT_HELP = ("TOML file with the secret seed and shapes of a ranked run (keep it where candidates "
                "cannot read it)")
TRACK_HELP = "evaluation track(s): hardened, kernelbench (repeat the option for both; default both)"
RAY_HELP = "run evaluations on Ray: 'auto' joins the running cluster, or give an address; 'local' starts one"
CONFIG_HELP = "settings file (default: agentforge.toml in this folder)"
URL_HELP = "SQLAlchemy URL of the results store (default: the SQLite file agentforge.db under results/)"
ISOLATION_HELP = ("sandbox isolation: auto (bwrap, else unshare; refuses as root without either), bwrap, "
                  "unshare, or none (no filesystem or network isolation: only when you mean it)")
AGAIN_HINT = "run the same command again (stored evaluations are kept and skipped)"
# The same meaning and help text as on `agentforge optimize` (cli/optimize_cmd.py).
SHAPE_HELP = "shape variant(s) to check (default: all); the first is timed"
QUICK_HELP = ("fewer timed repetitions (max 40, 1 s per subject) and torch.compile's default mode only "
              "(max-autotune takes minutes per evaluation on a GPU): for demos; re-measure the result with "
              "`agentforge eval`")
EXIT_ALL_FAILED = 2  # `leaderboard run`: not one task of the suite got an accepted kernel


def register(app: typer.Typer) -> None:
    board = typer.Typer(help="Rank entries on suites: run, eval, show, report.", no_args_is_help=True)
    board.command("run")(run_cmd)
    board.command("eval")(eval_cmd)
    board.command("show")(show_cmd)
    board.command("report")(report_cmd)
    app.add_typer(board, name="leaderboard")


def run_cmd(
    suite: str = typer.Option(..., "--suite", help=SUITE_HELP),
    provider: str | None = typer.Option(None, "--provider", help="LLM provider"),
    model: str | None = typer.Option(None, "--model", help="coder model"),
    name: str | None = typer.Option(None, "--name", help="entry name (default: provider/model)"),
    workers: int | None = typer.Option(None, "--workers", help="tasks optimised at once"),
    ray: str | None = typer.Option(None, "--ray", help=RAY_HELP),
    track: list[str] | None = typer.Option(None, "--track", help=TRACK_HELP, metavar="TRACK"),
    holdout: Path | None = typer.Option(None, "--holdout", help=HOLDOUT_HELP),
    compile_baseline: bool = typer.Option(True, "--compile-baseline/--no-compile-baseline", show_default=False,
                                          help="also time torch.compile, in the loops and when ranking "
                                               "(slow to build; on by default)"),
    max_rounds: int | None = typer.Option(None, "--max-rounds", help=describe("agent.max_rounds")),
    backend: str | None = typer.Option(None, "--backend", help=describe("eval.backend")),
    shape: list[str] | None = typer.Option(None, "--shape", help=SHAPE_HELP, metavar="SHAPE"),
    quick: bool = typer.Option(False, "--quick", help=QUICK_HELP),
    out: str | None = typer.Option(None, "--out", help=describe("runs_dir")),
    results_url: str | None = typer.Option(None, "--results-url", help=URL_HELP),
    isolation: str | None = typer.Option(None, "--isolation", help=ISOLATION_HELP),
    config: str | None = typer.Option(None, "--config", help=CONFIG_HELP),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="progress bars"),
) -> None:
    """One optimisation run per task of SUITE, in parallel; each task's best kernel is then
    ranked on the tracks. Finished tasks are skipped when the same run is started again. Exits 2
    when no task got an accepted kernel, saying why for each."""
    from agentforge.cli import errors
    from agentforge.leaderboard.runner import run_suite

    settings = build_settings(config, results_url=results_url, provider__name=provider, provider__model=model,
                              sandbox__workers=workers, sandbox__ray_address=_ray_address(ray),
                              sandbox__isolation=isolation, agent__max_rounds=max_rounds, eval__backend=backend,
                              runs_dir=out)
    errors.set_resume_hint(AGAIN_HINT.replace("stored evaluations", "finished tasks and stored evaluations"))
    entry = name or f"{settings.provider.name}/{settings.provider.model or 'default'}"
    suite_obj, held, options, store, executor = _prepare(settings, suite, holdout, track, ray,
                                                         compile_baseline=compile_baseline,
                                                         shapes=tuple(shape or ()), quick=quick)
    optimizer = _optimizer(settings, entry, suite_obj.name, options,
                           baselines=("eager", "compile") if compile_baseline else ("eager",),
                           max_rounds=max_rounds)
    with store:
        report = run_suite(suite_obj, store=store, entry=entry, optimizer=optimizer, options=options,
                           executor=executor, holdout=held, workers=settings.sandbox.workers, progress=progress,
                           provider=settings.provider.name, model=settings.provider.model)
        _summary(report, entry)
        _print_standings(store, suite_obj.name, None, entry=entry, tracks=options.tracks)
        _exit_if_all_failed(store, entry, suite_obj.name, options.tracks)


def eval_cmd(
    kernels_dir: Path = typer.Argument(..., help="kernels laid out as KernelBench's runs"),
    suite: str = typer.Option(..., "--suite", help=SUITE_HELP),
    name: str | None = typer.Option(None, "--name", help="entry name (default: the folder's name)"),
    workers: int | None = typer.Option(None, "--workers", help="evaluations at once (one per GPU on CUDA)"),
    ray: str | None = typer.Option(None, "--ray", help=RAY_HELP),
    track: list[str] | None = typer.Option(None, "--track", help=TRACK_HELP),
    holdout: Path | None = typer.Option(None, "--holdout", help=HOLDOUT_HELP),
    backend: str | None = typer.Option(None, "--backend", help="cpu, cuda, triton, or auto (from each source)"),
    device: str | None = typer.Option(None, "--device", help="cpu, cuda, cuda:N, or auto"),
    compile_baseline: bool = typer.Option(True, "--compile-baseline/--no-compile-baseline", show_default=False,
                                          help="also time torch.compile (slow to build; needed for vs-compile; "
                                               "on by default)"),
    results_url: str | None = typer.Option(None, "--results-url", help=URL_HELP),
    isolation: str | None = typer.Option(None, "--isolation", help=ISOLATION_HELP),
    config: str | None = typer.Option(None, "--config", help=CONFIG_HELP),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="progress bars"),
) -> None:
    """Score kernels produced elsewhere (level_L_problem_P_sample_S_kernel.py, or
    levelL/PROBLEM/sample_S/kernel.py) on the hardened and KernelBench-compatible tracks."""
    from agentforge.cli import errors
    from agentforge.leaderboard.runner import eval_kernels

    settings = build_settings(config, results_url=results_url, sandbox__workers=workers,
                              sandbox__ray_address=_ray_address(ray), eval__backend=backend, eval__device=device,
                              sandbox__isolation=isolation)
    errors.set_resume_hint(AGAIN_HINT)
    entry = name or kernels_dir.resolve().name
    suite_obj, held, options, store, executor = _prepare(settings, suite, holdout, track, ray,
                                                         compile_baseline=compile_baseline)
    with store:
        try:
            report = eval_kernels(suite_obj, kernels_dir, store=store, entry=entry, options=options,
                                  executor=executor, holdout=held, progress=progress)
        except FileNotFoundError as exc:
            say_error(str(exc))
            raise typer.Exit(2) from exc
        _summary(report, entry)
        if report.planned == 0:
            say_error(f"no kernel file in {kernels_dir} matches a task of suite {suite_obj.name} (expected "
                      "level_L_problem_P_sample_S_kernel.py or levelL/PROBLEM/sample_S/kernel.py)")
            raise typer.Exit(2)
        _print_standings(store, suite_obj.name, None)


def show_cmd(
    suite: str | None = typer.Option(None, "--suite", help="only this suite (its name as stored)"),
    track: str | None = typer.Option(None, "--track", help="only this track"),
    results_url: str | None = typer.Option(None, "--results-url", help=URL_HELP),
    config: str | None = typer.Option(None, "--config", help=CONFIG_HELP),
) -> None:
    """The standings, one sorted table per suite and track."""
    from agentforge.store import ResultsStore

    _check_track(track)
    settings = build_settings(config, results_url=results_url)
    with ResultsStore(settings.results_url) as store:
        chosen = _stored_suite(store, suite, settings)
        if not _print_standings(store, chosen, track):
            known = store.suites()
            if chosen is not None and known and chosen not in known:
                say_error(f"no results for suite {chosen!r}; the store holds: {', '.join(known)}")
            else:
                err_console.print("no leaderboard results yet (run `agentforge leaderboard eval` or `run`)")
            raise typer.Exit(1)


def report_cmd(
    out: Path = typer.Option(Path("results/leaderboard"), "--out", help="folder for the report and plots"),
    fmt: str = typer.Option("md", "--format", help="md or html"),
    suite: str | None = typer.Option(None, "--suite", help="only this suite"),
    track: str | None = typer.Option(None, "--track", help="only this track"),
    results_url: str | None = typer.Option(None, "--results-url", help=URL_HELP),
    config: str | None = typer.Option(None, "--config", help=CONFIG_HELP),
) -> None:
    """Write a Markdown or HTML report with plots (speedups per level, fast_p curve, per-task bars)."""
    from agentforge.leaderboard.board import standings
    from agentforge.leaderboard.report import FORMATS, write_report
    from agentforge.store import ResultsStore

    if fmt not in FORMATS:
        say_error(f"--format must be one of {', '.join(FORMATS)}")
        raise typer.Exit(2)
    _check_track(track)
    settings = build_settings(config, results_url=results_url)
    with ResultsStore(settings.results_url) as store:
        found = standings(store, suite=_stored_suite(store, suite, settings), track=track)
    if not found:
        err_console.print("no leaderboard results to report")
        raise typer.Exit(1)
    console.print(f"wrote {write_report(found, out, fmt)}")


# ----- shared -----------------------------------------------------------------------------
def _check_track(track: str | None) -> None:
    from agentforge.evaluator.result import TRACKS

    if track is not None and track not in TRACKS:
        say_error(f"unknown track {track!r}; choose one of: {', '.join(TRACKS)}")
        raise typer.Exit(2)


def _stored_suite(store: Any, spec: str | None, settings: Any) -> str | None:
    """The stored name for a suite given as stored (`tasks:level1`) or as a spec (`level1`)."""
    if spec is None or spec in store.suites():
        return spec
    from agentforge.leaderboard.suites import SuiteError, load_suite
    from agentforge.task import default_tasks_root

    try:
        return load_suite(spec, Path(settings.tasks_root) if settings.tasks_root else default_tasks_root()).name
    except SuiteError:
        return spec


def _ray_address(ray: str | None) -> str | None:
    return None if ray in (None, "local") else ray


def _prepare(
    settings: Any, suite: str, holdout: Path | None, tracks: list[str] | None, ray: str | None,
    *, compile_baseline: bool = True, shapes: tuple[str, ...] = (), quick: bool = False,
):
    """Suite, hold-out, job options, store and executor from settings; bad input exits 2.
    `shapes` and `quick` as `--shape` and `--quick` ask."""
    from agentforge.evaluator.result import TRACKS, Measure, TimingConfig
    from agentforge.leaderboard.executors import make_executor
    from agentforge.leaderboard.runner import (
        CPU_TRACK_NOTE,
        JobOptions,
        cpu_shape_deriver,
        default_tracks,
        unknown_shapes,
    )
    from agentforge.leaderboard.suites import SuiteError, load_holdout, load_suite
    from agentforge.sandbox.config import from_settings
    from agentforge.store import ResultsStore
    from agentforge.task import default_tasks_root

    if ray is None and settings.sandbox.kind != "ray":
        check_sandbox(settings)
    unknown = [t for t in tracks or () if t not in TRACKS]
    if unknown:
        say_error(f"unknown track(s) {', '.join(unknown)}; choose from: {', '.join(TRACKS)}")
        raise typer.Exit(2)
    try:
        suite_obj = load_suite(suite, Path(settings.tasks_root) if settings.tasks_root else default_tasks_root())
        held = load_holdout(holdout)
    except SuiteError as exc:
        say_error(str(exc))
        raise typer.Exit(2) from exc
    wrong_shape = unknown_shapes(suite_obj, shapes)
    if wrong_shape:
        say_error(wrong_shape)
        raise typer.Exit(2)
    device = settings.eval.device
    if device == "auto":
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    backend = "detect" if settings.eval.backend == "auto" else settings.eval.backend
    chosen = tuple(tracks) if tracks else default_tracks(suite_obj, on_cpu=device == "cpu" or backend == "cpu")
    if not tracks and chosen != TRACKS:
        err_console.print(CPU_TRACK_NOTE, style="yellow", markup=False, highlight=False, soft_wrap=True)
    from agentforge.cli.optimize_cmd import QUICK_COMPILE_MODES, QUICK_TIMING

    measure = None
    if not compile_baseline:
        measure = Measure(baselines=("eager",), compile_modes=())
    elif quick:
        measure = Measure(compile_modes=QUICK_COMPILE_MODES)
    sandbox = from_settings(settings.sandbox, settings.cache_dir)
    # on the CPU a KernelBench file is checked and timed on a variant derived from its sizes, as by `eval`
    derive = cpu_shape_deriver(sandbox, _say_once()) if device == "cpu" else None
    options = JobOptions(backend=backend, device=device, tracks=chosen,
                         cache_dir=str(Path(settings.cache_dir).expanduser()), measure=measure, shapes=shapes,
                         timing=TimingConfig(**QUICK_TIMING) if quick else None, derive=derive)
    kind = "ray" if ray is not None or settings.sandbox.kind == "ray" else "process"
    executor = make_executor(kind, sandbox, workers=settings.sandbox.workers,
                             ray_address=settings.sandbox.ray_address)
    return suite_obj, held, options, ResultsStore(settings.results_url), executor


def _say_once() -> Callable[[str], None]:
    """A note to stderr, each text once (a task's derived shape, whatever number of jobs it has)."""
    said: set[str] = set()

    def say(text: str) -> None:
        if text not in said:
            said.add(text)
            err_console.print(text, style="yellow", markup=False, highlight=False, soft_wrap=True)

    return say


def _optimizer(settings: Any, entry: str, suite: str, options: Any, baselines: tuple[str, ...] = ("eager", "compile"),
               max_rounds: int | None = None):
    """One optimisation run per task through the agent loop (imported only when used). Each task
    gets a fixed run id, so a leaderboard run that was interrupted resumes the task's loop from
    its last checkpoint instead of starting it again (with `max_rounds`, when given, as its new
    budget). All loops evaluate through one GPU gate, so parallel loops never time on the same GPU
    at once; they check and time the shapes the ranking will (`options.shapes`, else the backend's)."""
    import re
    import time

    from agentforge.leaderboard.gpu_gate import DeviceGate, gated_evaluate
    from agentforge.leaderboard.runner import OptimizeOutcome

    modes = options.measure.compile_modes if options.measure is not None else ()
    evaluate = gated_evaluate(settings, DeviceGate(), options.device, baselines=baselines, shapes=options.shapes,
                              timing=options.timing, compile_modes=modes)
    from agentforge.agent.spec import RunSpec

    spec = RunSpec(baselines=baselines, shapes=tuple(options.shapes or ()), timing=options.timing,
                   compile_modes=tuple(modes) or None)

    def optimise(task: Any) -> OptimizeOutcome:
        from agentforge.agent.run import optimize

        run_id = re.sub(r"[^A-Za-z0-9_.-]+", "_", f"leaderboard-{entry}-{suite}-{task.name}")
        started = time.monotonic()
        if (Path(settings.runs_dir).expanduser() / run_id / "run.json").is_file():
            limits = {"max_rounds": max_rounds} if max_rounds is not None else None
            summary = optimize(None, settings, spec, resume=run_id, limits=limits, evaluate=evaluate)
        else:
            summary = optimize(str(task.path), settings, spec, run_id=run_id, evaluate=evaluate)
        return outcome_from_summary(summary, minutes=(time.monotonic() - started) / 60.0)

    return optimise


def outcome_from_summary(summary: Any, minutes: float):
    """The leaderboard's view of the agent's RunSummary: its best kernel's source and its costs."""
    from agentforge.leaderboard.runner import OptimizeOutcome

    usage = summary.usage or {}
    kernel = (summary.outputs or {}).get("best_kernel")
    return OptimizeOutcome(
        best_source=Path(kernel).read_text() if kernel and Path(kernel).is_file() else None,
        status="done" if summary.status == "finished" else summary.status,
        cost_usd=float(usage.get("cost_usd", 0.0)),
        tokens=int(usage.get("input_tokens", 0)) + int(usage.get("output_tokens", 0)),
        minutes=minutes,
        summary={"run_id": summary.run_id, "run_dir": summary.run_dir, "rounds": summary.rounds,
                 "stop_reason": summary.stop_reason, "provider": summary.provider},
    )


def _summary(report: Any, entry: str) -> None:
    from rich.markup import escape

    line = (f"[bold]{escape(entry)}[/bold]: {report.planned} jobs, {report.skipped} already stored, "
            f"{report.stored} stored now")
    if report.stored_elsewhere:
        line += f", {report.stored_elsewhere} evaluated but stored first by another run on the same store"
    console.print(line, soft_wrap=True)
    for path in report.unmatched:
        err_console.print(f"[yellow]skipped[/yellow] {path}: no such problem in the suite", soft_wrap=True)


def _print_standings(store: Any, suite: str | None, track: str | None, *, entry: str | None = None,
                     tracks: tuple[str, ...] = ()) -> bool:
    """Each (suite, track)'s standings, then each entry's per-task table (status, speedup, why);
    with `entry`, only its per-task tables, on `tracks` also where none of its verdicts was stored."""
    from rich.table import Table

    from agentforge.leaderboard.board import standing, standings
    from agentforge.leaderboard.report import COLUMNS, table_rows

    found = standings(store, suite=suite, track=track)
    groups: dict[tuple[str, str], list] = {}
    for s in found:
        groups.setdefault((s.suite, s.track), []).append(s)
    for (suite_name, track_name), group in groups.items():
        n = group[0].metrics.n_tasks
        table = Table(title=f"{suite_name} — {track_name} ({n} tasks)")
        for key, title in COLUMNS:
            table.add_column(title, justify="left" if key == "entry" else "right", no_wrap=key == "entry")
        for row in table_rows(group):
            table.add_row(*row)
        console.print(table)
    per_task = [s for s in found if entry is None or s.entry == entry]
    if entry is not None and suite is not None:
        shown = {s.track for s in per_task}
        per_task += [standing(store, entry, suite, t) for t in tracks if t not in shown]
    for s in per_task:
        _print_task_table(s)
    return bool(found)


def _print_task_table(s: Any) -> None:
    from rich.table import Table

    from agentforge.leaderboard.report import TASK_COLUMNS, task_table_rows

    table = Table(title=f"{s.entry} on {s.suite} — {s.track}: per task")
    for key, title in TASK_COLUMNS:
        table.add_column(title, justify="right" if key == "speedup" else "left", no_wrap=key != "reason",
                         overflow="fold")
    for row in task_table_rows(s.rows):
        table.add_row(*row)
    console.print(table)


def _exit_if_all_failed(store: Any, entry: str, suite: str, tracks: tuple[str, ...]) -> None:
    """Exit 2 when no task of the suite got an accepted kernel on any track, with each task's
    reason (on the first track) on its own line."""
    from agentforge.leaderboard.board import standing

    boards = [standing(store, entry, suite, t) for t in tracks]
    if not boards or any(row.accepted for b in boards for row in b.rows):
        return
    say_error(f"no task of suite {suite} got an accepted kernel ({entry}); why, per task:")
    for row in boards[0].rows:
        err_console.print(f"  {row.task}: {row.status}: {row.reason}", markup=False, highlight=False,
                          soft_wrap=True)
    raise typer.Exit(EXIT_ALL_FAILED)
