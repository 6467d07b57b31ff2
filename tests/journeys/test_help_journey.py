"""`agentforge ... --help` at 80 columns, as a user types it, for every command (issue 30, item 8):
no option name cut (`--compile-baseli…`), no line past the width, arguments named as in the usage
line (`TASK CANDIDATE`, not `{task} {candidate}`), no `<str>` metavars, every option in full, and
`eval` takes `--isolation` as `optimize` and `leaderboard run` do."""

from __future__ import annotations

import re
from pathlib import Path

import typer.main

from agentforge.cli import app

from .user import type_command, user_env


def _commands() -> dict[str, object]:
    """Every command and group by its words (`tasks list`), with its click command."""
    found: dict[str, object] = {}

    def walk(words: str, command: object) -> None:
        found[words] = command
        for name, sub in (getattr(command, "commands", None) or {}).items():
            walk(f"{words} {name}".strip(), sub)

    walk("", typer.main.get_command(app))
    return found


def test_every_help_reads_at_80_columns(user_dir: Path) -> None:
    env = user_env(user_dir.parent / "home", COLUMNS="80")
    commands = _commands()
    assert {"optimize", "eval", "export", "tasks list", "leaderboard run", "rl train"} <= set(commands)
    line = " ; ".join(f"echo '=== {words}'; agentforge {words} --help" for words in commands)
    typed = type_command(line, user_dir, env)
    assert typed.returncode == 0, typed.explain()
    pages = dict(re.findall(r"^=== (.*)\n((?:(?!=== ).*\n?)*)", typed.stdout, re.M))
    assert set(pages) == set(commands), typed.explain()
    for words, page in pages.items():
        assert page.startswith(f"Usage: agentforge {words}".rstrip()), (words, page)
        assert max(len(text) for text in page.splitlines()) <= 80, (words, page)
        assert "…" not in page and "<" + "str>" not in page and "{" not in page.split("\n")[0], (words, page)
        for param in getattr(commands[words], "params", []):
            for name in [*param.opts, *param.secondary_opts]:
                if name.startswith("-"):
                    assert re.search(rf"(^|[\s,/]){re.escape(name)}([\s,=]|$)", page, re.M), (words, name, page)
    assert "Usage: agentforge eval [OPTIONS] TASK CANDIDATE" in pages["eval"]
    assert re.search(r"^  TASK +task file", pages["eval"], re.M)
    assert re.search(r"^  --compile-baseline / --no-compile-baseline$", pages["optimize"], re.M)
    for words in ("eval", "optimize", "leaderboard run"):
        assert re.search(r"^  --isolation TEXT ", pages[words], re.M), pages[words]
    # A group lists each command by its whole first sentence, wrapped, never cut with "...".
    assert "measured by the hardened evaluator." in pages[""] and "..." not in pages[""].split("Commands:")[1]
