"""`agentforge eval TASK CANDIDATE`: one verdict from the hardened evaluator."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from agentforge.cli.common import build_settings, console, err_console


def register(app: typer.Typer) -> None:
    app.command("eval")(eval_command)


def eval_command(
    task: Annotated[str, typer.Argument(help="task file, or level/name under the tasks root")],
    candidate: Annotated[Path, typer.Argument(help="a Python file defining ModelNew (KernelBench answer format)")],
    backend: Annotated[str | None, typer.Option(help="cuda, triton or cpu (default: guessed from the source)")] = None,
    track: Annotated[str | None, typer.Option(help="hardened, or kernelbench (its published settings)")] = None,
    shape: Annotated[list[str] | None, typer.Option("--shape", help="shape variant(s) to check (default: all)")] = None,
    device: Annotated[str | None, typer.Option(help="cpu, cuda, cuda:N (default: auto)")] = None,
    timing: Annotated[bool, typer.Option(help="time the candidate against its baselines")] = True,
    compile_baseline: Annotated[bool, typer.Option("--compile-baseline/--no-compile-baseline",
                                                   help="also time torch.compile baselines")] = True,
    profile: Annotated[bool | None, typer.Option(help="profile with Nsight Compute when a GPU is present")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print exactly one JSON object: the EvalResult")] = False,
    config: Annotated[str | None, typer.Option(help="settings file (default: agentforge.toml)")] = None,
) -> None:
    """Build, check, time and profile CANDIDATE against TASK; exit 0 whenever an evaluation happened."""
    settings = build_settings(config, eval__track=track, eval__backend=backend, eval__device=device,
                              eval__profile=profile)
    from agentforge.candidate import Candidate, guess_backend
    from agentforge.evaluator.api import evaluate, make_job
    from agentforge.evaluator.result import Measure
    from agentforge.sandbox.config import from_settings
    from agentforge.task import TaskLoadError, load_task

    try:
        loaded = load_task(task, Path(settings.tasks_root) if settings.tasks_root else None)
        source = candidate.read_text()
    except (TaskLoadError, OSError) as exc:
        err_console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from exc
    chosen = settings.eval.backend if settings.eval.backend != "auto" else guess_backend(source)
    measure = Measure(timing=timing, baselines=("eager", "compile") if compile_baseline else ("eager",),
                      profile=settings.eval.profile)
    job = make_job(loaded, Candidate(source, chosen), device=None if settings.eval.device == "auto"
                   else settings.eval.device, track=settings.eval.track, shapes=tuple(shape or ()), measure=measure,
                   cuda_arch=settings.eval.cuda_arch, cache_dir=settings.cache_dir)
    result = evaluate(job, from_settings(settings.sandbox, settings.cache_dir))
    if as_json:
        print(result.to_json())
        return
    from agentforge.cli.render import render_result

    render_result(console, result)
