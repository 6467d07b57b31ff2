"""A candidate that raises only once timing has begun (on the timing's fresh inputs) gets a
runtime error at the timing stage that keeps what the correctness stage found, and the
candidate's own exception; before, the verdict lost both (a `CandidateRaised` from the judge)."""

from __future__ import annotations

from pathlib import Path

from agentforge.evaluator.api import make_job
from agentforge.evaluator.judge.pipeline import run_pipeline
from agentforge.evaluator.result import Measure, Stage, Status, TimingConfig
from agentforge.sandbox.worker import launch_worker

from agentforge.candidate import Candidate
from agentforge.task import load_task

HONEST = Path(__file__).resolve().parents[1] / "exploits" / "honest" / "relu_cpp.py"
GIVES_UP = '''
_Honest = ModelNew
CALLS = [0]


class ModelNew(_Honest):
    def forward(self, x):
        CALLS[0] += 1
        if CALLS[0] > 30:  # past the correctness stage's calls, inside the timing's
            raise RuntimeError("gave up after 30 calls")
        return super().forward(x)
'''


def test_a_candidate_raising_in_timing_keeps_its_correctness_records(tmp_path: Path) -> None:
    job = make_job(load_task("level1/relu"), Candidate(HONEST.read_text() + GIVES_UP, backend="cpu"), device="cpu",
                   shapes=("small",), timing_shape="small", cache_dir=str(tmp_path / "cache"),
                   measure=Measure(baselines=("eager",), compile_modes=()),
                   timing=TimingConfig(warmup=1, min_reps=40, max_reps=40, time_cap_s=5.0))
    result = run_pipeline(job, launch_worker)
    assert result.status == Status.RUNTIME_ERROR and result.stage == Stage.TIMING, result.summary()
    assert result.error is not None and result.error.type == "RuntimeError"
    assert "gave up after 30 calls" in result.error.message
    assert result.correctness and all(record.passed for record in result.correctness)
