"""Every way a candidate can die ends that child only, and the EvalResult says which."""

from __future__ import annotations

import signal
import time
from pathlib import Path

from agentforge.evaluator.result import Stage, Status
from agentforge.sandbox import run
from sandbox_helpers import fake_config, make_job


def test_normal_job_returns_its_result(tmp_path: Path) -> None:
    result = run(make_job("RESULT_NOTE = 'hello from the child'"), fake_config(tmp_path))
    assert result.status == Status.OK
    assert result.candidate_meta == {"note": "hello from the child"}
    assert result.provenance.sandbox.startswith("process+")


def test_segfault_is_a_crash_with_its_signal(tmp_path: Path) -> None:
    result = run(make_job("import ctypes\nctypes.string_at(0)"), fake_config(tmp_path))
    assert result.status == Status.CRASH and result.stage == Stage.SANDBOX
    assert result.error is not None
    assert result.error.signal == signal.SIGSEGV and result.error.type == "Segfault"
    assert "SIGSEGV" in result.error.message
    assert "Fatal Python error" in result.error.stderr_tail  # faulthandler's trace, kept as evidence


def test_abort_is_a_crash_with_sigabrt(tmp_path: Path) -> None:
    result = run(make_job("import os, sys\nprint('about to abort', file=sys.stderr, flush=True)\nos.abort()"),
                 fake_config(tmp_path))
    assert result.status == Status.CRASH
    assert result.error is not None and result.error.signal == signal.SIGABRT
    assert result.error.type == "Abort"
    assert "about to abort" in result.error.stderr_tail


def test_hang_is_a_timeout_with_the_budget(tmp_path: Path) -> None:
    start = time.monotonic()
    result = run(make_job("while True:\n    pass"), fake_config(tmp_path, timeout_s=1.5))
    elapsed = time.monotonic() - start
    assert result.status == Status.TIMEOUT
    assert result.error is not None and result.error.type == "Timeout"
    assert result.error.message == "wall-clock budget of 1.5 s ran out"
    assert elapsed < 1.5 + 0.5 + 2.0  # budget + kill grace + slack


def test_hang_that_ignores_sigterm_is_killed(tmp_path: Path) -> None:
    source = "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nwhile True:\n    time.sleep(0.1)"
    start = time.monotonic()
    result = run(make_job(source), fake_config(tmp_path, timeout_s=1.0, kill_grace_s=0.3))
    assert result.status == Status.TIMEOUT
    assert time.monotonic() - start < 4.0


def test_memory_hog_hits_the_address_space_limit(tmp_path: Path) -> None:
    result = run(make_job("hog = bytearray(50 * 2**30)"), fake_config(tmp_path, memory_gb=2.0))
    assert result.status == Status.CRASH
    assert result.error is not None and result.error.type == "MemoryLimit"
    assert "RLIMIT_AS" in result.error.message


def test_memory_watchdog_kills_a_resident_hog(tmp_path: Path) -> None:
    # On CUDA jobs RLIMIT_AS is off and the resident-set watchdog is the limit; a "cuda" job
    # exercises that path without a GPU (the fake entry never touches the device).
    source = "import time\nhog = [b'x' * 2**20 for _ in range(700)]\ntime.sleep(30)"
    result = run(make_job(source, device="cuda"), fake_config(tmp_path, memory_gb=0.3))
    assert result.status == Status.CRASH
    assert result.error is not None and result.error.type == "MemoryLimit"
    assert "watchdog" in result.error.message and result.error.signal == signal.SIGKILL


def test_cpu_limit_sends_sigxcpu(tmp_path: Path) -> None:
    result = run(make_job("while True:\n    pass"), fake_config(tmp_path, cpu_seconds=1, timeout_s=20))
    assert result.status == Status.CRASH
    assert result.error is not None and result.error.signal == signal.SIGXCPU
    assert result.error.type == "CpuLimit"


def test_file_size_limit_stops_a_big_write(tmp_path: Path) -> None:
    source = "with open('big.bin', 'wb') as fh:\n    fh.write(b'x' * 3 * 2**20)"
    result = run(make_job(source), fake_config(tmp_path, file_size_mb=1))
    # Python ignores SIGXFSZ, so the write fails with EFBIG inside and the evaluator reports it.
    assert result.status == Status.RUNTIME_ERROR
    assert result.error is not None and result.error.type == "OSError"


def test_entry_that_raises_is_a_crash_not_an_exception(tmp_path: Path) -> None:
    result = run(make_job("pass"), fake_config(tmp_path, entry="raises"))
    assert result.status == Status.CRASH
    assert result.error is not None and result.error.type == "RuntimeError"
    assert "the entry itself failed" in result.error.traceback_tail


def test_entry_that_returns_no_result_is_a_crash(tmp_path: Path) -> None:
    result = run(make_job("pass"), fake_config(tmp_path, entry="returns_none"))
    assert result.status == Status.CRASH
    assert result.error is not None and result.error.type == "TypeError"


def test_candidate_that_exits_early_is_a_crash(tmp_path: Path) -> None:
    result = run(make_job("import os\nos._exit(3)"), fake_config(tmp_path))
    assert result.status == Status.CRASH
    assert result.error is not None and result.error.type == "NoResult" and result.error.exit_code == 3
