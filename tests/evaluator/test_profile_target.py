"""The program ncu profiles builds from the job's build cache, where the worker built the same
source, not cold in the job folder (issue 15, finding 2)."""

from __future__ import annotations

from pathlib import Path

from agentforge.evaluator import build_cache, native
from agentforge.evaluator.result import EvalJob
from agentforge.evaluator.worker import profile_target

EXPLOITS = Path(__file__).resolve().parents[1] / "exploits"


def test_the_profiled_build_is_found_in_the_jobs_cache(tmp_path: Path) -> None:
    source = (EXPLOITS / "honest" / "relu_cpp.py").read_text()
    job = EvalJob(task_name="elementwise_relu", task_source=(EXPLOITS / "tasks" / "elementwise_relu.py").read_text(),
                  candidate_source=source, backend="cpu", cache_dir=str(tmp_path / "cache"))
    try:
        build_cache.set_cache_root(job.cache_dir)  # the worker's build, in the job's cache
        assert profile_target.build(job).model_cls is not None
        assert native.BUILD_EVENTS[-1].cached is False
        build_cache.set_cache_root(tmp_path / "elsewhere")  # a fresh process starts with the default root
        loaded = profile_target.build(job)
        assert loaded.model_cls is not None
        assert [e.cached for e in native.BUILD_EVENTS] == [True]
        assert build_cache.cache_root() == Path(job.cache_dir)
    finally:
        build_cache.set_cache_root(None)


def test_a_slow_profile_cannot_use_up_the_jobs_budget() -> None:
    from agentforge.evaluator.judge import roofline_stage
    from agentforge.sandbox import SandboxConfig

    assert SandboxConfig().timeout_s / 4 >= roofline_stage.PROFILE_TIMEOUT_S
