"""The throughput benchmark's cheap part runs, so the script does not rot between measurements."""

from __future__ import annotations

import importlib.util
from pathlib import Path


def test_runner_overhead_measures(repo_root: Path) -> None:
    spec = importlib.util.spec_from_file_location("eval_throughput", repo_root / "benchmarks" / "eval_throughput.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    figures = module.bench_runner_overhead(5)
    assert figures["jobs"] == 5 and figures["resume_s_per_job"] > 0 and 0 < figures["s_per_job"] < 5
