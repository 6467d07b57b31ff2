"""How the CLI ends when something goes wrong: one line on stderr, a non-zero exit, what to do next.

`main()` runs every command through `run_guarded`: a known failure (a bad setting, a store that
cannot be opened, a sandbox that cannot run here, a full disk, ...) becomes `error: <message>`
with exit 2 (1 for anything unforeseen, which also says how to see the traceback); SIGINT and
SIGTERM become `interrupted (SIGINT)` / `terminated (SIGTERM)` with 130 / 143 and the command's
resume hint. `--debug` (anywhere on the command line) or AGENTFORGE_DEBUG=1 prints the traceback
too. Tracebacks never reach a user who did not ask for them.

Signals are turned into an `Interrupted` exception in the main thread (a BaseException, so that no
`except Exception` in library code swallows it, and not KeyboardInterrupt, which typer would turn
into a silent exit 130). `finally` blocks of the main thread run (the live view restores the
terminal, an evaluation in progress kills its sandbox child); then the process exits at once
without waiting for worker threads, whose sandbox children die with it (they are started with a
parent-death signal) and whose job folders later runs remove (`sandbox/reaper.py`). A second
signal during that cleanup exits immediately.
"""

from __future__ import annotations

import errno
import os
import signal
import sqlite3
import sys
import traceback
from collections.abc import Callable
from typing import Any

EXIT_ERROR = 2  # a failure the message explains
EXIT_BUG = 1  # an unforeseen exception
_EXIT_DISK_FULL = 4

# What the current command wants said after an interruption or a full disk (how to continue).
_resume_hint: str | None = None


class Interrupted(BaseException):
    """SIGINT or SIGTERM arrived; raised in the main thread by the CLI's signal handler."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


def set_resume_hint(hint: str | None) -> None:
    """What to run to continue the current command, shown when it is interrupted or the disk fills."""
    global _resume_hint
    _resume_hint = hint


def resume_hint() -> str | None:
    return _resume_hint


def strip_debug(args: list[str], env: dict[str, str] | None = None) -> tuple[list[str], bool]:
    """The arguments without `--debug` (accepted anywhere), and whether tracebacks are wanted."""
    env = dict(os.environ) if env is None else env
    debug = "--debug" in args or env.get("AGENTFORGE_DEBUG", "") not in ("", "0")
    return [a for a in args if a != "--debug"], debug


def install_signal_handlers() -> None:
    """SIGINT and SIGTERM raise Interrupted in the main thread; a second one exits at once."""
    def first(signum: int, _frame: Any) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, again)
        raise Interrupted(signum)

    def again(signum: int, _frame: Any) -> None:
        _say(f"{_signal_words(signum)} again; stopping now")
        _flush_and_exit(128 + signum)

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, first)


def run_guarded(command: Callable[[], Any], *, debug: bool = False) -> int:
    """Run `command` (the typer app); the exit code, with every failure said in one line."""
    try:
        command()
    except SystemExit as exc:  # typer's own exits: usage errors (already shown), typer.Exit(n)
        return _system_exit_code(exc)
    except Interrupted as exc:
        _debug_traceback(debug)
        _say(_join(f"{_signal_words(exc.signum)}", _resume_hint, "continue with: "))
        return exc.exit_code
    except BaseException as exc:  # the one place that turns any failure into one line
        _debug_traceback(debug)
        code, message = describe(exc)
        if code == EXIT_BUG and not debug:
            message += " (run again with --debug to see the traceback)"
        _say(f"error: {message}")
        return code
    return 0


def describe(exc: BaseException) -> tuple[int, str]:
    """(exit code, one-line message) for an exception that reached the top of a command."""
    from agentforge.settings import SettingsError

    if _disk_full(exc):
        where = getattr(exc, "filename", None)
        return _EXIT_DISK_FULL, _join(f"the disk is full{f' ({where})' if where else ''}; free some space",
                                      _resume_hint, "then continue with: ")
    if isinstance(exc, SettingsError):
        return EXIT_ERROR, f"settings: {_one_line(exc)}"
    if isinstance(exc, _known_types()):
        return EXIT_ERROR, _one_line(exc)
    if _is_database_error(exc):
        from agentforge.store import describe_error

        return EXIT_ERROR, describe_error(exc)
    if isinstance(exc, OSError):
        return EXIT_ERROR, _one_line(exc)
    return EXIT_BUG, f"{type(exc).__name__}: {_one_line(exc)}"


def _known_types() -> tuple[type[BaseException], ...]:
    """Failures whose message already says what happened and what to do."""
    found: list[type[BaseException]] = []
    for module, name in (("agentforge.store", "StoreError"), ("agentforge.sandbox.isolation", "SandboxUnavailable"),
                         ("agentforge.agent.run", "RunError"), ("agentforge.llm.base", "ProviderError"),
                         ("agentforge.task", "TaskLoadError"), ("agentforge.leaderboard.suites", "SuiteError")):
        loaded = sys.modules.get(module)  # a module never imported cannot have raised
        if loaded is not None and isinstance(getattr(loaded, name, None), type):
            found.append(getattr(loaded, name))
    return tuple(found)


def _disk_full(exc: BaseException) -> bool:
    for link in _chain(exc):
        if isinstance(link, OSError) and link.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        if isinstance(link, sqlite3.Error) and getattr(link, "sqlite_errorcode", None) == 13:  # SQLITE_FULL
            return True
    return False


def _is_database_error(exc: BaseException) -> bool:
    sa_exc = sys.modules.get("sqlalchemy.exc")
    return sa_exc is not None and isinstance(exc, sa_exc.SQLAlchemyError)


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    link: BaseException | None = exc
    while link is not None and link not in seen:
        seen.append(link)
        orig = getattr(link, "orig", None)  # SQLAlchemy's wrapper of a driver error
        if isinstance(orig, BaseException) and orig not in seen:
            seen.append(orig)
        link = link.__cause__ or link.__context__
    return seen


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text or type(exc).__name__


def _join(first: str, hint: str | None, lead: str) -> str:
    return f"{first}; {lead}{hint}" if hint else first


def _signal_words(signum: int) -> str:
    return ("terminated" if signum == signal.SIGTERM else "interrupted") + f" ({signal.Signals(signum).name})"


def _system_exit_code(exc: SystemExit) -> int:
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code
    _say(str(exc.code))
    return 1


def _debug_traceback(debug: bool) -> None:
    if debug:
        traceback.print_exc(file=sys.stderr)


def _say(line: str) -> None:
    """One line on stderr, whatever the terminal width (rich would wrap it; markup is not parsed)."""
    sys.stderr.write(line.replace("\n", " ") + "\n")
    sys.stderr.flush()


def _flush_and_exit(code: int) -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def finish(code: int) -> None:
    """Leave the process with `code`: after a failure or a signal at once, since worker threads
    may still be busy with evaluations (their sandbox children die with us); after success
    normally, so atexit handlers run."""
    if code != 0:
        _flush_and_exit(code)
    sys.exit(0)
