"""EvalResult builders for reward tests: hand-made verdicts, no evaluator run."""

from __future__ import annotations

import pytest
from agentforge.evaluator.result import (
    CompileRecord,
    CorrectnessRecord,
    DeviceInfo,
    EvalProvenance,
    EvalResult,
    Flag,
    Stage,
    Status,
    TimingRecord,
    TimingStats,
)


def stats(median_us: float, rel_stderr: float = 0.001) -> TimingStats:
    return TimingStats(median_us=median_us, mean_us=median_us, stdev_us=median_us * rel_stderr * 10,
                       min_us=median_us, max_us=median_us, n=100, rel_stderr=rel_stderr)


PROVENANCE = EvalProvenance(
    track="hardened", versions={"torch": "2.13.0"},
    device=DeviceInfo(kind="cuda", name="NVIDIA H100 80GB HBM3", capability="9.0", driver="570"),
    host="node1", sandbox="process",
)


def result(status: Status = Status.OK, *, candidate_us: float = 100.0, eager_us: float = 100.0,
           compile_us: float | None = None, reference_us: float | None = None, rel_stderr: float = 0.001,
           flags: tuple[Flag, ...] = (), correct: bool = True, compiled: bool = True) -> EvalResult:
    baselines = {"eager": stats(eager_us, rel_stderr)}
    if compile_us is not None:
        baselines["compile-default"] = stats(compile_us, rel_stderr)
        baselines["compile-max-autotune"] = stats(compile_us * 1.5, rel_stderr)
    if reference_us is not None:
        baselines["reference"] = stats(reference_us, rel_stderr)
    return EvalResult(
        task_name="level1/relu", candidate_hash="abc", backend="cuda", status=status,
        stage=Stage.DONE if status == Status.OK else Stage.BUILD,
        compile=CompileRecord(ok=compiled, backend="cuda"),
        correctness=(CorrectnessRecord(shape="default", seed=42, passed=correct),),
        flags=flags,
        timing=TimingRecord(shape="default", method="cuda-events", candidate=stats(candidate_us, rel_stderr),
                            baselines=baselines),
        provenance=PROVENANCE,
    )


@pytest.fixture
def make_result():
    return result


@pytest.fixture(scope="session")
def build_cache_dir(tmp_path_factory) -> str:
    """A build cache of the RL tests' own: entries other runs left (under another uid, say) in the
    shared one cannot change their verdicts."""
    return str(tmp_path_factory.mktemp("rl-build-cache"))
