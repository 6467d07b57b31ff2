"""`agentforge export RUN`: a run's best kernel as an importable package that registers it as a
`torch.library` custom op (with a fake implementation, so torch.compile graphs keep it).

Exit status: 0 when the package was written; 2 when the run cannot be exported (no such run, no
correct kernel, its task file gone or changed).
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from agentforge.cli.common import build_settings, console, say_error

if TYPE_CHECKING:
    from agentforge.agent.export import Exported


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
    for line in what_to_run(exported, Path.cwd()):
        console.print(line, markup=False, highlight=False, soft_wrap=True)


def what_to_run(exported: Exported, cwd: Path) -> list[str]:
    """What the user reads: what was written, the two ways to run its example (as a module from the
    package's parent folder, or as a file from anywhere), and how a model uses it."""
    package, parent = exported.package.resolve(), exported.package.resolve().parent
    here = parent == cwd.resolve()
    as_file = Path(package.name) / "example.py" if here else package / "example.py"
    module = f"python -m {package.name}.example"
    pkg = package.name
    return [
        f"wrote {package}: the custom op {exported.op}, {exported.speedup} on shape '{exported.shape}'",
        "run its example (the op inside torch.compile, checked against the task's Model):",
        f"  {module}" if here else f"  cd {shlex.quote(str(parent))} && {module}",
        f"  python {shlex.quote(str(as_file))}",
        f"use it in a model (with {parent} on PYTHONPATH):",
        f"  import {pkg}",
        f"  layer = {pkg}.Module(*init_inputs).load_weights(model)  # built like the task's Model",
        "  out = torch.compile(layer, fullgraph=True)(*inputs)  # the op is one node of the graph",
    ]
