"""Rendering an EvalResult for a person (rich); rounding happens here and only here."""

from __future__ import annotations

import re

from rich.console import Console
from rich.table import Table

from agentforge.evaluator.result import EvalResult

_STATUS_STYLE = {"ok": "green", "mismatch": "yellow", "integrity_flag": "red", "compile_error": "red",
                 "runtime_error": "red", "timeout": "magenta", "crash": "magenta", "task_error": "magenta"}


def render_result(console: Console, result: EvalResult, verbose: bool = False) -> None:
    style = _STATUS_STYLE.get(result.status.value, "white")
    verdict = "ACCEPTED" if result.accepted else "not accepted"
    if result.status.value == "task_error":
        verdict = "the task failed before any candidate code ran; the candidate was not judged"
    console.print(f"[bold]{result.task_name}[/bold] [{result.backend}]  "
                  f"[{style}]{result.status.value}[/{style}] at {result.stage.value}: {verdict}")
    if result.compile is not None:
        c = result.compile
        console.print(f"build: {'ok' if c.ok else 'FAILED'} via {c.path} in {c.seconds:.2f} s"
                      f"{' (cached)' if c.cached else ''}{f' for {c.arch}' if c.arch else ''}")
        for k in c.resources:
            console.print(f"  {k.name}: {k.registers} regs, {k.shared_bytes} B smem, {k.stack_bytes} B stack, "
                          f"{k.spill_store_bytes}/{k.spill_load_bytes} B spill st/ld")
    stand_in = result.executed_on.split(":")[0] not in ("", "cpu", "cuda")
    if stand_in or result.execution_note:
        # Where the kernels ran when not on the device itself (the CPU emulation, Triton's
        # interpreter), or why they did not run: a verdict with no timing says so beside its checks.
        where = f"executed on {result.executed_on}" if result.executed_on else "not executed"
        note = result.execution_note
        if not result.executed_on and note.startswith(where):  # the note says it already
            where, note = note, ""
        console.print(f"[cyan]{where}[/cyan]" + (f": {note}" if note else ""))
    if result.correctness:
        table = Table("shape", "seed", "ok", "max abs err", "max rel err", "check", title="correctness")
        for r in result.correctness:
            table.add_row(r.shape, str(r.seed), "yes" if r.passed else "[red]no[/red]", _num(r.max_abs_err),
                          _num(r.max_rel_err), r.failed_check or "")
        console.print(table)
    for f in result.flags:
        color = "red" if f.severity == "reject" else "yellow"
        console.print(f"[{color}]flag {f.rule}[/{color}] ({f.severity}): {f.evidence}")
    if result.timing is not None:
        t = result.timing
        table = Table("subject", "median us", "mean us", "stdev us", "n", "rel stderr",
                      title=f"timing on '{t.shape}' ({t.method}, L2 flushed: {t.l2_flushed})")
        rows = [("candidate", t.candidate), *t.baselines.items()]
        for name, s in [*rows, *([("harness floor", t.floor)] if t.floor is not None else [])]:
            mark = " (overhead-bound)" if name in t.overhead_bound else ""
            table.add_row(name + mark, f"{s.median_us:.2f}", f"{s.mean_us:.2f}", f"{s.stdev_us:.2f}", str(s.n),
                          f"{100 * s.rel_stderr:.2f} %")
        console.print(table)
        for note in t.notes:
            console.print(f"[yellow]note:[/yellow] {note}")
    if result.speedup is not None and result.headline_speedup is None:
        console.print(f"[yellow]no speedup claimed: {result.speedup:.2f}x vs eager is overhead-bound (within 20x "
                      "of the harness floor); time a larger shape[/yellow]")
    elif result.speedup is not None:
        line = f"speedup: {result.speedup:.2f}x vs eager{_interval(result.speedup_ci)}"
        if result.headline_speedup_vs_compile is not None:
            line += (f", {result.headline_speedup_vs_compile:.2f}x vs best torch.compile"
                     f"{_interval(result.speedup_vs_compile_ci)}")
        elif result.speedup_vs_compile is not None:
            line += " (vs torch.compile: overhead-bound, not claimed)"
        console.print(f"[bold]{line}[/bold]")
    if result.noise_note:
        console.print(f"[yellow]{result.noise_note}[/yellow]")
    if result.timing is not None:
        for name, why in result.timing.missing_baselines.items():
            console.print(f"[yellow]missing baseline {name}[/yellow]: {why}")
    if result.roofline is not None and result.roofline.floor_us:
        r = result.roofline
        console.print(f"roofline: floor {r.floor_us:.2f} us, {r.label}, SoL {100 * (r.sol_fraction or 0):.1f} %")
    if result.profile is not None and not result.profile.available:
        console.print(f"profile: unavailable ({result.profile.reason})")
    if result.error is not None:
        console.print(f"[red]{result.error.type}[/red]: ", end="")
        console.print(result.error.message, markup=False, highlight=False)
        tail = result.error.stderr_tail or result.error.traceback_tail
        first = first_error_line(tail) if result.compile is not None and not result.compile.ok else None
        if first and first not in tail[-TAIL_CHARS:]:
            console.print(f"first error: {first}", markup=False, highlight=False, soft_wrap=True)
            console.print(f"... last {TAIL_CHARS} characters of the compiler output:", style="dim")
        if tail:
            console.print(tail[-TAIL_CHARS:], markup=False, highlight=False)
    prov = result.provenance
    device = prov.device.name if prov.device else "?"
    console.print(f"[dim]track {prov.track}, {device}, torch {prov.versions.get('torch')}, "
                  f"{prov.duration_s:.1f} s, sandbox {prov.sandbox or 'in-process'}[/dim]")
    if verbose and prov.stage_seconds:
        console.print("[dim]seconds per stage: " + stage_seconds_line(prov.stage_seconds) + "[/dim]")


def stage_seconds_line(seconds: dict[str, float]) -> str:
    """`sandbox 0.1, task 0.3, build 0.5, ...` in the pipeline's order, then anything else."""
    order = ["sandbox", "task", "build", "correctness", "hidden_shapes", "baselines_compile", "timing", "profile"]
    names = [n for n in order if n in seconds] + [n for n in seconds if n not in order and n != "wall"]
    line = ", ".join(f"{n} {seconds[n]:.1f}" for n in names)
    return line + (f" (wall {seconds['wall']:.1f})" if "wall" in seconds else "")


def _interval(ci: tuple[float, float] | None) -> str:
    return "" if ci is None else f" (95 % interval {ci[0]:.2f}-{ci[1]:.2f}x)"


TAIL_CHARS = 1500
# A compiler's diagnostic line: "file:line:col: error: ...", "error: ...", nvcc's "file(line): error".
_ERROR_LINE = re.compile(r"(^|[:\s)])(fatal )?error\b", re.IGNORECASE)


def first_error_line(text: str) -> str | None:
    """The first diagnostic that says error: with thousands of follow-on errors the cause is the
    first one, and a tail shows only the last."""
    for line in text.splitlines():
        if not line.startswith("$ ") and _ERROR_LINE.search(line):
            return line.strip()
    return None


def _num(value: float | None) -> str:
    return "" if value is None else f"{value:.3g}"
