"""What the coder and the judge read about an evaluation: a compact text rendering of an
EvalResult (status, compiler log, correctness, integrity flags, timings, roofline, profile)."""

from __future__ import annotations

from agentforge.evaluator.result import EvalResult


def describe_result(result: EvalResult, max_log: int = 3000) -> str:
    lines = [f"Status: {result.status.value} (stage {result.stage.value})"]
    if result.compile is not None and (not result.compile.ok or result.compile.log_tail.strip()):
        lines.append(f"Compiler ({result.compile.path or result.compile.backend}, "
                     f"{'ok' if result.compile.ok else 'failed'}):\n{result.compile.log_tail[-max_log:]}")
    for record in result.correctness:
        if not record.passed:
            lines.append(f"Correctness failed on shape {record.shape} (seed {record.seed}): "
                         f"{record.failed_check}; max abs err {record.max_abs_err}, max rel err "
                         f"{record.max_rel_err}. {record.message}")
    for flag in result.flags:
        lines.append(f"Integrity flag [{flag.severity}] {flag.rule}: {flag.evidence}")
    if result.error is not None:
        err = result.error
        extra = f" (signal {err.signal})" if err.signal else ""
        lines.append(f"Error {err.type}{extra}: {err.message}")
        tail = err.traceback_tail or err.stderr_tail
        if tail:
            lines.append(tail[-max_log:])
    if result.timing is not None:
        t = result.timing
        lines.append(f"Timing ({t.method}, shape {t.shape}): candidate {t.candidate.median_us:.2f} us median "
                     f"(n={t.candidate.n}, rel. stderr {t.candidate.rel_stderr:.3f})")
        for name, stats in sorted(t.baselines.items()):
            lines.append(f"  baseline {name}: {stats.median_us:.2f} us")
        if t.floor is not None:
            lines.append(f"  harness floor (an empty candidate, timed the same way): {t.floor.median_us:.2f} us")
    if result.speedup is not None and result.overhead_bound_pair():
        lines.append(f"Ratio {result.speedup:.2f}x vs eager, overhead-bound ({', '.join(result.timing.overhead_bound)} "
                     "within 20x of the harness floor): it measures the harness as much as the kernel; "
                     "a larger shape would tell")
    elif result.speedup is not None:
        vs_compile = (f", {result.speedup_vs_compile:.2f}x vs torch.compile"
                      if result.speedup_vs_compile is not None else "")
        lines.append(f"Speedup: {result.speedup:.2f}x vs eager{vs_compile}")
    lines.extend(_roofline_and_profile(result))
    return "\n".join(lines)


def _roofline_and_profile(result: EvalResult) -> list[str]:
    """The evaluator's own compact hardware block: roofline verdict, compiler resources, the
    curated profile metrics and bottleneck hints (timing-only when no profile could be taken)."""
    from agentforge.evaluator.hardware.render import render_prompt

    block = render_prompt(roofline=result.roofline, profile=result.profile, compile=result.compile,
                          measured_us=result.candidate_us)
    return [block] if block.strip() else []


def describe_result_markdown(result: EvalResult) -> str:
    """The fuller Markdown version, with tables, for run reports."""
    from agentforge.evaluator.hardware.render import render_markdown

    return render_markdown(roofline=result.roofline, profile=result.profile, compile=result.compile,
                           measured_us=result.candidate_us)
