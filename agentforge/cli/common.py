"""What every command shares: building Settings from its flags, and the console."""

from __future__ import annotations

from typing import Any

import typer
from rich.console import Console

console = Console()
err_console = Console(stderr=True)


def build_settings(config: str | None = None, **flags: Any):
    """Settings from flags (dotted keys given with `__`, e.g. agent__max_rounds), environment,
    file and defaults; a bad value exits with the message saying what to set."""
    from agentforge.settings import SettingsError, load_settings

    dotted = {k.replace("__", "."): v for k, v in flags.items()}
    try:
        return load_settings(flags=dotted, file=config)
    except SettingsError as exc:
        err_console.print(f"[red]settings:[/red] {exc}")
        raise typer.Exit(2) from exc
