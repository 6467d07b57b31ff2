"""The plot of rounds (issue 19, finding 6): a round with no accepted kernel has no speedup, so
it is marked along the bottom edge and never drawn, nor scaled, as a speedup of 0."""

from __future__ import annotations

from pathlib import Path

from agentforge.agent.report import draw_rounds, write_plot

HISTORY = [
    {"round": 1, "status": "compile_error", "speedup": None, "best_speedup": None},
    {"round": 2, "status": "ok", "speedup": 1.5, "best_speedup": 1.5},
    {"round": 3, "status": "mismatch", "speedup": None, "best_speedup": 1.5},
    {"round": 4, "status": "ok", "speedup": 2.0, "best_speedup": 2.0},
]


def test_failed_rounds_are_not_drawn_as_speedup_zero(tmp_path: Path):
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    fig, ax = plt.subplots()
    draw_rounds(ax, HISTORY)
    in_data_units = [line for line in ax.lines if line.get_transform() == ax.transData]
    assert all(0.0 not in list(line.get_ydata()) for line in in_data_units)
    [marks] = [line for line in ax.lines if line.get_label().startswith("not accepted")]
    assert list(marks.get_xdata()) == [1, 3] and marks.get_transform() != ax.transData
    assert ax.get_ylim()[0] > 0.5  # the axis is not stretched down to a speedup nobody measured
    plt.close(fig)
    assert write_plot(tmp_path / "speedup.png", HISTORY).stat().st_size > 0
