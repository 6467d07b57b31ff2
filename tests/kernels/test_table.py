"""The results table comes from the records alone: deterministic, idempotent, and the committed
README holds exactly what the committed records render to."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from agentforge.kernel_library import (
    TABLE_END,
    TABLE_START,
    kernels_root,
    list_kernels,
    render_table,
    update_readme,
)

REPO = Path(__file__).resolve().parents[2]


def _library(tmp_path: Path) -> Path:
    """A small library: a measured CPU record, a compile-only CUDA record, and no record."""
    root = tmp_path / "kernels"
    measured = {"measured": True, "date": "2026-01-02T00:00:00+00:00", "summary": {
        "accepted": True, "speedup": 2.0, "speedup_vs_compile": 1.25,
        "candidate_us": {"median": 10.0, "stdev": 0.5}, "per_shape": {"default": {}, "small": {}}}}
    compile_only = {"measured": False, "date": "2026-01-03T00:00:00+00:00", "summary": {
        "accepted": False, "compiled": True, "arch": "sm_90a", "max_registers": 40, "spill_bytes": 0,
        "speedup": None, "speedup_vs_compile": None}}
    for gpu, task, record in (("cpu", "relu", measured), ("h100", "relu", compile_only), ("h100", "gelu", None)):
        folder = root / gpu / "level1" / task
        folder.mkdir(parents=True)
        (folder / "kernel.py").write_text("TUNABLES = {}\nclass ModelNew: pass\n")
        if record is not None:
            (folder / "record.json").write_text(json.dumps(record))
    return root


def test_table_renders_records_and_never_claims_unmeasured_speedups(tmp_path):
    table = render_table(list_kernels(root=_library(tmp_path)))
    assert table == render_table(list_kernels(root=_library(tmp_path / "again")))
    lines = table.splitlines()
    cpu = next(line for line in lines if line.startswith("| cpu | level1/relu"))
    assert "2.00x" in cpu and "1.25x" in cpu and "10.0 us ± 0.5 (default)" in cpu
    cuda = next(line for line in lines if line.startswith("| h100 | level1/relu"))
    assert "not measured" in cuda and "x |" not in cuda and "40 regs" in cuda
    assert any("level1/gelu" in line and "no record" in line for line in lines)
    assert "**cpu**: 1 of 1 kernels measured; geometric mean 2.00x vs eager" in table
    assert "**h100**: 0 of 2 kernels measured." in table


def test_update_readme_replaces_only_between_markers(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text(f"# Title\n\nIntro.\n\n{TABLE_START}\nold table\n{TABLE_END}\n\nAfter.\n")
    assert update_readme(readme, "| new |\n")
    text = readme.read_text()
    assert "old table" not in text and "| new |" in text
    assert text.startswith("# Title\n\nIntro.\n") and text.endswith("\n\nAfter.\n")
    assert not update_readme(readme, "| new |\n")  # idempotent


def test_committed_readme_matches_the_committed_records():
    readme = (kernels_root() / "README.md").read_text()
    inside = readme.split(TABLE_START, 1)[1].split(TABLE_END, 1)[0]
    assert inside.strip() == render_table(list_kernels()).strip(), (
        "results/kernels/README.md is stale: run `python benchmarks/reference_kernels.py --table-only`")


def test_benchmark_script_table_only_is_deterministic(tmp_path):
    root = tmp_path / "kernels"
    shutil.copytree(_library(tmp_path / "src"), root)
    command = [sys.executable, str(REPO / "benchmarks" / "reference_kernels.py"), "--table-only", "--root", str(root)]
    first = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr
    text = (root / "README.md").read_text()
    again = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and "unchanged" in again.stdout
    assert (root / "README.md").read_text() == text and TABLE_START in text
