"""`leaderboard show` and `leaderboard report` over a populated store, through the CLI."""

from __future__ import annotations

from pathlib import Path

import pytest
from agentforge.evaluator.result import (
    CompileRecord,
    CorrectnessRecord,
    EvalResult,
    Flag,
    RooflineRecord,
    Stage,
    Status,
    TimingRecord,
    TimingStats,
)
from typer.testing import CliRunner

from agentforge.cli import app
from agentforge.leaderboard.board import standings
from agentforge.leaderboard.report import write_report
from agentforge.store import ResultsStore

TASKS = [("level1/a", 1), ("level1/b", 1), ("level2/c", 2), ("level2/d", 2)]


def _result(task: str, speedup: float | None, flags: tuple[Flag, ...] = ()) -> EvalResult:
    def stats(us: float) -> TimingStats:
        return TimingStats(us, us, 0.0, us, us, 1, 0.0)

    ok = speedup is not None
    return EvalResult(
        task_name=task, candidate_hash=task, backend="cpu", status=Status.OK if ok else Status.MISMATCH,
        stage=Stage.DONE, compile=CompileRecord(ok=True, backend="cpu"),
        correctness=(CorrectnessRecord("default", 42, ok),), flags=flags,
        timing=TimingRecord("default", "host-monotonic", stats(10.0),
                            {"eager": stats(10.0 * speedup), "compile-max-autotune": stats(12.0)}) if ok else None,
        roofline=RooflineRecord(1.0, 1.0, 1.0, 1.0, 0.3, "memory-bound"),
    )


@pytest.fixture
def url(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'board.db'}"
    with ResultsStore(url) as store:
        store.register_suite("tasks", [(t, lv, None) for t, lv in TASKS])
        entries = {
            "fast": {"level1/a": 2.5, "level1/b": 1.3, "level2/c": 0.9},
            "slow": {"level1/a": 1.1, "level1/b": None, "level2/d": 3.0},
        }
        for entry, speeds in entries.items():
            store.ensure_entry(entry, kind="eval")
            for task, speed in speeds.items():
                for track in ("hardened", "kernelbench"):
                    store.add_evaluation(f"{entry}{task}{track}", entry=entry, suite="tasks", task=task,
                                         track=track, result=_result(task, speed))
        store.ensure_entry("cheat", kind="eval")
        store.add_evaluation("cheat", entry="cheat", suite="tasks", task="level1/a", track="hardened",
                             result=_result("level1/a", 50.0, (Flag("torch_fallback", "aten::relu"),)))
        store.record_run(entry="fast", suite="tasks", task="level1/a", status="done", cost_usd=0.4,
                         tokens=2000, minutes=3.0)
    return url


def test_standings_are_ranked(url: str) -> None:
    with ResultsStore(url) as store:
        found = standings(store, track="hardened")
    assert [s.entry for s in found] == ["fast", "slow", "cheat"]
    fast = found[0].metrics
    assert fast.fast_p[1.0] == pytest.approx(2 / 4) and fast.correctness_rate == pytest.approx(3 / 4)
    assert fast.usd_per_task == pytest.approx(0.4)
    cheat = found[2].metrics
    assert cheat.correctness_rate == 0.0 and cheat.flag_rate == 1.0


def test_show_prints_a_sorted_table(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from agentforge.cli import common

    monkeypatch.setattr(common.console, "width", 250)
    out = CliRunner().invoke(app, ["leaderboard", "show", "--results-url", url, "--track", "hardened"])
    assert out.exit_code == 0, out.output
    assert "tasks — hardened (4 tasks)" in out.output
    assert out.output.index("fast") < out.output.index("slow") < out.output.index("cheat")
    assert "kernelbench" not in out.output


def test_show_accepts_a_suite_spec(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    with ResultsStore(url) as store:
        store.register_suite("tasks:level1", [("level1/a", 1, None)])
        store.ensure_entry("e", kind="eval")
        store.add_evaluation("k", entry="e", suite="tasks:level1", task="level1/a", track="hardened",
                             result=_result("level1/a", 2.0))
    (tmp_path / "tasks" / "level1").mkdir(parents=True)
    (tmp_path / "tasks" / "level1" / "a.py").write_text("")
    out = CliRunner().invoke(app, ["leaderboard", "show", "--results-url", url, "--suite", "level1"],
                             env={"AGENTFORGE_TASKS_ROOT": str(tmp_path / "tasks")})
    assert out.exit_code == 0, out.output
    assert "tasks:level1" in out.output


def test_show_on_an_empty_store(tmp_path: Path) -> None:
    out = CliRunner().invoke(app, ["leaderboard", "show", "--results-url", f"sqlite:///{tmp_path / 'e.db'}"])
    assert out.exit_code == 1 and "no leaderboard results" in out.output


@pytest.mark.parametrize("fmt", ["md", "html"])
def test_report_with_plots(url: str, tmp_path: Path, fmt: str) -> None:
    out_dir = tmp_path / "report"
    result = CliRunner().invoke(app, ["leaderboard", "report", "--results-url", url, "--format", fmt,
                                      "--out", str(out_dir)])
    assert result.exit_code == 0, result.output
    text = (out_dir / f"report.{fmt}").read_text()
    pngs = sorted((out_dir / "plots").glob("*.png"))
    assert len(pngs) == 8  # four plots for each of two tracks
    assert all(p.stat().st_size > 1000 and p.read_bytes()[:4] == b"\x89PNG" for p in pngs)
    for png in pngs:
        assert f"plots/{png.name}" in text
    assert "fast_p" in text and "tasks — kernelbench" in text


def test_report_rejects_unknown_format(url: str, tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["leaderboard", "report", "--results-url", url, "--format", "pdf"])
    assert result.exit_code == 2
    with pytest.raises(ValueError, match="md, html"):
        write_report([], tmp_path, "pdf")


def test_help_is_instant_and_lists_commands() -> None:
    out = CliRunner().invoke(app, ["leaderboard", "--help"])
    assert out.exit_code == 0
    for command in ("run", "eval", "show", "report"):
        assert command in out.output


def test_overhead_bound_pairs_are_counted_and_never_headlined(tmp_path: Path) -> None:
    """Issue #17: a pair within 20x of the harness floor is marked in the report, kept out of the
    geomean and fast_p > 0, and its task still counts as correct."""
    def stats(us: float) -> TimingStats:
        return TimingStats(us, us, 0.0, us, us, 1, 0.0)

    bound = _result("level1/b", 4.0)
    bound = EvalResult(**{**vars(bound), "timing": TimingRecord(
        "default", "host-monotonic", stats(10.0), {"eager": stats(40.0)}, floor=stats(5.0),
        overhead_bound=("candidate", "eager"))})
    url = f"sqlite:///{tmp_path / 'bound.db'}"
    with ResultsStore(url) as store:
        store.register_suite("tasks", [(t, lv, None) for t, lv in TASKS])
        store.ensure_entry("e", kind="eval")
        store.add_evaluation("a", entry="e", suite="tasks", task="level1/a", track="hardened",
                             result=_result("level1/a", 2.0))
        store.add_evaluation("b", entry="e", suite="tasks", task="level1/b", track="hardened", result=bound)
        (standing,) = standings(store)
    m = standing.metrics
    assert m.per_task["level1/b"].speedup == pytest.approx(4.0)  # the store keeps the ratio
    assert m.n_overhead_bound == 1 and m.correctness_rate == pytest.approx(2 / 4)
    assert m.geomean_speedup == pytest.approx(2.0) and m.fast_p[1.0] == pytest.approx(1 / 4)
    text = write_report([standing], tmp_path / "r").read_text()
    header = next(line for line in text.splitlines() if line.startswith("| entry"))
    row = next(line for line in text.splitlines() if line.startswith("| e |"))
    cells = dict(zip(header.strip("|").split("|"), row.strip("|").split("|"), strict=True))
    assert cells[" overhead-bound "].strip() == "1" and cells[" geomean x "].strip() == "2.00"
    assert "overhead-bound" in text.split("\n\n")[1]  # the header says what the column means


def test_show_has_a_per_task_table_with_reasons(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 30: a board at 0 % must say, per task, what happened."""
    from agentforge.cli import common

    monkeypatch.setattr(common.console, "width", 200)
    out = CliRunner().invoke(app, ["leaderboard", "show", "--results-url", url, "--track", "hardened"])
    assert out.exit_code == 0, out.output
    assert "slow on tasks — hardened: per task" in out.output
    lines = out.output.splitlines()
    table = lines[next(i for i, line in enumerate(lines) if "slow on tasks — hardened: per task" in line):]
    row = {cells[0]: cells[1:] for cells in (_cells(line) for line in table[:12]) if len(cells) == 4}
    assert row["level1/a"][:2] == ["ok", "1.10"]
    assert row["level1/b"][0] == "mismatch" and row["level1/b"][2] == "shape 'default': mismatch"
    assert row["level2/c"] == ["missing", "-", "no evaluation stored for this task"]


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("│┃").split("│")] if "│" in line else []


@pytest.mark.parametrize("fmt", ["md", "html"])
def test_reports_carry_the_per_task_tables(url: str, tmp_path: Path, fmt: str) -> None:
    result = CliRunner().invoke(app, ["leaderboard", "report", "--results-url", url, "--format", fmt,
                                      "--out", str(tmp_path / "r"), "--track", "hardened"])
    assert result.exit_code == 0, result.output
    text = (tmp_path / "r" / f"report.{fmt}").read_text()
    if fmt == "md":
        assert "### slow: per task" in text
        assert "| level1/b | mismatch | - | shape 'default': mismatch |" in text
        assert "| level1/a | ok | 2.50 | accepted, timed on shape 'default' |" in text
    else:
        assert "<h3>slow: per task</h3>" in text
        cells = ["level1/b", "mismatch", "-", "shape &#x27;default&#x27;: mismatch"]
        assert "<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>" in text


def test_the_per_task_plot_marks_each_failure(url: str) -> None:
    from matplotlib.figure import Figure

    from agentforge.leaderboard.report import _draw_per_task

    with ResultsStore(url) as store:
        group = standings(store, track="hardened")
    ax = Figure().add_subplot()
    _draw_per_task(ax, group)
    marks = sorted(t.get_text() for t in ax.texts)
    # fast: level2/d missing; slow: level1/b mismatch, level2/c missing; cheat: a flagged, b, c, d missing
    assert marks == sorted(["missing", "mismatch", "missing", "rejected", "missing", "missing", "missing"])
    assert "not accepted (its status above)" in [t.get_text() for t in ax.get_legend().get_texts()]
