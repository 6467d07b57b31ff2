"""What a finished run leaves for a person: the best kernel as a file, a Markdown report (rounds,
verdicts, speedups, cost, the best kernel's profile) and a plot of speedup per round."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agentforge.agent.artifacts import ArtifactStore
from agentforge.agent.feedback import describe_result, describe_result_markdown
from agentforge.evaluator.result import EvalResult

BEST_KERNEL = "best_kernel.py"
REPORT = "report.md"
PLOT = "speedup.png"


def write_outputs(run_dir: Path, state: Mapping[str, Any], store: ArtifactStore,
                  meta: Mapping[str, Any]) -> dict[str, str | None]:
    """Write the best kernel, the report and the plot; returns their paths (None when absent)."""
    best = state.get("best")
    kernel_path = None
    if best:
        kernel_path = run_dir / BEST_KERNEL
        kernel_path.write_text(str(store.get_json(best["candidate_ref"])["source"]))
    plot_path = write_plot(run_dir / PLOT, state.get("history") or [])
    report_path = run_dir / REPORT
    report_path.write_text(render_report(state, store, meta, kernel_path, plot_path))
    return {"best_kernel": str(kernel_path) if kernel_path else None, "report": str(report_path),
            "plot": str(plot_path) if plot_path else None}


def render_report(state: Mapping[str, Any], store: ArtifactStore, meta: Mapping[str, Any],
                  kernel_path: Path | None, plot_path: Path | None) -> str:
    best = state.get("best")
    usage = state.get("usage") or {}
    lines = [
        f"# agentforge optimize: {state.get('task_name')}",
        "",
        f"- Run: `{state.get('run_id')}`; backend {state.get('backend')} "
        f"on {device_text(meta.get('device_spec', '?'))}",
        f"- Provider: {meta.get('provider')} (coder {meta.get('coder_model')}, "
        f"judge {meta.get('judge_model')})",
        f"- Stopped: {state.get('stop_reason') or 'not yet'}",
        f"- Target: {(meta.get('agent') or {}).get('target', 'compile')}",
        f"- Rounds: {state.get('round', 0)}; working time {float(state.get('elapsed_s', 0)) / 60:.1f} min",
        f"- LLM: {usage.get('calls', 0)} calls, {usage.get('input_tokens', 0)} input + "
        f"{usage.get('output_tokens', 0)} output tokens, ${usage.get('cost_usd', 0.0):.4f}, "
        f"{usage.get('retries', 0)} retries, {usage.get('no_code_replies', 0)} replies without code",
    ]
    if usage.get("unpriced_models"):
        lines.append(f"- Unpriced models (cost counted as $0): {', '.join(usage['unpriced_models'])}")
    if state.get("approved") is not None:
        lines.append(f"- Review: {'approved' if state['approved'] else 'rejected'} by a person")
    lines += ["", "## Best kernel", ""]
    if best:
        result = EvalResult.from_json(store.get_text(best["result_ref"])) if best.get("result_ref") else None
        vs_compile = best.get("speedup_vs_compile")
        lines += [
            f"Round {best['round']}, code `{best['code_hash']}`: {_x(best.get('speedup'))} vs eager"
            + (f", {_x(vs_compile)} vs torch.compile" if vs_compile else "")
            + f"; {_us(best.get('candidate_us'))} (eager {_us(best.get('eager_us'))}).",
            f"File: `{kernel_path.name if kernel_path else '-'}`.",
        ]
        if result is not None and result.overhead_bound_pair():
            lines.append(f"Overhead-bound: {', '.join(result.timing.overhead_bound)} within 20x of the harness floor "
                         f"({_us(result.floor_us)}), so this ratio is not claimed as a speedup; time a larger shape.")
        if result is not None:
            lines += ["", "### Its measurements", "", "```", describe_result(result), "```", "",
                      _demote(describe_result_markdown(result))]
    else:
        lines.append("No correct kernel was found.")
    lines += ["", "## Rounds", "",
              "| round | mode | code | status | speedup | best | outcome | verdict it followed | cost so far |",
              "|---|---|---|---|---|---|---|---|---|"]
    for r in state.get("history") or []:
        lines.append(
            f"| {r['round']} | {r['mode']} | `{r.get('code_hash') or '-'}` | {r['status']} "
            f"| {_x(r.get('speedup'))} | {_x(r.get('best_speedup'))} | {_cell(r['outcome'])} "
            f"| {_cell(r.get('verdict') or '-')} "
            f"| ${r.get('cost_usd', 0):.4f} |"
        )
    history = list(state.get("history") or [])
    if any(r.get("node") for r in history):
        lines += ["", *render_tree(history, meta, state.get("batches"))]
    lines += ["", *render_knowledge(history, meta)]
    if plot_path:
        lines += ["", f"![speedup per round]({plot_path.name})"]
    lines += ["", "Every prompt, reply, candidate, verdict and evaluation result of this run is kept under "
              "`objects/` (content-addressed; the checkpoint refers to them by hash).", ""]
    return "\n".join(lines)


# A sequence of quoted names in a device spec, as run.json keeps the CPU's flags: ('avx', 'avx2', 'fma').
_QUOTED_SEQUENCE = re.compile(r"[(\[]\s*((?:'[^']*'\s*,?\s*)+)[)\]]")


def device_text(spec: str) -> str:
    """The device's spec for a person: the CPU's flags as `avx, avx2, fma`, not a Python tuple."""
    return _QUOTED_SEQUENCE.sub(lambda m: ", ".join(re.findall(r"'([^']*)'", m.group(1))), str(spec))


def render_tree(history: list[Mapping[str, Any]], meta: Mapping[str, Any],
                batches: list[Mapping[str, Any]] | None = None) -> list[str]:
    """The search tree: per round, each parent and the children proposed from it, with their
    strategies, verdicts and speedups."""
    search = meta.get("search") or {}
    lines = ["## Search tree", "",
             f"{search.get('candidates', '?')} candidates per round, a beam of {search.get('beam', '?')}; "
             "`rRcI` is round R's candidate I, and each line names the kernel it was proposed from.", ""]
    batches = {b["round"]: b for b in batches or []}
    for rnd in sorted({r["round"] for r in history}):
        records = [r for r in history if r["round"] == rnd]
        b = batches.get(rnd)
        checked = f"{b['checked']} built and checked at once in {b['check_s']:.1f} s, " if b and b["checked"] else ""
        lines.append(f"- round {rnd}" + (f": {checked}{b['measured']} evaluated and timed one at a time in "
                                         f"{b['measure_s']:.1f} s" if b else ""))
        for parent in dict.fromkeys(r.get("parent") for r in records):
            children = [r for r in records if r.get("parent") == parent]
            verdict = children[0].get("verdict")
            lines.append(f"  - from {parent or 'root (no kernel yet)'}" + (f", following '{_cell(verdict)}'"
                                                                          if verdict else ""))
            for r in children:
                speed = f", {_x(r.get('speedup'))} vs eager" if r.get("speedup") else ""
                lines.append(f"    - {r.get('node')} ({_cell(r.get('strategy') or '-')}; T={r.get('temperature')}): "
                             f"`{r.get('code_hash') or '-'}` {r['status']}{speed}; {_cell(r['outcome'])}")
    return lines


def render_knowledge(history: list[Mapping[str, Any]], meta: Mapping[str, Any]) -> list[str]:
    """Which technique notes and scored exemplars the coder's prompts carried."""
    switches = meta.get("knowledge") or {}
    notes: dict[str, int] = {}
    exemplars: dict[str, Mapping[str, Any]] = {}
    why_none = None
    for r in history:
        used = r.get("knowledge") or {}
        for name in used.get("notes", []):
            notes[name] = notes.get(name, 0) + 1
        for e in used.get("exemplars", []):
            exemplars[e["code"]] = e
        why_none = used.get("exemplar_note") or why_none
    lines = ["## Knowledge in the coder's prompt", ""]
    if switches.get("skills") is False:
        lines.append("- Technique notes: switched off (--no-skills)")
    else:
        listed = ", ".join(f"`{n}` ({k} prompts)" for n, k in notes.items())
        lines.append(f"- Technique notes: {listed or 'none matched the task'}")
    if switches.get("exemplars") is False:
        lines.append("- Exemplars: switched off (--no-exemplars)")
    elif exemplars:
        lines.append("- Exemplars: " + "; ".join(f"`{e['code']}` from {e['task']} ({_x(e['speedup'])} vs eager)"
                                                 for e in exemplars.values()))
    else:
        lines.append(f"- Exemplars: none ({why_none or 'none used'})")
    return lines


def write_plot(path: Path, history: list[Mapping[str, Any]]) -> Path | None:
    """Speedup vs eager per round and the best so far; rounds with no accepted kernel are
    marked along the bottom edge, not drawn as a speedup of 0 (they have none)."""
    if not history:
        return None
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4), dpi=100)
    draw_rounds(ax, history)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def draw_rounds(ax: Any, history: list[Mapping[str, Any]]) -> None:
    """The plot's content on `ax`: measured speedups in data units; failed rounds as markers
    whose height is a fixed share of the axes (x in rounds, y in axes units)."""
    rounds = [r["round"] for r in history]
    ok = [(r["round"], r["speedup"]) for r in history if r.get("speedup")]
    failed = [r["round"] for r in history if not r.get("speedup")]
    best = [r.get("best_speedup") or float("nan") for r in history]
    if ok:
        ax.plot(*zip(*ok, strict=True), "o", label="candidate")
    if failed:
        ax.plot(failed, [0.04] * len(failed), "x", color="tab:red", clip_on=False,
                transform=ax.get_xaxis_transform(), label="not accepted (no speedup)")
    ax.step(rounds, best, where="post", color="tab:green", label="best so far")
    ax.axhline(1.0, color="grey", lw=0.8, ls="--")
    ax.set_xlabel("round")
    ax.set_ylabel("speedup vs eager PyTorch")
    ax.set_xticks(rounds)
    ax.legend(loc="best")


def _demote(markdown: str) -> str:
    """Nest the evaluator's Markdown headings under this report's section."""
    return "\n".join("##" + line if line.startswith("#") else line for line in markdown.splitlines())


def _x(value: float | None) -> str:
    return f"{value:.2f}x" if value else "-"


def _us(value: float | None) -> str:
    return f"{value:.2f} us" if value else "-"


def _cell(text: str) -> str:
    return text.replace("|", "/").replace("\n", " ")
