"""KernelBench's files as shipped, on a machine without a GPU, as a user types the commands.

An unedited level-1 file (`batch_size = 4096`, `dim = 393216`: 12 GiB a call) is evaluated and
optimised on the CPU backend with a `cpu` shape derived from its sizes, said as such; `--shape`
still picks the file's own. `--backend cuda` with a C++-only candidate is refused in seconds, and
`--backend cuda` on a task says in one line what runs instead of a GPU. The files under data/ are
written for this project in KernelBench's format (nothing is copied from KernelBench).
"""

from __future__ import annotations

import json
import re
import shutil
import time
from pathlib import Path

import pytest
import torch

from tests.journeys.user import type_command, user_env

DATA = Path(__file__).resolve().parent / "data"
# A returning user's build cache (their own setting): a cold build of a `load_inline` extension
# compiles torch/extension.h, minutes on a loaded 2-core VM, which is the evaluator's business, not
# this journey's.
CACHE = Path("~/.cache/agentforge").expanduser()
DERIVED = re.compile(r"19_ReLU declares no shape sized for a CPU: checking and timing the shape 'cpu' derived "
                     r"from its sizes, divided by (\d+): batch_size=(\d+) \(file: 4096\), dim=(\d+) \(file: 393216\)")


@pytest.fixture
def work(user_dir: Path) -> Path:
    """The user's folder: the KernelBench file under data/, their candidate beside it."""
    (user_dir / "data").mkdir()
    shutil.copy(DATA / "19_ReLU.py", user_dir / "data" / "19_ReLU.py")
    shutil.copy(DATA / "relu_load_inline.py", user_dir / "relu_load_inline.py")
    return user_dir


def _env(work: Path) -> dict[str, str]:
    return user_env(work.parent / "home", AGENTFORGE_CACHE_DIR=str(CACHE))


def test_an_unedited_kernelbench_file_is_evaluated_on_a_cpu_with_a_derived_shape(work: Path) -> None:
    original = (work / "data" / "19_ReLU.py").read_text()
    typed = type_command("agentforge eval data/19_ReLU.py relu_load_inline.py --backend cpu", work, _env(work))
    assert typed.returncode == 0, typed.explain()
    said = DERIVED.search(" ".join(typed.output.split()))
    assert said is not None, typed.explain()
    divisor, batch, dim = (int(x) for x in said.groups())
    assert (batch, dim) == (4096 // divisor, 393216 // divisor)
    assert "ok at done: ACCEPTED" in typed.stdout, typed.explain()

    typed = type_command("agentforge eval data/19_ReLU.py relu_load_inline.py --backend cpu --json", work, _env(work))
    assert typed.returncode == 0, typed.explain()
    verdict = json.loads(typed.stdout)
    assert verdict["accepted"] is True, typed.explain()
    derived = verdict["candidate_meta"]["derived_shape"]
    assert derived["original"] == {"batch_size": 4096, "dim": 393216}
    assert derived["overrides"] == {"batch_size": batch, "dim": dim}
    assert verdict["timing"]["shape"] == "cpu" and verdict["speedup"] is not None
    assert {r["shape"] for r in verdict["correctness"]} >= {"cpu"}
    assert DERIVED.search(" ".join(typed.stderr.split())) is not None  # said on stderr, stdout is the object
    assert (work / "data" / "19_ReLU.py").read_text() == original  # the file was never edited


def test_shape_still_picks_the_files_own_sizes(work: Path) -> None:
    typed = type_command("agentforge eval data/19_ReLU.py relu_load_inline.py --backend cpu --shape default",
                         work, _env(work))
    assert typed.returncode == 2, typed.explain()
    assert "'default' needs about" in typed.stderr and "derived" not in typed.output, typed.explain()


def test_an_unedited_kernelbench_file_is_optimised_on_a_cpu(work: Path) -> None:
    typed = type_command("agentforge optimize data/19_ReLU.py --provider library --max-rounds 1 --out runs",
                         work, _env(work))
    assert typed.returncode == 0, typed.explain()
    assert DERIVED.search(" ".join(typed.output.split())) is not None, typed.explain()
    (run,) = (work / "runs").iterdir()
    meta = json.loads((run / "run.json").read_text())
    assert meta["derived_shape"]["original"] == {"batch_size": 4096, "dim": 393216}
    summary = json.loads((run / "summary.json").read_text())
    assert summary["best"] is not None, typed.explain()


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is here: --backend cuda builds and times")
def test_backend_cuda_with_a_cpp_only_candidate_is_refused_in_seconds(work: Path) -> None:
    started = time.monotonic()
    typed = type_command("agentforge eval level1/relu relu_load_inline.py --backend cuda", work, _env(work))
    took = time.monotonic() - started
    assert typed.returncode == 2, typed.explain()
    lines = [line for line in typed.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "holds no CUDA code" in lines[0] and "--backend cpu" in lines[0], typed.explain()
    assert took < 20, f"{took:.0f} s: the refusal needs no build, no sandbox and no torch"



def test_a_kernelbench_suite_is_scored_on_a_cpu_with_a_derived_shape(work: Path) -> None:
    """`leaderboard eval` over a KernelBench checkout as shipped (level 1's ReLU at 12 GiB a call):
    each task gets the derived `cpu` variant, said once, as `eval` does. Before, every job of such a
    suite was refused for memory on a CPU."""
    (work / "KernelBench" / "level1").mkdir(parents=True)
    shutil.copy(DATA / "19_ReLU.py", work / "KernelBench" / "level1" / "19_ReLU.py")
    (work / "answers").mkdir()
    shutil.copy(DATA / "relu_load_inline.py", work / "answers" / "level_1_problem_19_sample_0_kernel.py")
    env = {**_env(work), "COLUMNS": "200"}
    typed = type_command("agentforge leaderboard eval answers --suite kernelbench:.:level1 --name mine "
                         "--track hardened --no-compile-baseline", work, env, timeout=900)
    assert typed.returncode == 0, typed.explain()
    said = " ".join(typed.stderr.split())
    assert len(DERIVED.findall(said)) == 1, typed.explain()  # once for the task, whatever its jobs
    assert "mine: 1 jobs, 0 already stored, 1 stored now" in typed.stdout, typed.explain()
    row = next(line for line in typed.stdout.splitlines() if line.startswith("│ level1/19_ReLU"))  # the per-task table
    assert [c.strip() for c in row.strip("│").split("│")][1] == "ok", typed.explain()
    assert "accepted, timed on shape 'cpu'" in row, typed.explain()
