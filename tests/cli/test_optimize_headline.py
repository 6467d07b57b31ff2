"""What `agentforge optimize` (and so `make demo`) ends with: the best kernel's measured speedup
with its shape and roofline fraction, or, for an overhead-bound pair, no speedup claimed."""

from __future__ import annotations

import re
from pathlib import Path

from agentforge.cli.optimize_cmd import best_headline
from agentforge.kernel_library import find_kernel
from agentforge.task import CPU_SHAPE, load_task

REPO = Path(__file__).resolve().parents[2]
BEST = {"round": 2, "speedup": 1.8, "speedup_vs_compile": None, "candidate_us": 5000.0, "eager_us": 9000.0}


def test_a_measured_speedup_is_headlined_with_its_shape_and_roofline_fraction() -> None:
    line = best_headline(BEST, {"shape": "cpu", "overhead_bound": [], "floor_us": 9.0, "sol_fraction": 0.125,
                                "roofline_label": "memory-bound", "ceilings_source": "measured"})
    assert line.startswith("measured speedup on shape 'cpu': 1.80x vs eager (5000.0 us vs eager 9000.0 us)")
    assert "roofline: 12 % of the speed of light (memory-bound, measured ceilings)" in line


def test_an_overhead_bound_pair_is_not_called_a_speedup() -> None:
    line = best_headline(BEST, {"shape": "small", "overhead_bound": ["candidate", "eager"], "floor_us": 9.5})
    assert "NOT a speedup" in line and "measured speedup" not in line
    assert "candidate, eager within 20x of the harness floor (9.5 us)" in line
    assert "roofline: unknown" in line  # no ceilings: said, not left blank


def test_the_demo_task_is_a_level2_fusion_with_a_cpu_kernel_and_a_cpu_shape() -> None:
    makefile = (REPO / "Makefile").read_text()
    task = re.search(r"^DEMO_TASK \?= (\S+)$", makefile, re.MULTILINE).group(1)
    assert task.startswith("level2/") and "fusion" in load_task(task).tags
    assert find_kernel(task, "cpu", gpu="cpu") is not None
    assert CPU_SHAPE in load_task(task).shapes
    assert "--shape small" not in makefile  # the cpu shape is the CPU backend's default
