"""Help that reads well at 80 columns (COLUMNS=80) for every command.

typer's rich panels give each option a fixed column and cut long names (`--compile-baseli…`) and
wrap descriptions into a narrow strip; its metavars read `<str>` and arguments `{task}`. Here help
uses click's plain layout (full option names, descriptions wrapped at word boundaries, paragraphs
rejoined), arguments are named as in the usage line (`TASK CANDIDATE`), options by the kind of
value they take (`TEXT`, `INT`, `NUMBER`, `PATH`), and a group lists each command by the whole
first sentence of its help, never cut mid-word.
"""

from __future__ import annotations

import re
from typing import Any

from typer.core import TyperArgument, TyperGroup

_KINDS = {"str": "TEXT", "int": "INT", "float": "NUMBER", "path": "PATH"}
_FIRST_SENTENCE = re.compile(r"^(.+?[.!?])(?=\s|$)", re.DOTALL)


class HelpGroup(TyperGroup):
    """The root group: once typer has built the command tree, every command in it gets the help
    conventions above."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        tidy(self)


class PlainArgument(TyperArgument):
    """An argument shown by its name alone: `TASK` when required, `[TASK]` when not (typer writes
    `{TASK}` and adds its Python type, `TASK <str>`)."""

    def _usage_display_name(self) -> str:
        name = self.display_name_raw + ("..." if self.nargs != 1 else "")
        return name if self.required else f"[{name}]"

    def display_type_rich(self, ctx: Any) -> str | None:
        return None


def tidy(command: Any) -> None:
    """Metavars and short help for `command` and everything under it."""
    for param in command.params:
        param.help = _unescape(param.help)
        if param.metavar is None and not getattr(param, "is_flag", False):
            param.metavar = metavar(param)
        if type(param) is TyperArgument:
            param.__class__ = PlainArgument  # same state, only how it is shown differs
    for sub in getattr(command, "commands", {}).values():
        sub.help = _unescape(sub.help)
        if not sub.short_help and sub.help:
            sub.short_help = first_sentence(sub.help)
        tidy(sub)


def metavar(param: Any) -> str:
    """An argument by its name (TASK); an option by the kind of value it takes (choices listed)."""
    if isinstance(param, TyperArgument):
        return (param.name or "value").upper()
    described = param.type_descriptor
    if described.is_choice:
        return "[" + "|".join(str(getattr(c, "value", c)) for c in described.choices or ()) + "]"
    kind = param.bare_type().removeprefix("list[").removesuffix("]")
    return _KINDS.get(kind.lower(), kind.upper())


def first_sentence(text: str) -> str:
    """The help's first sentence, its lines joined (a docstring's line breaks are not the author's)."""
    flat = " ".join(text.split())
    match = _FIRST_SENTENCE.match(flat)
    return match[1] if match else flat


def _unescape(text: str | None) -> str | None:
    """Help written for rich escapes its brackets (`\\[output]`); the plain layout shows them as typed."""
    return text.replace("\\[", "[") if text else text
