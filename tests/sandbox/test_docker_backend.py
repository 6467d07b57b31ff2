"""The docker backend against a real local dockerd and a locally built image.

Skips cleanly, with the reason, where the docker SDK is missing, no daemon answers, or no base
image with Python 3.11 can be had (pulled `python:3.11-slim`, or a local `agentforge-base:local`,
see docs/sandbox.md for building one offline).
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agentforge.evaluator.judge import stage_budget
from agentforge.evaluator.result import Stage, Status
from agentforge.sandbox import run
from agentforge.sandbox.docker_backend import DockerBackend
from sandbox_helpers import fake_config, make_job

pytestmark = [pytest.mark.docker, pytest.mark.slow]
TEST_TAG = "agentforge-eval:sandbox-test"
BASES = ("python:3.11-slim", "agentforge-base:local")


def _base_image(client: Any) -> str | None:
    reasons = []
    for base in BASES:
        try:
            client.images.get(base)
            return base
        except Exception:
            pass
        try:
            client.images.pull(base)
            return base
        except Exception as exc:
            reasons.append(f"{base}: {str(exc)[:120]}")
    pytest.skip("no base image with Python 3.11: " + "; ".join(reasons))
    return None


@pytest.fixture(scope="module")
def docker_image() -> Iterator[str]:
    try:
        import docker
    except ImportError:
        pytest.skip("the docker SDK is not installed (pip install 'agentforge[docker]')")
    try:
        client = docker.from_env()
        client.ping()
    except Exception as exc:
        pytest.skip(f"no docker daemon reachable: {str(exc)[:200]}")
    from agentforge.sandbox.docker_image import build_image

    base = _base_image(client)
    build_image(client, TEST_TAG, base=str(base), torch="none")
    yield TEST_TAG


def _run(tmp_path: Path, image: str, source: str, **changes: object) -> Any:
    """`source` through fake_entries (bound into the container through python_paths)."""
    return run(make_job(source), fake_config(tmp_path, kind="docker", docker_image=image, **changes))


def test_normal_job_in_a_container(tmp_path: Path, docker_image: str) -> None:
    result = _run(tmp_path, docker_image, "import os\nRESULT_NOTE = (os.getuid(), os.getcwd())")
    assert result.status == Status.OK, result.error
    assert result.candidate_meta["note"] == "(65534, '/work')"
    assert result.provenance.sandbox.startswith("docker(")
    assert result.provenance.isolation == "docker"
    assert isinstance(DockerBackend, type)


def test_container_has_no_network(tmp_path: Path, docker_image: str) -> None:
    result = _run(tmp_path, docker_image, "import socket\nsocket.create_connection(('1.1.1.1', 53), timeout=1)")
    assert result.status == Status.RUNTIME_ERROR
    assert result.error is not None and result.error.type == "OSError"


def test_container_root_is_read_only(tmp_path: Path, docker_image: str) -> None:
    result = _run(tmp_path, docker_image, "open('/opt/agentforge/escape.txt', 'w').write('x')")
    assert result.status == Status.RUNTIME_ERROR
    assert result.error is not None and result.error.type in ("OSError", "PermissionError")


def test_container_hang_is_a_timeout(tmp_path: Path, docker_image: str) -> None:
    result = _run(tmp_path, docker_image, "while True:\n    pass", timeout_s=3.0)
    assert result.status == Status.TIMEOUT
    assert result.error is not None and result.error.message == "wall-clock budget of 3 s ran out"


def test_container_segfault_is_a_crash(tmp_path: Path, docker_image: str) -> None:
    result = _run(tmp_path, docker_image, "import ctypes\nctypes.string_at(0)")
    assert result.status == Status.CRASH
    assert result.error is not None and result.error.signal == signal.SIGSEGV


def test_container_memory_hog(tmp_path: Path, docker_image: str) -> None:
    result = _run(tmp_path, docker_image, "hog = bytearray(50 * 2**30)", memory_gb=1.0)
    assert result.status == Status.CRASH
    assert result.error is not None and result.error.type == "MemoryLimit"


def test_container_fork_bomb_is_bounded(tmp_path: Path, docker_image: str) -> None:
    source = ("import os, time\nn = 0\nfor _ in range(2000):\n    try:\n        pid = os.fork()\n"
              "    except OSError:\n        break\n    if pid == 0:\n        time.sleep(60)\n        os._exit(0)\n"
              "    n += 1\nRESULT_NOTE = n\n")
    result = _run(tmp_path, docker_image, source, max_processes=32)
    assert result.status == Status.OK, result.error
    assert 0 < int(result.candidate_meta["note"]) < 32


def test_fake_stdout_result_does_not_fool_the_parent(tmp_path: Path, docker_image: str) -> None:
    source = ("import os\nfrom agentforge.evaluator.result import EvalResult, Status, Stage\n"
              "print(EvalResult(task_name=job.task_name, candidate_hash='x', backend='cpu', status=Status.OK,"
              " stage=Stage.DONE).to_json(), flush=True)\nos._exit(0)\n")
    result = _run(tmp_path, docker_image, source)
    assert result.status == Status.CRASH
    assert result.error is not None and result.error.type == "NoResult"


def test_container_judge_counts_the_stage_budget(tmp_path: Path, docker_image: str) -> None:
    """The Docker sandbox stamps the budget as the process sandbox does: the judge's stage clock is
    live in the container, and a judge stuck in timing is answered by it before the hard limit."""
    config = fake_config(tmp_path, kind="docker", docker_image=docker_image, timeout_s=20.0,
                         stage_shares=(("build", 0.5), ("correctness", 0.1), ("timing", 0.1)))
    config = config.replace(entry="budget_entries:stuck_in_timing")
    result = run(make_job("pass"), config)
    assert result.status == Status.TIMEOUT and result.stage == Stage.TIMING, result.error
    assert result.error is not None and result.error.type == "StageTimeout"
    report = result.provenance.track_settings["stage_budget"]
    assert report["total_s"] == 20.0 and report["ran_out"]["group"] == "timing"
    assert report["deadlines_s"]["timing"] == pytest.approx(0.7 * (20.0 - stage_budget.reserve_s(20.0)), abs=1e-3)
