"""A `--backend triton` job on a machine without a GPU runs in Triton's interpreter, which costs
about 24 us per element a call: the shapes it runs are those up to `triton_interpret.MAX_ELEMENTS`,
and a larger one asked for by name is refused with the shapes that fit, never left to time out."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from agentforge.evaluator.api import make_job
from agentforge.evaluator.worker.triton_interpret import MAX_ELEMENTS

from agentforge.agent.no_gpu import interpretable, triton_without_gpu
from agentforge.agent.preflight import PreflightError
from agentforge.candidate import Candidate
from agentforge.task import load_task

REPO = Path(__file__).resolve().parents[2]
FIGURES = {"memory": {"kind": "cpu"},
           "shapes": {"small": {"numel": 210}, "odd": {"numel": 30_006_999}, "default": {"numel": MAX_ELEMENTS * 8}}}


def _job(backend: str = "triton", shapes: tuple[str, ...] = ()):
    return make_job(load_task("level1/column_max"), Candidate("", backend=backend), device="cpu", shapes=shapes)


def test_the_interpreter_runs_the_small_shapes_and_says_which_it_does_not() -> None:
    plan = triton_without_gpu(_job(), FIGURES, ("small", "odd", "default"))
    assert plan is not None and plan.executed == ("small",) and plan.compiled_only == ("odd", "default")
    assert "Triton's interpreter on small" in plan.note and "not run in it" in plan.note
    assert interpretable(FIGURES, ("small", "odd", "default")) == ("small",)


def test_a_shape_too_large_for_the_interpreter_asked_by_name_is_refused_with_what_fits() -> None:
    with pytest.raises(PreflightError, match=r"'odd' \(over 1,048,576 elements\).*--shape small"):
        triton_without_gpu(_job(shapes=("odd",)), FIGURES, ("odd",))


def test_other_backends_and_gpus_are_not_the_interpreters() -> None:
    assert triton_without_gpu(_job(backend="cpu"), FIGURES, ("small",)) is None
    assert triton_without_gpu(_job(), {**FIGURES, "memory": {"kind": "cuda"}}, ("small",)) is None


def test_cli_as_typed_the_advice_names_only_shapes_the_interpreter_runs(tmp_path: Path) -> None:
    """column_max's 'odd' shape fits in memory but would run for many minutes in the interpreter:
    the CLI once advised it. Now it is refused at once, pointing to 'small'."""
    kernel = REPO / "results" / "kernels" / "h100" / "level1" / "column_max" / "kernel.py"
    agentforge = str(Path(sys.executable).with_name("agentforge"))
    run = subprocess.run([agentforge, "eval", "level1/column_max", str(kernel),
                          "--backend", "triton", "--shape", "odd"], cwd=tmp_path, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode != 0, run.stdout + run.stderr
    assert "Triton's interpreter" in run.stderr and "--shape small" in run.stderr, run.stderr
    assert "--shape odd" not in run.stderr, run.stderr
