"""`agentforge tasks`: list, show, run and audit problem files (ours or a KernelBench checkout)."""

from __future__ import annotations

import contextlib
from pathlib import Path

import typer
from rich.markup import escape

from agentforge.cli.common import console, err_console

ROOT_HELP = "Folder of problem files: this project's tasks/ by default, or a KernelBench checkout."


def register(app: typer.Typer) -> None:
    tasks_app = typer.Typer(help="List, show, run and audit tasks.", no_args_is_help=True)
    tasks_app.command("list")(list_tasks)
    tasks_app.command("show")(show_task)
    tasks_app.command("run")(run_task)
    tasks_app.command("audit")(audit_tasks)
    app.add_typer(tasks_app, name="tasks")


def list_tasks(root: Path | None = typer.Option(None, "--root", help=ROOT_HELP)) -> None:
    """Load every problem file and build its Model on the meta device; a file that fails is
    reported on one line and the listing goes on (exit status 1 if any failed). Problems that
    need a model hub (KernelBench's level 4) are skipped, said in one line, without being run."""
    from rich.table import Table

    from agentforge.task import TaskLoadError, discover, load_task

    paths = discover(root)
    if not paths:
        err_console.print(f"[red]no problem files[/red] under {root or 'tasks/'} (expected level*/NAME.py)")
        raise typer.Exit(1)
    paths, hub = _without_model_hub(paths)
    table = Table(title=f"{len(paths)} problem files")
    for column in ("task", "dtype", "shapes", "tags", "GFLOP", "MB moved", "params"):
        table.add_column(column, justify="right" if column in ("GFLOP", "MB moved", "params") else "left")
    failures = 0
    for path in paths:
        try:
            task = load_task(path)
            model = task.instantiate_on_meta()
            flops, moved = task.flops(), task.bytes_moved()
        except TaskLoadError as exc:
            failures += 1
            err_console.print(f"[red]error[/red] {escape(exc.where)}: {escape(exc.problem)}", soft_wrap=True)
            continue
        params = sum(p.numel() for p in model.parameters())
        table.add_row(escape(task.name), task.dtype_name, ",".join(task.shapes), ",".join(task.tags),
                      _num(flops, 1e9), _num(moved, 1e6), f"{params:,}")
    console.print(table)
    skipped = f", {len(hub)} skipped (model hub)" if hub else ""
    console.print(f"{len(paths) + len(hub)} files, {len(paths) - failures} loaded, {failures} failed{skipped}")
    if failures:
        raise typer.Exit(1)


def show_task(
    task_ref: str = typer.Argument(..., metavar="TASK", help="level/name or a path."),
    root: Path | None = typer.Option(None, "--root", help=ROOT_HELP),
) -> None:
    """The task's source, shapes, dtype, tolerance, tags, and FLOPs/bytes per shape."""
    from rich.syntax import Syntax
    from rich.table import Table

    task = _load_or_exit(task_ref, root)
    console.print(Syntax(task.source, "python", line_numbers=True))
    tol = task.tolerance
    console.print(f"[bold]{task.name}[/bold]  dtype {task.dtype_name}  atol {tol.atol:g} rtol {tol.rtol:g}"
                  f"  tags {', '.join(task.tags) or '-'}")
    if task.allowed_torch_ops:
        console.print(f"allowed torch ops: {', '.join(task.allowed_torch_ops)}")
    table = Table(title="shapes")
    for column in ("shape", "sizes", "GFLOP", "MB moved", "FLOP/byte"):
        table.add_column(column)
    for shape in task.shapes:
        flops, moved = task.flops(shape), task.bytes_moved(shape)
        intensity = f"{flops / moved:.1f}" if flops is not None and moved else "-"
        sizes = ", ".join(f"{k}={v}" for k, v in task.sizes(shape).items())
        table.add_row(shape, sizes, _num(flops, 1e9), _num(moved, 1e6), intensity)
    console.print(table)


def run_task(
    task_ref: str = typer.Argument(..., metavar="TASK", help="level/name or a path."),
    device: str = typer.Option("cpu", "--device", help="cpu or cuda."),
    shape: str = typer.Option("default", "--shape", help="Shape variant (see `tasks show`)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the inputs and weights."),
    repeats: int = typer.Option(5, "--repeats", min=1, help="Timed calls after one warm-up."),
    root: Path | None = typer.Option(None, "--root", help=ROOT_HELP),
) -> None:
    """Run the reference once per repeat and print its output shapes and median time.

    A quick look, not a benchmark: the evaluator's timing flushes caches and interleaves
    candidates; this does neither."""
    import statistics
    import time

    import torch

    from agentforge.task import TaskLoadError, flatten_tensors

    if device not in ("cpu", "cuda"):
        err_console.print(f"[red]--device[/red] must be cpu or cuda, not {device!r}")
        raise typer.Exit(2)
    if device == "cuda" and not torch.cuda.is_available():
        err_console.print("[red]--device cuda[/red]: torch sees no CUDA device")
        raise typer.Exit(2)
    task = _load_or_exit(task_ref, root)
    if shape not in task.shapes:
        err_console.print(f"[red]no shape[/red] {escape(repr(shape))}; {task.name} has {', '.join(task.shapes)}")
        raise typer.Exit(2)
    try:
        model = task.make_model(seed, shape, device=device)
        inputs = task.make_inputs(seed, shape, device=device)
    except TaskLoadError as exc:
        err_console.print(f"[red]error[/red] {escape(str(exc))}")
        raise typer.Exit(1) from exc

    def call() -> object:
        with torch.no_grad():
            out = model(*inputs)
        if device == "cuda":
            torch.cuda.synchronize()
        return out

    out = call()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    for i, tensor in enumerate(flatten_tensors(out)):
        dtype = str(tensor.dtype).removeprefix("torch.")
        console.print(f"output {i}: shape {tuple(tensor.shape)} dtype {dtype}", markup=False)
    median_ms = statistics.median(times) * 1e3
    console.print(f"{task.name} [{shape}] on {device}: median {median_ms:.3f} ms over {repeats} runs",
                  markup=False)


def audit_tasks(
    root: Path | None = typer.Option(None, "--root", help=ROOT_HELP),
    task_ref: str | None = typer.Option(None, "--task", help="Audit one task (level/name or path)."),
    budget: int | None = typer.Option(None, "--budget", help="Skip tasks above this many elements."),
) -> None:
    """Flag degenerate tasks on the CPU (constant or tiny output, an input or parameter that does
    not matter, NaN/Inf); exit status 1 if any task is flagged."""
    from rich.table import Table

    from agentforge.audit import DEFAULT_NUMEL_BUDGET, audit_paths
    from agentforge.task import TaskLoadError, discover, resolve_task_path

    try:
        paths = [resolve_task_path(task_ref, root)] if task_ref else discover(root)
    except TaskLoadError as exc:
        err_console.print(f"[red]error[/red] {escape(str(exc))}")
        raise typer.Exit(2) from exc
    if not task_ref:
        paths, _ = _without_model_hub(paths)
    table = Table(title=f"audit of {len(paths)} tasks")
    for column in ("task", "shape", "status", "findings", "s"):
        table.add_column(column, overflow="fold")
    counts = {"ok": 0, "flagged": 0, "skipped": 0}
    colour = {"ok": "green", "flagged": "red", "skipped": "yellow"}
    # A spinner on a terminal; one progress line per task on stderr otherwise (a log, a CI job).
    progress = console.status("auditing...") if err_console.is_terminal else contextlib.nullcontext()
    with progress as status:
        for n, report in enumerate(audit_paths(paths, numel_budget=budget or DEFAULT_NUMEL_BUDGET), 1):
            if status is not None:
                status.update(f"audited {escape(report.task)} ({n}/{len(paths)})")
            else:
                err_console.print(f"{n}/{len(paths)} {report.status} {report.task}", markup=False)
            counts[report.status] += 1
            notes = [*_condensed(report.findings), report.skipped or "", report.note or ""]
            detail = "; ".join(n for n in notes if n)
            table.add_row(escape(report.task), report.shape or "-", f"[{colour[report.status]}]{report.status}",
                          escape(detail), f"{report.seconds:.1f}")
    console.print(table)
    console.print(", ".join(f"{n} {k}" for k, n in counts.items()))
    if counts["flagged"]:
        raise typer.Exit(1)


def _without_model_hub(paths: list[Path]) -> tuple[list[Path], list[Path]]:
    """The problem files that can run here, and those that need a model hub (KernelBench's level
    4 fetches Hugging Face models at import), found from their text and said in one line."""
    from agentforge.task import model_hub_use

    hub = []
    for path in paths:
        with contextlib.suppress(OSError, UnicodeDecodeError):
            if model_hub_use(path.read_text()) is not None:
                hub.append(path)
    if hub:
        folders = sorted({p.parent.name for p in hub})
        err_console.print(f"skipped {len(hub)} problems of {', '.join(folders)}: they need a model hub (Hugging "
                          "Face from_pretrained at import), which agentforge does not download from",
                          markup=False, soft_wrap=True)
    return [p for p in paths if p not in hub], hub


def _condensed(findings, shown: int = 3) -> list[str]:
    """One line per check: a model whose 40 parameters all fail the same check is one line."""
    by_check: dict[str, list[str]] = {}
    for finding in findings:
        by_check.setdefault(finding.check, []).append(finding.detail)
    lines = []
    for check, details in by_check.items():
        more = f" (+{len(details) - shown} more)" if len(details) > shown else ""
        lines.append(f"{check}: {'; '.join(details[:shown])}{more}")
    return lines


def _load_or_exit(ref: str, root: Path | None):
    from agentforge.task import TaskLoadError, load_task

    try:
        return load_task(ref, root)
    except TaskLoadError as exc:
        err_console.print(f"[red]error[/red] {escape(str(exc))}")
        raise typer.Exit(2) from exc


def _num(value: float | None, unit: float) -> str:
    return "-" if value is None else f"{value / unit:,.3g}"
