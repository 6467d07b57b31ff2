"""The tiers: tests/tiers.txt marks what starts a process or runs long, and `--refuse-processes`
(make test-fast) fails a test that starts a process without its line. Each case runs pytest as a
developer does, in a subprocess, on the test below that starts one."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO_ROOT, TIERS, read_tiers

HERE = "tests/test_tiers.py"


def test_starts_a_process() -> None:
    """The subject of the cases below: a test that starts a process (listed `process`)."""
    assert subprocess.run(["true"], check=False).returncode == 0


def _pytest(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=",
                           "--import-mode=importlib", *args], cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=600)


def test_every_line_of_the_tiers_file_is_a_marker_and_an_existing_file() -> None:
    entries = read_tiers()
    assert entries and {marker for marker, _ in entries} <= {"process", "slow"}
    for _, prefix in entries:
        assert (REPO_ROOT / prefix.split("::", 1)[0]).is_file(), prefix
    assert ("process", f"{HERE}::test_starts_a_process") in entries


def test_the_fast_tier_refuses_an_unlisted_process_and_names_the_line(tmp_path: Path) -> None:
    empty = tmp_path / "tiers.txt"
    empty.write_text("")
    refused = _pytest("--refuse-processes", "--tiers", str(empty), f"{HERE}::test_starts_a_process")
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert f"add 'process {HERE}::test_starts_a_process' to tests/tiers.txt" in refused.stdout, refused.stdout
    listed = _pytest("--refuse-processes", f"{HERE}::test_starts_a_process")
    assert listed.returncode == 0, listed.stdout + listed.stderr
    deselected = _pytest("--refuse-processes", "-m", "not process", f"{HERE}::test_starts_a_process")
    assert deselected.returncode == 5 and "1 deselected" in deselected.stdout, deselected.stdout


def test_a_line_naming_a_test_that_is_gone_stops_a_fast_tier_run(tmp_path: Path) -> None:
    stale = tmp_path / "tiers.txt"
    stale.write_text(f"process {HERE}::test_that_was_renamed\n")
    out = _pytest("--refuse-processes", "--tiers", str(stale), "--collect-only", HERE)
    assert out.returncode != 0
    assert "names tests that no longer exist: tests/test_tiers.py::test_that_was_renamed" in out.stdout + out.stderr
    assert TIERS.name == "tiers.txt"
