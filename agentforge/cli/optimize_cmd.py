"""`agentforge optimize TASK`: the coder/judge loop until a budget stops it; `--resume RUN_ID`
continues a run that was stopped or killed.

Exit status: 0 when the run found a correct kernel (or paused for review); 2 when it could not
run (settings, the task failed on its own); 3 when the LLM server could not be reached or failed
for good, after its retries (each retry is said in one line); 5 when the budget ran out with no
correct kernel. The report and summary are written in every case but 2's refusals.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Annotated, Any

import typer

from agentforge.cli.common import build_settings, check_sandbox, console, err_console, say_error
from agentforge.settings import describe

QUICK_TIMING = {"max_reps": 40, "time_cap_s": 1.0}
QUICK_COMPILE_MODES = ("default",)


def register(app: typer.Typer) -> None:
    app.command("optimize")(optimize_command)


def optimize_command(
    task: Annotated[str | None, typer.Argument(help="task file, or level/name under the tasks root")] = None,
    provider: Annotated[str | None, typer.Option(help=describe("provider.name"))] = None,
    model: Annotated[str | None, typer.Option(help=describe("provider.model"))] = None,
    judge_model: Annotated[str | None, typer.Option(help=describe("provider.judge_model"))] = None,
    base_url: Annotated[str | None, typer.Option(help=describe("provider.base_url"))] = None,
    backend: Annotated[str | None, typer.Option(help=describe("eval.backend"))] = None,
    max_rounds: Annotated[int | None, typer.Option(help=describe("agent.max_rounds"))] = None,
    max_cost_usd: Annotated[float | None, typer.Option(help=describe("agent.max_cost_usd"))] = None,
    max_minutes: Annotated[float | None, typer.Option(help=describe("agent.max_minutes"))] = None,
    max_tokens: Annotated[int | None, typer.Option(help=describe("provider.max_tokens"))] = None,
    target: Annotated[str | None, typer.Option(help=describe("agent.target"))] = None,
    resume: Annotated[str | None, typer.Option(help="continue the run with this id from its last finished step")
                      ] = None,
    out: Annotated[str | None, typer.Option(help=describe("runs_dir"))] = None,
    review: Annotated[bool, typer.Option(help="ask a person to approve the best kernel before finishing")
                      ] = False,
    compile_baseline: Annotated[bool, typer.Option("--compile-baseline/--no-compile-baseline",
                                                   help="also time torch.compile baselines")] = True,
    shape: Annotated[list[str] | None, typer.Option(
        "--shape", help="shape variant(s) to check (default: all); the first is timed")] = None,
    quick: Annotated[bool, typer.Option(help="fewer timed repetitions (max 40, 1 s per subject) and torch.compile's "
                                             "default mode only (max-autotune takes minutes per evaluation on a "
                                             "GPU): for demos; re-measure the result with `agentforge eval`")
                     ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="no live view; print exactly one JSON object")] = False,
    isolation: Annotated[str | None, typer.Option(help=describe("sandbox.isolation"))] = None,
    config: Annotated[str | None, typer.Option(help="settings file (default: agentforge.toml)")] = None,
    candidates: Annotated[int, typer.Option(min=1, help="proposals per round, each with its own strategy and "
                                            "temperature, built and checked at once and timed one at a time")] = 1,
    beam: Annotated[int, typer.Option(min=1, help="the best kernels carried to the next round, each refined by "
                                      "its own verdict (at most --candidates)")] = 1,
    skills: Annotated[bool, typer.Option("--skills/--no-skills", help="technique notes for the task's operation "
                                         "class and backend in the coder's prompt")] = True,
    exemplars: Annotated[bool, typer.Option("--exemplars/--no-exemplars", help="the results store's fastest and a "
                                            "slower accepted kernel of similar tasks in the coder's prompt")] = True,
) -> None:
    """Make TASK's kernel faster with a coder LLM and a judge LLM, measured by the hardened evaluator."""
    if resume and provider is None:
        provider = _provider_of_run(config, out, resume)
    settings = build_settings(
        config, provider__name=provider, provider__model=model, provider__judge_model=judge_model,
        provider__base_url=base_url, provider__max_tokens=max_tokens, eval__backend=backend,
        agent__max_rounds=max_rounds, agent__max_cost_usd=max_cost_usd, agent__max_minutes=max_minutes,
        agent__target=target, runs_dir=out,
        sandbox__isolation=isolation,
    )
    check_sandbox(settings)
    from agentforge.agent.run import RunError, optimize
    from agentforge.agent.spec import RunSpec, RunSpecError
    from agentforge.cli import errors
    from agentforge.evaluator.result import TimingConfig
    from agentforge.llm.base import ProviderError, ProviderUnavailable
    from agentforge.task import TaskLoadError

    if settings.provider.name == "library" and provider is None and not as_json:
        err_console.print("[yellow]No LLM key is configured (OPENAI_API_KEY, ANTHROPIC_API_KEY or --base-url):"
                          " using the offline `library` provider, which proposes the shipped reference "
                          "kernels.[/yellow]")
    view = _LiveView(enabled=not as_json, runs_dir=settings.runs_dir)
    if resume:
        errors.set_resume_hint(resume_command(resume, settings.runs_dir))
    approve = None if as_json or not sys.stdin.isatty() else _ask
    try:
        with view:
            spec = RunSpec(baselines=("eager", "compile") if compile_baseline else ("eager",),
                           timing=TimingConfig(**QUICK_TIMING) if quick else None,
                           compile_modes=QUICK_COMPILE_MODES if quick else None, shapes=tuple(shape or ()),
                           candidates=candidates, beam=beam, skills=skills, exemplars=exemplars, review=review)
            summary = optimize(
                task, settings, spec, resume=resume, approve=approve, on_progress=view.update,
                limits=_explicit_limits(max_rounds, max_cost_usd, max_minutes, target) if resume else None,
                on_activity=view.activity, on_retry=view.retry, on_note=view.note,
            )
    except (RunError, RunSpecError, ProviderError, TaskLoadError) as exc:
        if as_json:
            print(json.dumps({"error": str(exc)}))
        else:
            say_error(str(exc))
        raise typer.Exit(EXIT_PROVIDER_FAILED if isinstance(exc, ProviderUnavailable) else 2) from exc
    # Interruptions (Ctrl-C, SIGTERM) and a full disk end in cli/errors.py, with the resume hint.
    if as_json:
        print(json.dumps(summary.to_dict(), default=str))
    else:
        _render_summary(summary)
    failed = _provider_failure(summary)
    if failed:
        say_error(f"the LLM provider failed ({failed}); check the provider settings (key, --base-url, "
                  "network), then start the run again")
        raise typer.Exit(EXIT_PROVIDER_FAILED)
    if summary.status == "task_error":
        say_error(f"{summary.stop_reason}")
        raise typer.Exit(2)
    if _no_kernel_error(summary):
        say_error(f"no correct kernel was found in {summary.rounds} rounds ({summary.stop_reason}); what each "
                  f"round got is in {summary.outputs.get('report')}")
        raise typer.Exit(EXIT_NO_KERNEL)


EXIT_PROVIDER_FAILED = 3
EXIT_NO_KERNEL = 5  # the run ended (a budget) without one correct kernel
_PROVIDER_FAILED = "provider failed: "  # the agent's stop reason when the coder call failed for good


def _no_kernel_error(summary: Any) -> bool:
    """The run ended on a budget with no correct kernel: exit 5, said by one error line."""
    return (summary.best is None and summary.status == "finished" and not _provider_failure(summary))


def _provider_failure(summary: Any) -> str | None:
    """Why the run stopped on a provider failure, or None when it stopped on a budget."""
    reason = summary.stop_reason or ""
    return reason[len(_PROVIDER_FAILED):] if reason.startswith(_PROVIDER_FAILED) else None


def resume_command(run_id: str, runs_dir: str) -> str:
    """The command that continues run `run_id`, with the folder that holds it (the run is not
    found without --out when it lives anywhere but the default)."""
    import shlex
    from pathlib import Path

    folder = Path(runs_dir).expanduser().resolve()
    return f"agentforge optimize --resume {shlex.quote(run_id)} --out {shlex.quote(str(folder))}"


def _provider_of_run(config: str | None, out: str | None, run_id: str) -> str | None:
    """A resumed run keeps its provider: name it before settings pick a key for it."""
    from agentforge.agent.run import run_meta

    runs_dir = out or build_settings(config).runs_dir
    meta = run_meta(runs_dir, run_id)
    return meta.get("provider") if meta else None


def _explicit_limits(max_rounds: int | None, max_cost_usd: float | None, max_minutes: float | None,
                     target: str | None = None) -> dict[str, Any]:
    """On --resume, only the budgets (and target) given on this command line replace the run's own."""
    given = {"max_rounds": max_rounds, "max_cost_usd": max_cost_usd, "max_minutes": max_minutes, "target": target}
    return {k: v for k, v in given.items() if v is not None}


def _ask(payload: dict[str, Any]) -> bool:
    speed = payload.get("best_speedup")
    console.print(f"Stopped: {payload.get('stop_reason')}. Best kernel: round {payload.get('best_round')}, "
                  f"{speed:.2f}x vs eager." if speed else f"Stopped: {payload.get('stop_reason')}; no correct kernel.")
    return typer.confirm(str(payload.get("question", "Approve?")), default=True)


class _LiveView:
    """On a terminal, a rich live table: round, mode, what is in flight and for how long (a model
    call, an evaluation) or the last finished stage, the run's elapsed time, best speedups, tokens
    and dollars so far. Off a terminal (a pipe, a log file), plain lines instead, each ended and
    flushed as it happens: every model call started and answered, every evaluation started, every
    finished round; a log shows progress during a long call, and nothing is left without a newline
    for an error to be glued to. Retries of a model call are printed as they happen, one line each."""

    def __init__(self, enabled: bool, runs_dir: str = "runs"):
        self.enabled = enabled
        self.runs_dir = runs_dir
        self.live: Any = None
        self.plain = False  # printing plain lines: enabled, and stdout is not a terminal
        self.last: dict[str, Any] = {}
        self.started = time.monotonic()
        self.now: tuple[str, float] | None = None  # what is in flight, since when
        self.calls: list[tuple[str, float]] = []  # model calls in flight (several in a search round)

    def __enter__(self) -> _LiveView:
        if self.enabled and console.is_terminal:
            from rich.live import Live

            # get_renderable: each refresh redraws the table, so the clocks tick during a long call.
            self.live = Live(get_renderable=self._table, console=console, refresh_per_second=4, transient=False)
            self.live.__enter__()
        self.plain = self.enabled and self.live is None
        return self

    def activity(self, what: str) -> None:
        """Something started (a model call, an evaluation): shown with its own clock until a step ends."""
        self.now = (what, time.monotonic())
        if what.startswith(_MODEL_CALL):
            self.calls.append(self.now)
        if self.plain:  # a terminal's table shows it with its clock
            self._say(what)

    def retry(self, line: str) -> None:
        """A model call failed and will be retried: said at once, in one line, never silently."""
        self.now = (f"waiting for the model ({line})", time.monotonic())
        if self.live is not None:
            from rich.markup import escape

            self.live.console.print(escape(line), style="yellow")
        else:
            err_console.print(line, style="yellow", markup=False, highlight=False)

    def note(self, line: str) -> None:
        """What the preflight decided (a derived CPU shape, what runs without a GPU): one line, kept."""
        if self.live is not None:
            from rich.markup import escape

            self.live.console.print(f"note: {escape(line)}", style="yellow")
        else:
            err_console.print(f"note: {line}", style="yellow", markup=False, highlight=False)

    def __exit__(self, *exc: object) -> None:
        if self.live is not None:
            self.live.__exit__(*exc)

    def update(self, view: dict[str, Any]) -> None:
        from agentforge.cli import errors

        if view.get("run_id") and view.get("run_id") != self.last.get("run_id"):
            errors.set_resume_hint(resume_command(view["run_id"], self.runs_dir))
        self._answered(view)
        self.last = view
        self.now = None
        for record in view.get("records") or ([view["last"]] if view.get("last") else []):
            speed = f", {record['speedup']:.2f}x" if record.get("speedup") else ""
            node = f" {record['node']} <- {record.get('parent') or 'root'}" if record.get("node") else ""
            self._say(f"round {record['round']}{node} ({record['mode']}) {record['status']}{speed}: "
                      f"{record['outcome']}")
        if self.live is not None:
            self.live.update(self._table())

    def _answered(self, view: dict[str, Any]) -> None:
        """A step ended: the model calls in flight were answered; off a terminal each gets its line,
        the last one with the tokens and dollars the step added."""
        calls, self.calls = self.calls, []
        if not self.plain or not calls:
            return
        tokens = (f"{view.get('input_tokens', 0) - self.last.get('input_tokens', 0)}+"
                  f"{view.get('output_tokens', 0) - self.last.get('output_tokens', 0)} tokens, "
                  f"${view.get('cost_usd', 0.0) - self.last.get('cost_usd', 0.0):.4f}")
        for i, (what, since) in enumerate(calls, 1):
            who = what[len(_MODEL_CALL):].strip(" ()")
            spent = f"after {_clock(time.monotonic() - since)}"
            self._say(f"the model answered ({who}) {spent}" + (f": {tokens}" if i == len(calls) else ""))

    def _say(self, line: str) -> None:
        """One finished line: above the live table on a terminal, else printed and flushed at once."""
        if self.live is not None:
            from rich.markup import escape

            self.live.console.print(escape(line))
        elif self.plain:
            console.print(f"{_clock(time.monotonic() - self.started)}  {line}", markup=False, highlight=False,
                          soft_wrap=True)
            console.file.flush()

    def _table(self) -> Any:
        from rich.table import Table

        v = self.last
        table = Table(show_header=True, header_style="bold", box=None)
        for column in ("round", "mode", "now", "elapsed", "best vs eager", "best vs compile", "tokens", "cost"):
            table.add_column(column)
        table.add_row(
            str(v.get("round", "-")), str(v.get("mode") or "-"), self.doing(),
            _clock(time.monotonic() - self.started),
            _x(v.get("best_speedup")), _x(v.get("best_speedup_vs_compile")),
            f"{v.get('input_tokens', 0)}+{v.get('output_tokens', 0)}", f"${v.get('cost_usd', 0.0):.4f}",
        )
        return table

    def doing(self) -> str:
        """What is in flight and for how long, else the last finished stage."""
        if self.now is not None:
            what, since = self.now
            return f"{what}, {_clock(time.monotonic() - since)}"
        stage = self.last.get("stage")
        return f"{stage} done" if stage else "starting"


_MODEL_CALL = "waiting for the model"  # how the loop says a model call started (agent/nodes.py)


def _clock(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}:{secs:02d}" if minutes else f"{secs} s"


def _render_summary(summary: Any) -> None:
    console.print()
    if summary.notice:
        console.print(f"[yellow]{summary.notice}[/yellow]")
    best = summary.best
    console.print(f"[bold]{summary.task_name}[/bold] ({summary.backend}, {summary.provider}): "
                  f"{summary.status}; {summary.stop_reason or ''}")
    usage = summary.usage
    console.print(f"LLM: {usage.get('calls', 0)} calls, ${usage.get('cost_usd', 0.0):.4f}")
    again = resume_command(summary.run_id, summary_runs_dir(summary))
    console.print(f"run id: {summary.run_id} (continue with: {again})", soft_wrap=True, markup=False)
    # The measured result last, where a reader's eye lands.
    if best:
        console.print(f"best: round {best['round']} -> {summary.outputs.get('best_kernel')}", markup=False,
                      soft_wrap=True)
        console.print(best_headline(best, summary.best_measurement or {}), markup=False, soft_wrap=True)
    elif not _no_kernel_error(summary):  # else the error line below says so, with the rounds and the report
        console.print("no correct kernel was found")
    console.print(f"report: {summary.outputs.get('report')}; plot: {summary.outputs.get('plot')}", markup=False,
                  soft_wrap=True)


def best_headline(best: dict[str, Any], measured: dict[str, Any]) -> str:
    """The best kernel's measured speedups, with its timed shape and roofline fraction; a ratio
    from an overhead-bound pair (within 20x of the harness floor) is shown as such, never as a
    speedup."""
    shape = f" on shape '{measured['shape']}'" if measured.get("shape") else ""
    us = f"{best['candidate_us']:.1f} us vs eager {best['eager_us']:.1f} us" if best.get("candidate_us") and \
        best.get("eager_us") else ""
    if measured.get("overhead_bound"):
        floor = measured.get("floor_us") or 0.0
        text = (f"measured{shape}: {_x(best.get('speedup'))} vs eager, NOT a speedup: "
                f"{', '.join(measured['overhead_bound'])} within 20x of the harness floor ({floor:.1f} us)")
    else:
        text = f"measured speedup{shape}: {_x(best.get('speedup'))} vs eager ({us})"
        if best.get("speedup_vs_compile"):
            text += f", {_x(best.get('speedup_vs_compile'))} vs torch.compile"
    sol = measured.get("sol_fraction")
    if sol is not None:
        label = measured.get("roofline_label")
        kind = f"{label}, " if label and label != "unknown" else ""
        source = measured.get("ceilings_source")
        text += f"; roofline: {100 * sol:.0f} % of the speed of light ({kind}{source} ceilings)"
    else:
        text += "; roofline: unknown (no ceilings for this device: `agentforge gpu --measure`)"
    return text


def summary_runs_dir(summary: Any) -> str:
    from pathlib import Path

    return str(Path(summary.run_dir).parent)


def _x(value: float | None) -> str:
    return f"{value:.2f}x" if value else "-"
