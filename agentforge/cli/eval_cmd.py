"""`agentforge eval TASK CANDIDATE`: one verdict from the hardened evaluator.

The task file is never imported in this process (a task may sleep or print at import): before
anything is built, `agent.preflight` reads its shape names from its text and has a sandbox child
import it and size its shapes. A task that fails there, or in the evaluator's own check of its
reference, is a `task_error`, never the candidate's fault. A shape whose evaluation would not fit
in the memory this machine gives the sandbox is refused up front, naming the shapes that fit.

Exit status: 0 when the candidate was evaluated and not rejected (accepted, or a compile-only
verdict on a machine without the GPU to run it); 6 when it was evaluated and rejected (it did not
build, run, match the reference, or it was flagged: the verdict is printed all the same); 2 when it
could not be evaluated: a usage error (an unknown shape, a missing file), a task error, a shape
that does not fit, a sandbox that could not run. With `--json`, stdout carries exactly one JSON
object in every case: the EvalResult, or for a refusal `{"status": "refused", "error": {"type",
"message"}, ...}`; anything else printed meanwhile (ours, a library's) goes to stderr.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from typer.core import TyperCommand

from agentforge.cli.common import console, err_console
from agentforge.settings import describe

if TYPE_CHECKING:
    from agentforge.evaluator.result import EvalResult
    from agentforge.sandbox.config import SandboxConfig
    from agentforge.settings import Settings
    from agentforge.task import TaskText

EXIT_REFUSED = 2
EXIT_REJECTED = 6  # evaluated, and the verdict rejects the candidate


class Refused(Exception):
    """Why eval cannot run as asked, in one line, with what a JSON reader needs beside it."""

    def __init__(self, kind: str, message: str, task_name: str | None = None, **extra: Any):
        super().__init__(message)
        self.kind, self.message, self.task_name, self.extra = kind, message, task_name, extra

    def to_dict(self) -> dict[str, Any]:
        return {"status": "refused", "accepted": False, "task_name": self.task_name,
                "error": {"type": self.kind, "message": self.message}, "exit_code": EXIT_REFUSED, **self.extra}


class _EvalCommand(TyperCommand):
    """Click's own usage errors (a missing argument, a bad option) come before the command runs;
    with --json they are one JSON object on stdout too, and click still says them on stderr."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        wants_json = "--json" in args
        try:
            return super().parse_args(ctx, args)
        except Exception as exc:
            # By name: typer may vendor its own copy of click, whose UsageError is not click's.
            if wants_json and any(c.__name__ == "UsageError" for c in type(exc).__mro__):
                _write_stdout(json.dumps(Refused("UsageError", exc.format_message()).to_dict()))  # type: ignore[attr-defined]
            raise


def register(app: typer.Typer) -> None:
    app.command("eval", cls=_EvalCommand)(eval_command)


def eval_command(
    task: Annotated[str, typer.Argument(help="task file, or level/name under the tasks root")],
    candidate: Annotated[Path, typer.Argument(help="a Python file defining ModelNew (KernelBench answer format)")],
    backend: Annotated[str | None, typer.Option(help="cuda, triton or cpu (default: guessed from the source)")] = None,
    track: Annotated[str | None, typer.Option(help="hardened, or kernelbench (its published settings)")] = None,
    shape: Annotated[list[str] | None, typer.Option("--shape", help="shape variant(s) to check (default: all)")] = None,
    device: Annotated[str | None, typer.Option(help="cpu, cuda, cuda:N (default: auto)")] = None,
    timing: Annotated[bool, typer.Option(help="time the candidate against its baselines")] = True,
    compile_baseline: Annotated[bool, typer.Option("--compile-baseline/--no-compile-baseline",
                                                   help="also time torch.compile baselines")] = True,
    profile: Annotated[bool | None, typer.Option(help="profile with Nsight Compute when a GPU is present")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print exactly one JSON object: the EvalResult")] = False,
    config: Annotated[str | None, typer.Option(help="settings file (default: agentforge.toml)")] = None,
    replay: Annotated[Path | None, typer.Option(
        help="an EvalResult JSON (from --json): rerun with the seeds it recorded, to reproduce it")] = None,
    isolation: Annotated[str | None, typer.Option(help=describe("sandbox.isolation"))] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v",
                                          help="also print the seconds each stage took")] = False,
) -> None:
    """Build, check, time and profile CANDIDATE against TASK. Exit 0 when the candidate was
    evaluated and not rejected; 6 when it was rejected (the verdict says why); 2 when it could not
    be evaluated (usage, task error, memory)."""
    flags = {"eval.track": track, "eval.backend": backend, "eval.device": device, "eval.profile": profile,
             "sandbox.isolation": isolation}
    with _stdout_reserved(as_json) as emit:
        try:
            seed = _replay_seed(replay) if replay is not None else None
            result = _evaluate(task, candidate, flags, config, tuple(shape or ()), timing, compile_baseline, seed)
        except Refused as exc:
            if as_json:
                emit(json.dumps(exc.to_dict()))
            _say(exc.message)
            raise typer.Exit(EXIT_REFUSED) from exc
        except typer.Exit:
            raise
        except BaseException as exc:  # the CLI's error handler says it on stderr; stdout still gets its object
            if as_json:
                emit(json.dumps({"status": "error", "accepted": False, "task_name": None,
                                 "error": {"type": type(exc).__name__, "message": _one_line(exc)}}))
            raise
        if as_json:
            emit(result.to_json())
    if not as_json:
        from agentforge.cli.render import render_result

        render_result(console, result, verbose=verbose)
    code = _exit_code(result)
    if code == EXIT_REJECTED:
        raise typer.Exit(code)  # the verdict above says why
    if code:
        _say(_why_not_evaluated(result))
        raise typer.Exit(code)


# ----- the steps ------------------------------------------------------------------------------
def _replay_seed(path: Path) -> int:
    """The base seed a recorded verdict ran with (seeds are secret until the verdict is written)."""
    try:
        recorded = json.loads(path.read_text())
        seed = recorded["provenance"]["track_settings"]["correctness"]["base_seed"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise Refused("BadReplay", f"--replay {path}: not an EvalResult JSON with recorded seeds ({exc})") from exc
    if type(seed) is not int or seed < 0:
        raise Refused("BadReplay", f"--replay {path}: the recorded base seed {seed!r} is not a non-negative integer")
    return seed


def _evaluate(task_ref: str, candidate: Path, flags: dict[str, Any], config: str | None,
              shapes: tuple[str, ...], timing: bool, compile_baseline: bool, seed: int | None = None) -> EvalResult:
    settings = _settings(flags, config)
    _refuse_without_cuda_source(settings, candidate)  # text only: before torch is imported
    from agentforge.sandbox.config import from_settings

    sandbox = from_settings(settings.sandbox, settings.cache_dir)
    _prestart(settings, candidate, sandbox, timing and compile_baseline)  # its child imports torch as this does
    from agentforge.agent.preflight import PreflightError, check_text, prepare
    from agentforge.candidate import Candidate, guess_backend
    from agentforge.evaluation import default_device, evaluate, make_job
    from agentforge.evaluator.result import CorrectnessConfig, Measure

    task = _read_task(task_ref, settings)
    try:
        check_text(task, shapes)  # before reading anything else: these need no process at all
        source = candidate.read_text()
    except PreflightError as exc:
        raise Refused(exc.kind, exc.message, exc.task_name, **exc.extra) from exc
    except OSError as exc:
        raise Refused("NoCandidate", f"cannot read the candidate {candidate}: {exc.strerror}", task.name) from exc
    chosen = settings.eval.backend if settings.eval.backend != "auto" else guess_backend(source)
    where = settings.eval.device if settings.eval.device != "auto" else default_device(chosen)
    measure = Measure(timing=timing, baselines=("eager", "compile") if compile_baseline else ("eager",),
                      profile=settings.eval.profile)
    job = make_job(task, Candidate(source, chosen), device=where, track=settings.eval.track, shapes=shapes,
                   measure=measure, cuda_arch=settings.eval.cuda_arch, cache_dir=settings.cache_dir,
                   correctness=CorrectnessConfig(base_seed=seed))
    try:
        prepared = prepare(task, job, sandbox, settings.sandbox.memory_gb)
    except PreflightError as exc:
        raise Refused(exc.kind, exc.message, exc.task_name, **exc.extra) from exc
    for note in prepared.notes:  # a derived shape, what runs instead of a GPU: said before it runs
        _say_note(note)
    return prepared.failed if prepared.failed is not None else evaluate(prepared.job, sandbox)


def _prestart(settings: Settings, candidate: Path, sandbox: SandboxConfig, compiles: bool) -> None:
    """The job's sandbox child, started before this process imports torch (about 3 s on two
    cores): both imports then run at once, and Inductor's too when the job `compiles` a baseline.
    Device and backend are read as `_evaluate` reads them; a GPU job or an unreadable candidate
    starts nothing here."""
    from agentforge.candidate import guess_backend
    from agentforge.sandbox import prestart

    backend = settings.eval.backend
    if backend == "auto":
        try:
            backend = guess_backend(candidate.read_text())
        except (OSError, UnicodeDecodeError):
            return
    device = settings.eval.device
    if device == "auto" and backend == "cpu":
        device = "cpu"
    prestart(sandbox, device=device, backend=backend, compiles=compiles)


def _refuse_without_cuda_source(settings: Settings, candidate: Path) -> None:
    """`--backend cuda` with a candidate whose text holds no CUDA code: refused from its text,
    before anything imports torch (seconds), on any machine: there is nothing to build."""
    from agentforge.evaluator.cuda_source import missing_cuda_source

    if settings.eval.backend != "cuda":
        return
    try:
        source = candidate.read_text()
    except (OSError, UnicodeDecodeError):
        return  # said by the usual path
    if (why := missing_cuda_source(source)) is not None:
        raise Refused("NoCudaSource", f"{candidate}: {why}")


def _settings(flags: dict[str, Any], config: str | None) -> Settings:
    from agentforge.settings import SettingsError, load_settings

    try:
        return load_settings(flags=flags, file=config)
    except SettingsError as exc:
        raise Refused("SettingsError", f"settings: {exc}") from exc


def _read_task(ref: str, settings: Settings) -> TaskText:
    from agentforge.task import TaskLoadError, read_task

    try:
        return read_task(ref, Path(settings.tasks_root).expanduser() if settings.tasks_root else None)
    except TaskLoadError as exc:
        raise Refused("NoSuchTask", str(exc)) from exc


# ----- output ---------------------------------------------------------------------------------
def _exit_code(result: EvalResult) -> int:
    """2 when no candidate verdict exists: the task failed on its own, or the sandbox never ran;
    6 when the verdict rejects the candidate; else 0 (a compile-only `ok` rejects nothing)."""
    from agentforge.evaluator.result import Stage, Status

    if result.status == Status.TASK_ERROR:
        return EXIT_REFUSED
    if result.stage == Stage.SANDBOX and result.error is not None and result.error.type == "SandboxError":
        return EXIT_REFUSED
    if result.status != Status.OK or result.rejecting_flags:
        return EXIT_REJECTED
    return 0


def _why_not_evaluated(result: EvalResult) -> str:
    error = result.error
    cause = f"{error.type}: {error.message}" if error is not None else result.status.value
    if result.status.value == "task_error":
        return f"task error, the candidate was not run: {cause}"
    return f"the sandbox could not run: {cause}"


def _say_note(message: str) -> None:
    from rich.text import Text

    err_console.print(Text("note: ", style="yellow") + Text(" ".join(message.split())), soft_wrap=True,
                      highlight=False)


def _say(message: str) -> None:
    from rich.text import Text

    err_console.print(Text("error: ", style="red") + Text(" ".join(message.split())), soft_wrap=True,
                      highlight=False)


@contextlib.contextmanager
def _stdout_reserved(enabled: bool) -> Iterator[Callable[[str], None]]:
    """With --json, stdout is kept for the one JSON object: while the command works, file
    descriptor 1 and sys.stdout point at stderr, so nothing printed meanwhile (by this process,
    a library, a C extension) can reach it. Yields the function that writes the object (once)."""
    written: list[bool] = []
    saved = _dup_stdout() if enabled else None

    def emit(text: str) -> None:
        if written:
            return
        written.append(True)
        if saved is None:
            _write_stdout(text)
        else:
            _write_fd(saved, text + "\n")

    if not enabled:
        yield emit
        return
    real = sys.stdout
    sys.stdout = sys.stderr
    try:
        yield emit
    finally:
        sys.stdout = real
        if saved is not None:
            sys.stderr.flush()
            os.dup2(saved, 1)
            os.close(saved)


def _dup_stdout() -> int | None:
    """A copy of fd 1, which then points at stderr; None where stdout is no file (a test runner)."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):
        return None
    sys.stdout.flush()
    saved = os.dup(fd)
    os.dup2(sys.stderr.fileno(), fd)
    return saved


def _write_fd(fd: int, text: str) -> None:
    data = text.encode()
    while data:
        data = data[os.write(fd, data):]


def _write_stdout(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
