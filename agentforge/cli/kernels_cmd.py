"""`agentforge kernels`: the shipped reference kernels and their records.

`list` shows the recorded figures, `show` one kernel's source and record, `verify` re-runs the
hardened evaluator on this machine and prints recorded and measured figures side by side. On a
machine without a GPU, CUDA kernels get nvcc's compile-only verdict and CPU kernels are measured.
`verify` never rewrites a record: `benchmarks/reference_kernels.py` does that.
"""

from __future__ import annotations

from typing import Any

import typer

from agentforge.cli.common import console, err_console

GPU_HELP = "kernel folder: h100, h200, cpu, ... (default: all)"
TASK_HELP = "task: level/name, or a bare name or substring"
# What `list` shows (the README table has these and a few more).
LIST_COLUMNS = ("gpu", "task", "state", "vs eager", "vs compile", "time", "resources")


def register(app: typer.Typer) -> None:
    kernels_app = typer.Typer(help="The shipped reference kernels: list, show, verify.", no_args_is_help=True)
    kernels_app.command("list")(list_kernels_cmd)
    kernels_app.command("show")(show_kernel)
    kernels_app.command("verify")(verify_kernels)
    app.add_typer(kernels_app, name="kernels")


def list_kernels_cmd(
    gpu: str | None = typer.Option(None, "--gpu", help=GPU_HELP),
    task: str | None = typer.Option(None, "--task", help=TASK_HELP),
) -> None:
    """Every shipped kernel with its recorded figures ("not measured" where it awaits a GPU)."""
    from rich.table import Table

    from agentforge.kernel_library import select_kernels, summary_row

    kernels = select_kernels(gpu, task)
    if not kernels:
        err_console.print(f"no shipped kernels match gpu={gpu or 'any'} task={task or 'any'}")
        raise typer.Exit(1)
    table = Table(title=f"{len(kernels)} reference kernels")
    for column in LIST_COLUMNS:
        table.add_column(column, justify="right" if column in ("vs eager", "vs compile", "time") else "left",
                         no_wrap=column in ("task", "vs eager", "vs compile"))
    for kernel in kernels:
        row = summary_row(kernel)
        table.add_row(*(row[c] for c in LIST_COLUMNS))
    console.print(table)


def show_kernel(
    task: str = typer.Argument(..., metavar="TASK", help=TASK_HELP),
    gpu: str | None = typer.Option(None, "--gpu", help=GPU_HELP),
    source: bool = typer.Option(True, "--source/--no-source", help="print the kernel's source"),
) -> None:
    """A kernel's source, tunables and record (per shape variant)."""
    from rich.syntax import Syntax

    from agentforge.kernel_library import select_kernels

    kernels = select_kernels(gpu, task)
    if not kernels:
        err_console.print(f"no shipped kernel matches {task!r} (gpu {gpu or 'any'}); see `agentforge kernels list`")
        raise typer.Exit(1)
    for kernel in kernels:
        console.rule(f"{kernel.gpu}/{kernel.task_name} [{kernel.backend}]")
        console.print(f"folder: {kernel.path}")
        if kernel.tunables:
            console.print("tunables: " + ", ".join(f"{k} in {v}" for k, v in kernel.tunables.items()))
        if source:
            console.print(Syntax(kernel.source, "python", line_numbers=False))
        _print_record(kernel)


def _print_record(kernel) -> None:
    from rich.table import Table

    record = kernel.record
    if record is None:
        console.print("[yellow]no record[/yellow]: run benchmarks/reference_kernels.py on a matching device")
        return
    summary = record.get("summary", {})
    machine = record.get("machine", {})
    console.print(f"record of {record.get('date')} on {machine.get('device')} ({record.get('track')} track), "
                  f"kernel hash {record.get('kernel_hash')}")
    if not record.get("measured"):
        console.print(f"[yellow]not measured[/yellow]: {summary.get('note', '')}")
        console.print(f"compiled: {summary.get('compiled')} for {summary.get('arch')}, "
                      f"status {summary.get('status')}")
        table = Table(title="ptxas resources")
        for column in ("kernel", "registers", "shared B", "stack B", "spill st/ld B"):
            table.add_column(column)
        for r in summary.get("resources", []):
            table.add_row(r["name"][:60], str(r["registers"]), str(r["shared_bytes"]), str(r["stack_bytes"]),
                          f"{r['spill_store_bytes']}/{r['spill_load_bytes']}")
        console.print(table)
        return
    table = Table(title=f"accepted: {summary.get('accepted')}")
    for column in ("shape", "status", "candidate us", "eager us", "compile us", "vs eager", "vs compile", "SoL"):
        table.add_column(column)
    for shape, s in summary.get("per_shape", {}).items():
        table.add_row(shape, s["status"], _us(s["candidate_us"]), _us(s["eager_us"]), _us(s["compile_us"]),
                      _x(s["speedup"]), _x(s["speedup_vs_compile"]), _pct(s["sol_fraction"]))
    console.print(table)


def verify_kernels(
    task: str | None = typer.Option(None, "--task", help=TASK_HELP),
    gpu: str | None = typer.Option(None, "--gpu", help=GPU_HELP),
    device: str = typer.Option("auto", "--device", help="cpu, cuda, cuda:N, or auto (cuda if visible)"),
    baselines: str = typer.Option("eager,compile", "--baselines", help="comma-separated: eager, compile"),
    quick: bool = typer.Option(False, "--quick", help="short timing (a few repetitions per subject)"),
    shapes: str = typer.Option("", "--shapes", help="comma-separated shape variants (default: every variant)"),
    config: str | None = typer.Option(None, "--config", help="settings file (TOML)"),
) -> None:
    """Re-run the hardened evaluator on this machine; print recorded vs measured side by side."""
    from rich.table import Table

    from agentforge.cli.common import build_settings
    from agentforge.kernel_library import COMPILE_ONLY, evaluate_kernel, kernel_task, select_kernels
    from agentforge.sandbox import from_settings

    settings = build_settings(config)
    sandbox = from_settings(settings.sandbox, settings.cache_dir)
    kernels = select_kernels(gpu, task)
    if not kernels:
        err_console.print(f"no shipped kernels match gpu={gpu or 'any'} task={task or 'any'}")
        raise typer.Exit(1)
    options = _options(device, baselines, quick, shapes)
    tasks_root = _tasks_root(settings)
    table = Table(title=f"verify on {options.device}")
    for column in ("kernel", "shape", "recorded", "measured now", "rec. vs eager", "now vs eager",
                   "rec. vs compile", "now vs compile"):
        table.add_column(column)
    failures = 0
    for kernel in kernels:
        console.print(f"evaluating {kernel.gpu}/{kernel.task_name} ...")
        results = evaluate_kernel(kernel, kernel_task(kernel, tasks_root), options, sandbox)
        recorded = (kernel.record or {}).get("summary", {})
        for shape, result in results.items():
            ok = result.accepted or (shape == COMPILE_ONLY and result.compiled)
            failures += not ok
            rec_shape = recorded.get("per_shape", {}).get(shape, {})
            rec_text = _recorded_text(kernel.record, rec_shape)
            now_text = result.status.value + (" (compiled)" if shape == COMPILE_ONLY and result.compiled else "")
            if result.accepted:
                now_text = (f"accepted, {result.candidate_us:.1f} us" if result.candidate_us is not None else
                            f"{_untimed_text(result)}, compiled for {result.compile.arch}")
            table.add_row(f"{kernel.gpu}/{kernel.task_name}", shape, rec_text, now_text,
                          _x(rec_shape.get("speedup")), _x(result.speedup),
                          _x(rec_shape.get("speedup_vs_compile")), _x(result.speedup_vs_compile))
            if not ok and result.error is not None:
                err_console.print(f"  {shape}: {result.error.type}: {result.error.message[:300]}")
    console.print(table)
    if failures:
        err_console.print(f"[red]{failures} verdict(s) not accepted[/red]")
        raise typer.Exit(1)


def _options(device: str, baselines: str, quick: bool, shapes: str = ""):
    import torch

    from agentforge.evaluator.result import TimingConfig
    from agentforge.kernel_library import MeasureOptions

    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    chosen = tuple(b.strip() for b in baselines.split(",") if b.strip())
    unknown = [b for b in chosen if b not in ("eager", "compile")]
    if unknown:
        err_console.print(f"unknown baselines {unknown}; choose from eager, compile")
        raise typer.Exit(2)
    timing = TimingConfig(warmup=2, min_reps=5, max_reps=20, time_cap_s=1.0) if quick else None
    chosen_shapes = tuple(s.strip() for s in shapes.split(",") if s.strip())
    return MeasureOptions(device=device, baselines=chosen, timing=timing, shapes=chosen_shapes)


def _tasks_root(settings):
    from pathlib import Path

    return Path(settings.tasks_root) if settings.tasks_root else None


def _untimed_text(result: Any) -> str:
    """Where an untimed kernel was found correct (Triton's interpreter or the CUDA emulation), on
    the declared shapes, with the count of hidden shapes the evaluation added."""
    where = "the CPU emulation" if getattr(result, "executed_on", "") == "cpu-emulation" else "the interpreter"
    shapes = {r.shape for r in result.correctness}
    hidden = {s for s in shapes if s.startswith("hidden-")}
    text = f"correct in {where} on {', '.join(sorted(shapes - hidden))}"
    return text + (f" (+{len(hidden)} hidden)" if hidden else "")


def _recorded_text(record: dict | None, shape_summary: dict) -> str:
    if record is None:
        return "no record"
    if not record.get("measured"):
        return "not measured"
    cand = shape_summary.get("candidate_us")
    state = "accepted" if shape_summary.get("accepted") else shape_summary.get("status", "?")
    return f"{state}, {cand['median']:.1f} us" if cand else state


def _us(stats: dict | None) -> str:
    return "" if not stats else f"{stats['median']:.1f} ± {stats['stdev']:.1f}"


def _x(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}x"


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:.0f}%"
