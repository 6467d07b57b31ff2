"""`agentforge doctor`: checks every prerequisite of the GPU path and says, per item, ok or what
to do (the checks live in `agentforge.doctor`, which a bare GPU image runs as
`python -m agentforge.doctor`). Exit 0 when nothing failed, a machine without
a GPU included; 2 when something the GPU path needs is broken."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    @app.command("doctor")
    def doctor(
        json_output: bool = typer.Option(False, "--json", help="print one JSON object instead of lines"),
    ) -> None:
        """Check this machine for every GPU-path prerequisite: per item, ok or what to do."""
        from agentforge import doctor as checks

        code = checks.main(["--json"] if json_output else [])
        if code:
            raise typer.Exit(code)
