"""Leaderboard reports: a Markdown or HTML page with tables and matplotlib plots.

Plots per (suite, track): the distribution of per-task speedups per level, the fast_p curve
against p, per-task speedup bars with entries side by side, and the headline metrics of the
entries side by side. Figures use matplotlib's object API (no pyplot, no global backend).
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from agentforge.leaderboard.board import Standing
from agentforge.leaderboard.metrics import SPEEDUP_CLIP, clip, fast_p
from agentforge.leaderboard.task_rows import TaskRow

FORMATS = ("md", "html")
COLUMNS = (
    ("entry", "entry"), ("correct", "correct"), ("fast_1", "fast_1"), ("fast_1.5", "fast_1.5"),
    ("fast_2", "fast_2"), ("geomean", "geomean x"), ("median", "median x"), ("geomean_all", "geomean (all) x"),
    ("geomean_vs_compile", "vs compile x"), ("sol", "SoL"), ("flag_rate", "flagged"),
    ("overhead_bound", "overhead-bound"), ("usd_per_task", "$ / task"), ("tokens_per_task", "tokens / task"),
    ("minutes_per_task", "min / task"),
)

TASK_COLUMNS = (("task", "task"), ("status", "status"), ("speedup", "speedup x"), ("reason", "reason"))


@dataclass(frozen=True)
class Section:
    suite: str
    track: str
    standings: tuple[Standing, ...]
    plots: dict[str, Path]


def fmt(key: str, value: float | int | str | None) -> str:
    """One cell, rounded for reading (the store keeps full precision)."""
    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    if key in ("correct", "flag_rate", "sol") or key.startswith("fast_"):
        return f"{100 * value:.1f}%"
    if key == "usd_per_task":
        return f"{value:.3f}"
    if key == "overhead_bound":
        return f"{value:d}"
    if key == "tokens_per_task":
        return f"{value:,.0f}"
    return f"{value:.2f}"


def table_rows(standings: Sequence[Standing]) -> list[list[str]]:
    rows = []
    for s in standings:
        data = {"entry": s.entry, **s.metrics.as_row()}
        rows.append([fmt(key, data.get(key)) for key, _ in COLUMNS])
    return rows


def speedup_cell(row: TaskRow) -> str:
    """A task's speedup vs eager, with its interval when the verdict has one; '-' when it was not
    accepted or not timed; an overhead-bound ratio is said to be one."""
    if not row.accepted or row.speedup is None:
        return "-"
    text = f"{row.speedup:.2f}"
    if row.speedup_ci is not None:
        text += f" [{row.speedup_ci[0]:.2f}, {row.speedup_ci[1]:.2f}]"
    return text + " (overhead-bound)" if row.overhead_bound else text


def task_table_rows(rows: Sequence[TaskRow]) -> list[list[str]]:
    """The per-task table's cells: task, status, speedup, reason."""
    return [[r.task, r.status, speedup_cell(r), r.reason] for r in rows]


def write_report(standings: Sequence[Standing], out_dir: Path, fmt_name: str = "md") -> Path:
    """Write report.md or report.html (and its plots under plots/) into `out_dir`."""
    if fmt_name not in FORMATS:
        raise ValueError(f"unknown report format {fmt_name!r}; choose one of: {', '.join(FORMATS)}")
    out_dir.mkdir(parents=True, exist_ok=True)
    sections = []
    for (suite, track), group in _groups(standings).items():
        plots = _plots(group, out_dir / "plots", _slug(f"{suite}-{track}"))
        sections.append(Section(suite, track, tuple(group), plots))
    text = _markdown(sections, out_dir) if fmt_name == "md" else _html(sections, out_dir)
    path = out_dir / f"report.{fmt_name}"
    path.write_text(text)
    return path


# ----- rendering ----------------------------------------------------------------------------
def _groups(standings: Sequence[Standing]) -> dict[tuple[str, str], list[Standing]]:
    groups: dict[tuple[str, str], list[Standing]] = {}
    for s in standings:
        groups.setdefault((s.suite, s.track), []).append(s)
    return groups


def _header() -> str:
    low, high = SPEEDUP_CLIP
    return (f"Generated {datetime.now(UTC):%Y-%m-%d %H:%M} UTC. Speedups are eager time / candidate time, "
            f"clipped per task to [{low:g}, {high:g}]; fast_p counts every task of the suite "
            "(missing or rejected tasks count as not correct). A task whose candidate or eager time lies "
            "within 20x of the timing harness's own floor is overhead-bound: it counts as correct, its "
            "ratio gives no headline (no fast_p above 0, no geomean or median), the overhead-bound "
            "column counts such tasks and the per-task plot hatches their bars. See docs/leaderboard.md.")


def _markdown(sections: Sequence[Section], out_dir: Path) -> str:
    lines = ["# agentforge leaderboard", "", _header(), ""]
    for sec in sections:
        lines += [f"## {sec.suite} — {sec.track}", ""]
        lines.append("| " + " | ".join(title for _, title in COLUMNS) + " |")
        lines.append("|" + "---|" * len(COLUMNS))
        lines += ["| " + " | ".join(row) + " |" for row in table_rows(sec.standings)]
        lines.append("")
        for s in sec.standings:
            lines += [f"### {s.entry}: per task", ""]
            lines.append("| " + " | ".join(title for _, title in TASK_COLUMNS) + " |")
            lines.append("|" + "---|" * len(TASK_COLUMNS))
            lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in task_table_rows(s.rows)]
            lines.append("")
        for title, path in sec.plots.items():
            lines += [f"![{title}]({path.relative_to(out_dir).as_posix()})", ""]
    return "\n".join(lines)


def _html(sections: Sequence[Section], out_dir: Path) -> str:
    esc = html.escape
    parts = ["<!doctype html><html><head><meta charset='utf-8'><title>agentforge leaderboard</title>",
             "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
             "td,th{border:1px solid #ccc;padding:4px 8px;text-align:right}td:first-child{text-align:left}"
             "table.tasks td{text-align:left}img{max-width:900px;display:block;margin:1em 0}</style></head><body>",
             "<h1>agentforge leaderboard</h1>", f"<p>{esc(_header())}</p>"]
    for sec in sections:
        parts.append(f"<h2>{esc(sec.suite)} — {esc(sec.track)}</h2><table><tr>")
        parts += [f"<th>{esc(title)}</th>" for _, title in COLUMNS]
        parts.append("</tr>")
        for row in table_rows(sec.standings):
            parts.append("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in row) + "</tr>")
        parts.append("</table>")
        for s in sec.standings:
            parts.append(f"<h3>{esc(s.entry)}: per task</h3><table class='tasks'><tr>")
            parts += [f"<th>{esc(title)}</th>" for _, title in TASK_COLUMNS]
            parts.append("</tr>")
            for row in task_table_rows(s.rows):
                parts.append("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in row) + "</tr>")
            parts.append("</table>")
        for title, path in sec.plots.items():
            parts.append(f"<img alt='{esc(title)}' src='{esc(path.relative_to(out_dir).as_posix())}'>")
    parts.append("</body></html>")
    return "\n".join(parts)


def _md_cell(text: str) -> str:
    """A table cell's text: a '|' would end the cell, a newline the row."""
    return " ".join(text.split()).replace("|", "\\|")


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_")


# ----- plots --------------------------------------------------------------------------------
def _plots(group: Sequence[Standing], plot_dir: Path, stem: str) -> dict[str, Path]:
    from matplotlib.figure import Figure

    plot_dir.mkdir(parents=True, exist_ok=True)
    made: dict[str, Path] = {}
    for title, draw, size in (
        ("speedup distribution per level", _draw_levels, (8, 4)),
        ("fast_p against p", _draw_fast_p, (7, 4)),
        ("per-task speedup", _draw_per_task, (10, 4.5)),
        ("entries side by side", _draw_entries, (8, 4)),
    ):
        fig = Figure(figsize=size, layout="constrained")
        draw(fig.add_subplot(), group)
        fig.suptitle(f"{group[0].suite} — {group[0].track}: {title}", fontsize=10)
        path = plot_dir / f"{stem}-{_slug(title)}.png"
        fig.savefig(path, dpi=110)
        made[title] = path
    return made


def _speedups(s: Standing) -> dict[str, float]:
    """Accepted tasks' speedups vs eager that may be headlined (not overhead-bound)."""
    return {t: clip(o.headline_speedup) for t, o in s.metrics.per_task.items()
            if o.accepted and o.headline_speedup is not None}


def overhead_bound_tasks(s: Standing) -> dict[str, float]:
    """Accepted tasks whose eager pair is overhead-bound, with the ratio the store keeps."""
    return {t: clip(o.speedup) for t, o in s.metrics.per_task.items()
            if o.accepted and o.overhead_bound and o.speedup is not None}


def _draw_levels(ax, group: Sequence[Standing]) -> None:
    levels = sorted({lv for s in group for lv in s.levels.values()}, key=lambda v: (v is None, v or 0))
    width = 0.8 / max(1, len(group))
    handles = []
    for i, s in enumerate(group):
        speed = _speedups(s)
        data = [[v for t, v in speed.items() if s.levels.get(t) == lv] or [float("nan")] for lv in levels]
        positions = [k + i * width for k in range(len(levels))]
        color = f"C{i % 10}"
        boxes = ax.boxplot(data, positions=positions, widths=width * 0.9, patch_artist=True,
                           medianprops={"color": "black"})
        for box in boxes["boxes"]:
            box.set_facecolor(color)
            box.set_alpha(0.6)
        handles.append(boxes["boxes"][0])
        for x, values in zip(positions, data, strict=True):  # the points too: levels with few tasks
            ax.scatter([x] * len(values), values, s=12, color=color, edgecolors="black", linewidths=0.4, zorder=3)
    ax.legend(handles, [s.entry for s in group], fontsize=8)
    ax.set_xticks([k + width * (len(group) - 1) / 2 for k in range(len(levels))])
    ax.set_xticklabels([f"level {lv}" if lv is not None else "other" for lv in levels])
    ax.set_yscale("log")
    ax.axhline(1.0, color="grey", lw=0.8, ls="--")
    ax.set_ylabel("speedup vs eager (accepted tasks)")


def _draw_fast_p(ax, group: Sequence[Standing]) -> None:
    ps = [i / 20 for i in range(0, 61)]
    for s in group:
        tasks = list(s.levels)
        ax.plot(ps, [fast_p(s.metrics.per_task, tasks, p) for p in ps], label=s.entry)
    ax.set_xlabel("p (speedup threshold)")
    ax.set_ylabel("fast_p")
    ax.set_ylim(0, 1.02)
    ax.legend(fontsize=8)


def _draw_per_task(ax, group: Sequence[Standing]) -> None:
    tasks = list(group[0].levels)
    width = 0.8 / max(1, len(group))
    hatched = marked = False
    for i, s in enumerate(group):
        speed, bound = _speedups(s), overhead_bound_tasks(s)
        ax.bar([k + i * width for k in range(len(tasks))], [speed.get(t, 0.0) for t in tasks], width,
               label=s.entry, color=f"C{i % 10}")
        at = [k for k, t in enumerate(tasks) if t in bound]
        if at:  # drawn, but hatched and pale: a ratio of harness overheads, not a speedup
            ax.bar([k + i * width for k in at], [bound[tasks[k]] for k in at], width, color=f"C{i % 10}",
                   alpha=0.35, hatch="//", edgecolor="black", linewidth=0.4,
                   label=None if hatched else "overhead-bound (no headline)")
            hatched = True
        marked = _mark_failures(ax, s, tasks, [k + i * width for k in range(len(tasks))], marked)
    ax.set_xticks([k + width * (len(group) - 1) / 2 for k in range(len(tasks))])
    ax.set_xticklabels([t.split("/")[-1][:18] for t in tasks], rotation=60, ha="right", fontsize=7)
    ax.axhline(1.0, color="grey", lw=0.8, ls="--")
    ax.set_ylabel("speedup vs eager (x: not accepted)")
    ax.legend(fontsize=8)


def _mark_failures(ax, s: Standing, tasks: Sequence[str], xs: Sequence[float], labelled: bool) -> bool:
    """A red x at 0 and the status written above it for each task `s` has no accepted kernel for
    (a crash, a mismatch, no kernel, missing), so an empty bar is never silent. True once the
    legend has its entry."""
    rows = {r.task: r for r in s.rows}
    failed = [(x, rows[t].status if t in rows else "missing") for x, t in zip(xs, tasks, strict=True)
              if t not in rows or not rows[t].accepted]
    if not failed:
        return labelled
    ax.scatter([x for x, _ in failed], [0.0] * len(failed), marker="x", color="red", zorder=4, clip_on=False,
               label=None if labelled else "not accepted (its status above)")
    for x, status in failed:
        ax.annotate(status, (x, 0.0), xytext=(0, 6), textcoords="offset points", rotation=90, fontsize=7,
                    color="red", ha="center", va="bottom")
    return True


def _draw_entries(ax, group: Sequence[Standing]) -> None:
    keys = ("correct", "fast_1", "fast_1.5", "fast_2")
    width = 0.8 / max(1, len(group))
    for i, s in enumerate(group):
        row = s.metrics.as_row()
        ax.bar([k + i * width for k in range(len(keys))], [float(row[k] or 0.0) for k in keys], width,
               label=s.entry)
    ax.set_xticks([k + width * (len(group) - 1) / 2 for k in range(len(keys))])
    ax.set_xticklabels(keys)
    ax.set_ylim(0, 1.02)
    ax.set_ylabel("share of suite tasks")
    ax.legend(fontsize=8)
