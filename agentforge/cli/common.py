"""What every command shares: building Settings from its flags, and the console."""

from __future__ import annotations

import sys
from typing import Any

import typer
from rich.console import Console

# Piped or captured output gets wide lines instead of rich's 80-column default, which cut task
# names and error messages in tables; a terminal keeps its own width.
_PIPE_WIDTH = 240
console = Console(width=None if sys.stdout.isatty() else _PIPE_WIDTH)
err_console = Console(stderr=True, width=None if sys.stderr.isatty() else _PIPE_WIDTH)


def build_settings(config: str | None = None, **flags: Any):
    """Settings from flags (dotted keys given with `__`, e.g. agent__max_rounds), environment,
    file and defaults; a bad value exits with the message saying what to set."""
    from agentforge.settings import SettingsError, load_settings

    dotted = {k.replace("__", "."): v for k, v in flags.items()}
    try:
        return load_settings(flags=dotted, file=config)
    except SettingsError as exc:
        say_error(f"settings: {exc}")
        raise typer.Exit(2) from exc


def say_error(message: str) -> None:
    """`error: MESSAGE` as one line on stderr: never wrapped, and brackets in it (`[agent]`) are
    text, not rich markup."""
    from rich.text import Text

    err_console.print(Text("error: ", style="red") + Text(" ".join(message.split())), soft_wrap=True,
                      highlight=False)


def check_sandbox(settings: Any) -> None:
    """Before any work: a sandbox that cannot run here is an error now (SandboxUnavailable, one
    line), not after a run folder was made; `auto` that means no isolation at all is said; the
    folders that killed runs left behind are removed."""
    if settings.sandbox.kind != "process":
        return
    from agentforge.sandbox import isolation, reaper
    from agentforge.sandbox.config import from_settings

    # Folders of jobs whose process died (kill -9, a crash) go now, even if this run evaluates nothing.
    reaper.remove_dead_job_dirs(from_settings(settings.sandbox, settings.cache_dir).workdir_root)
    if isolation.resolve_mode(settings.sandbox.isolation) == "none" and settings.sandbox.isolation == "auto":
        err_console.print("warning: neither bubblewrap nor unshare works here, so candidates run without "
                          "filesystem or network isolation (install bubblewrap; --isolation none silences this)",
                          soft_wrap=True, markup=False, highlight=False)
