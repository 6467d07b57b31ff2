"""`agentforge export RUN`: a run's best kernel as an importable package that registers it as a
`torch.library` custom op (with a fake implementation, so torch.compile graphs keep it).

Exit status: 0 when the package was written; 2 when the run cannot be exported (no such run, no
correct kernel, its task file gone or changed).
"""

from __future__ import annotations

from typing import Annotated

import typer

from agentforge.cli.common import build_settings, console, say_error


def register(app: typer.Typer) -> None:
    app.command("export")(export_command)


def export_command(
    run: Annotated[str, typer.Argument(help="run id (under --runs) or the path of a run folder")],
    to: Annotated[str, typer.Option(help="folder to write the package into")] = ".",
    name: Annotated[str | None, typer.Option(help="package name (default: <op>_kernel)")] = None,
    runs: Annotated[str | None, typer.Option(help="where runs live (default: the runs_dir setting)")] = None,
    config: Annotated[str | None, typer.Option(help="settings file (default: agentforge.toml)")] = None,
) -> None:
    """Write RUN's best kernel as a package registering the custom op agentforge::<op>, with a usage example."""
    from agentforge.agent.export import ExportError, export_run

    runs_dir = runs or build_settings(config).runs_dir
    try:
        exported = export_run(run, runs_dir, to, name)
    except ExportError as exc:
        say_error(str(exc))
        raise typer.Exit(2) from exc
    console.print(f"wrote {exported.package} (op {exported.op}); usage, from {exported.package.parent}:",
                  markup=False, highlight=False)
    console.print(exported.example, markup=False, highlight=False)
