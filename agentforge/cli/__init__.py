"""The `agentforge` command: a thin shell over library functions.

Each job lives in its own module under `agentforge/cli/` and exposes `register(app)`. Command
modules import only typer at the top; heavy imports happen inside the commands so that
`agentforge --help` is instant. `main()` runs the app through `errors.run_guarded`: every failure
ends as one line on stderr and a non-zero exit (`--debug` adds the traceback).
"""

from __future__ import annotations

import importlib
import importlib.util
import sys

import typer

from agentforge.cli.help_format import HelpGroup

# Help in click's plain layout, tidied for 80 columns (cli/help_format.py): no rich panels.
app = typer.Typer(
    name="agentforge",
    help="Make GPU code faster with LLM agents, and prove it.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    cls=HelpGroup,
)

# In the order `--help` lists them.
COMMAND_MODULES = ("optimize", "export", "eval", "tasks", "kernels", "gpu", "doctor", "leaderboard", "rl",
                   "rl_reward")  # rl_reward adds `rl serve-rewards` to rl's group


def _register_all() -> None:
    for name in COMMAND_MODULES:
        module_name = f"agentforge.cli.{name}_cmd"
        if importlib.util.find_spec(module_name) is None:
            continue
        importlib.import_module(module_name).register(app)


@app.callback()
def _options(
    debug: bool = typer.Option(False, "--debug", help="show the traceback of a failure (also AGENTFORGE_DEBUG=1)"),
) -> None:
    """Make GPU code faster with LLM agents, and prove it."""


_register_all()


def main(argv: list[str] | None = None) -> None:
    from agentforge.cli import errors

    args, debug = errors.strip_debug(sys.argv[1:] if argv is None else list(argv))
    errors.install_signal_handlers()
    errors.finish(errors.run_guarded(lambda: app(args=args, prog_name="agentforge"), debug=debug))
