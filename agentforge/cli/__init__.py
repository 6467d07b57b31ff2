"""The `agentforge` command: a thin shell over library functions.

Each job lives in its own module under `agentforge/cli/` and exposes `register(app)`. Command
modules import only typer at the top; heavy imports happen inside the commands so that
`agentforge --help` is instant.
"""

from __future__ import annotations

import importlib
import importlib.util

import typer

app = typer.Typer(
    name="agentforge",
    help="Make GPU code faster with LLM agents, and prove it.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

# In the order `--help` lists them.
COMMAND_MODULES = ("optimize", "eval", "tasks", "kernels", "gpu", "leaderboard", "rl")


def _register_all() -> None:
    for name in COMMAND_MODULES:
        module_name = f"agentforge.cli.{name}_cmd"
        if importlib.util.find_spec(module_name) is None:
            continue
        importlib.import_module(module_name).register(app)


_register_all()


def main() -> None:
    app()
