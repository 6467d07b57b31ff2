"""The reward table: each status, each shaper, the significance gate, the milestones."""

from __future__ import annotations

import math
import pickle

import pytest
from agentforge.evaluator.result import Flag, Status
from agentforge.rl.rewards import (
    SHAPERS,
    RewardConfig,
    RewardConfigError,
    Significance,
    build_rewarder,
)

from tests.fixtures import relu

FAILURE = -1.0


@pytest.mark.parametrize("status", [s for s in Status if s not in (Status.OK, Status.TASK_ERROR)])
def test_every_failing_status_gets_the_failure_reward(make_result, status):
    rewarder = build_rewarder(RewardConfig(shaper="log_speedup"))
    record = rewarder.score(make_result(status, candidate_us=10.0))
    assert record.reward == FAILURE
    assert not record.accepted
    assert record.status == status.value
    assert record.components == {"gate": FAILURE}


@pytest.mark.parametrize("shaper", sorted(SHAPERS))
@pytest.mark.parametrize("kind", ["ok", "not_compiled", "incorrect", "reject_flag", "audit_flag"])
def test_reward_table_for_ok_status(make_result, shaper, kind):
    flags = {"reject_flag": (Flag("side_stream", "stream 7"),),
             "audit_flag": (Flag("speedup_over_10x", "12x", severity="audit"),)}.get(kind, ())
    result = make_result(Status.OK, candidate_us=50.0, flags=flags,
                         compiled=kind != "not_compiled", correct=kind != "incorrect")
    record = build_rewarder(RewardConfig(shaper=shaper, failure_reward=-2.0)).score(result)
    if kind == "ok":
        assert record.accepted and record.reward > 0
    else:
        assert record.reward == -2.0 and not record.accepted


def test_audit_flags_can_be_let_through(make_result):
    result = make_result(candidate_us=50.0, flags=(Flag("speedup_over_10x", "12x", severity="audit"),))
    record = build_rewarder(RewardConfig(shaper="log_speedup", gate_audit_flags=False)).score(result)
    assert record.accepted and record.reward == pytest.approx(math.log(2.0))


def test_log_speedup_is_clipped(make_result):
    rewarder = build_rewarder(RewardConfig(shaper="log_speedup"))
    assert rewarder.score(make_result(candidate_us=50.0)).reward == pytest.approx(math.log(2))
    assert rewarder.score(make_result(candidate_us=1.0)).reward == pytest.approx(2.0)  # 100x clipped
    assert rewarder.score(make_result(candidate_us=1000.0)).reward == pytest.approx(-0.5)  # 10x slower


def test_bonus_speedup_is_kevins(make_result):
    rewarder = build_rewarder(RewardConfig(shaper="bonus_speedup"))
    record = rewarder.score(make_result(candidate_us=50.0))
    assert record.reward == pytest.approx(2.3)
    assert record.components == {"correct": 0.3, "speed": pytest.approx(2.0)}
    assert rewarder.score(make_result(candidate_us=1.0)).reward == pytest.approx(10.3)  # capped


@pytest.mark.parametrize(
    ("candidate_us", "compile_us", "reference_us", "expected"),
    [
        (98.0, None, None, 1.0),  # correct, but not 5 % faster than eager
        (90.0, None, None, 2.0),  # beats eager, compile not timed
        (90.0, 80.0, None, 2.0),  # beats eager, loses to compile
        (70.0, 80.0, None, 3.0),  # beats eager and compile
        (70.0, 80.0, 60.0, 3.0),  # loses to the shipped reference kernel
        (50.0, 80.0, 60.0, 4.0),  # beats all three
        (90.0, 95.0, 95.0, 4.0),  # small but significant gains over all three
        (104.0, 120.0, 120.0, 1.0),  # faster than compile and reference, but not than eager
    ],
)
def test_milestones(make_result, candidate_us, compile_us, reference_us, expected):
    rewarder = build_rewarder(RewardConfig(shaper="milestones"))
    record = rewarder.score(make_result(candidate_us=candidate_us, compile_us=compile_us,
                                        reference_us=reference_us))
    assert record.reward == expected
    assert sum(record.components.values()) == expected


def test_milestone_for_reference_from_its_shipped_speedup(make_result):
    rewarder = build_rewarder(RewardConfig(shaper="milestones"))
    result = make_result(candidate_us=50.0, compile_us=80.0)  # 2x vs eager
    assert rewarder.score(result, reference_speedup=1.5).reward == 4.0
    assert rewarder.score(result, reference_speedup=3.0).reward == 3.0


def test_significance_gate_inside_and_outside_the_noise(make_result):
    rewarder = build_rewarder(RewardConfig(shaper="log_speedup", noise_sigmas=2.0, noise_floor=0.0))
    # 3 % faster with 2 % relative stderr on each side: threshold 2*sqrt(2)*2 % = 5.7 %, noise.
    noisy = rewarder.score(make_result(candidate_us=97.0, rel_stderr=0.02))
    assert noisy.accepted and noisy.reward == 0.0 and noisy.significant is False
    assert noisy.effective_speedup == 1.0 and noisy.speedup == pytest.approx(100 / 97)
    # The same 3 % with 0.1 % stderr is a real gain.
    clean = rewarder.score(make_result(candidate_us=97.0, rel_stderr=0.001))
    assert clean.significant is True and clean.reward == pytest.approx(math.log(100 / 97))
    # A slowdown inside the noise is no loss either.
    assert rewarder.score(make_result(candidate_us=103.0, rel_stderr=0.02)).reward == 0.0


def test_noise_floor_applies_when_stats_claim_no_noise():
    sig = Significance(noise_sigmas=2.0, noise_floor=0.01)
    assert sig.threshold(None, None) == pytest.approx(0.02)
    assert sig.effective(1.015, 0.02) == (1.0, False)
    assert sig.effective(1.05, 0.02) == (1.05, True)


def test_milestones_use_the_gated_speedup(make_result):
    rewarder = build_rewarder(RewardConfig(shaper="milestones"))
    # 8 % faster than eager, but with 5 % stderr per side: inside the noise, so only "correct".
    assert rewarder.score(make_result(candidate_us=92.6, rel_stderr=0.05)).reward == 1.0


def test_unknown_shaper_lists_the_choices():
    with pytest.raises(RewardConfigError, match="bonus_speedup, log_speedup, milestones"):
        build_rewarder(RewardConfig(shaper="fastest"))


def test_bad_shaper_params_and_unknown_settings_fail_at_configuration():
    with pytest.raises(RewardConfigError, match="log_speedup"):
        build_rewarder(RewardConfig(shaper="log_speedup", shaper_params={"hgih": 1}))
    with pytest.raises(RewardConfigError, match="no settings"):
        RewardConfig.from_dict({"shapr": "milestones"})


def test_a_slow_correct_kernel_must_beat_a_broken_one():
    with pytest.raises(RewardConfigError, match="must beat"):
        build_rewarder(RewardConfig(shaper="log_speedup", shaper_params={"low": -1.5}))


def test_records_keep_provenance_and_pickle(make_result):
    rewarder = build_rewarder()
    rewarder = pickle.loads(pickle.dumps(rewarder))
    record = rewarder.score(make_result(candidate_us=50.0), meta={"prompt_id": 3})
    assert record.provenance["gpu"] == "NVIDIA H100 80GB HBM3"
    assert record.provenance["track"] == "hardened"
    assert record.provenance["versions"] == {"torch": "2.13.0"}
    assert record.provenance["evaluator_version"]
    assert record.meta == {"prompt_id": 3}
    assert '"gpu": "NVIDIA H100' in record.to_json()


def test_no_code_reward():
    rewarder = build_rewarder(RewardConfig(no_code_reward=-1.5))
    record = rewarder.no_code("level1/relu")
    assert record.reward == -1.5 and record.status == "no_code" and record.candidate_hash is None
    assert build_rewarder().no_code("t").reward == FAILURE


@pytest.mark.parametrize(("shaper", "expected"), [("milestones", 1.0), ("log_speedup", 0.0),
                                                  ("bonus_speedup", 1.3)])
def test_accepted_but_untimed_is_correct_with_no_gain(make_result, shaper, expected):
    import dataclasses

    result = dataclasses.replace(make_result(candidate_us=50.0), timing=None)
    record = build_rewarder(RewardConfig(shaper=shaper)).score(result)
    assert record.accepted and record.reward == pytest.approx(expected)
    assert record.speedup is None and record.significant is False


# ----- a task that fails on its own -----------------------------------------------------------
def _task_error(make_result, task: str = "level1/relu"):
    import dataclasses

    from agentforge.evaluator.result import ErrorRecord, Stage

    return dataclasses.replace(
        make_result(Status.TASK_ERROR), task_name=task, stage=Stage.TASK, compile=None, correctness=(), timing=None,
        error=ErrorRecord("TaskInputsError", f"task {task}, shape 'default': get_inputs() raised RuntimeError"))


@pytest.mark.parametrize("shaper", sorted(SHAPERS))
def test_a_task_error_is_no_completions_fault_and_gives_its_group_no_signal(make_result, shaper):
    from agentforge.rl.grouping import group_zscore

    rewarder = build_rewarder(RewardConfig(shaper=shaper))
    records = [rewarder.score(_task_error(make_result), meta={"i": i}) for i in range(4)]
    assert {r.reward for r in records} == {0.0} and not any(r.accepted for r in records)
    assert records[0].status == "task_error" and records[0].components == {"task_error": 0.0}
    assert records[0].meta == {"i": 0, "task_error": "TaskInputsError: task level1/relu, shape 'default': "
                                                    "get_inputs() raised RuntimeError"}
    assert group_zscore([r.reward for r in records], [0, 0, 0, 0]) == [0.0] * 4
    assert build_rewarder(RewardConfig(task_error_reward=-0.25)).score(_task_error(make_result)).reward == -0.25


def test_the_service_stops_evaluating_a_broken_task_and_says_why(make_result):
    """After one task_error verdict, completions for that task are answered at once; another task
    is still evaluated."""
    from agentforge.evaluator.result import EvalJob
    from agentforge.rl.service import RewardRequest, RewardService, ServiceConfig

    calls: list[str] = []

    def evaluate(job: EvalJob):
        calls.append(job.task_name)
        if job.task_name == "level1/broken":
            return _task_error(make_result, "level1/broken")
        return make_result(candidate_us=50.0)

    def job(req: RewardRequest, code: str) -> EvalJob:
        return EvalJob(task_name=req.task_name, task_source=req.task_source, candidate_source=code)

    def ask(task: str, tag: str) -> RewardRequest:
        return RewardRequest(task, f"# {task}", f"```python\n# {tag}\nclass ModelNew:\n    pass\n```")

    svc = RewardService(build_rewarder(RewardConfig(shaper="log_speedup")), ServiceConfig(concurrency=1),
                        evaluate_fn=evaluate, job_factory=job)
    with pytest.warns(RuntimeWarning, match=r"task level1/broken fails on its own \(TaskInputsError"):
        first = svc.score_sync([ask("level1/broken", "a")])
    later = svc.score_sync([ask("level1/broken", t) for t in "bcd"] + [ask("level1/relu", "e")])
    assert calls == ["level1/broken", "level1/relu"]  # b, c, d never reached the evaluator
    assert [r.status for r in first + later] == ["task_error"] * 4 + ["ok"]
    assert {r.reward for r in first + later[:3]} == {0.0} and later[3].accepted
    assert len({r.candidate_hash for r in first + later[:3]}) == 4  # each record names its own completion
    assert svc.stats.task_errors == 4
    assert svc.stats.broken_tasks == {"level1/broken": "TaskInputsError: task level1/broken, shape 'default': "
                                                       "get_inputs() raised RuntimeError"}


BROKEN_GET_INPUTS = relu.broken_get_inputs(256)


@pytest.mark.slow
def test_with_the_real_evaluator_a_broken_task_is_rewarded_as_a_task_error_once(tmp_path):
    """The real sandbox and evaluator (their task check), the real job factory: the first
    completion finds the task broken, the second is answered without an evaluation."""
    from agentforge.rl.service import RewardRequest, RewardService, ServiceConfig

    cache = tmp_path / "cache"
    cache.mkdir()
    cache.chmod(0o777)  # the sandbox child may run as nobody
    config = ServiceConfig(backend="cpu", device="cpu", concurrency=1,
                           job_options={"measure": {"timing": False}},
                           sandbox_options={"cache_dir": str(cache), "timeout_s": 300})
    svc = RewardService(build_rewarder(), config)
    answer = "```python\nimport torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n" \
             "        return x.clamp_min(0)\n```"
    with pytest.warns(RuntimeWarning, match="task level1/broken fails on its own"):
        [first] = svc.score_sync([RewardRequest("level1/broken", BROKEN_GET_INPUTS, answer)])
    assert first.status == "task_error" and first.reward == 0.0, first
    assert "TaskInputsError" in first.meta["task_error"] and "deliberately broken" in first.meta["task_error"]
    [second] = svc.score_sync([RewardRequest("level1/broken", BROKEN_GET_INPUTS, answer + "\n# v2")])
    assert second.status == "task_error" and svc.stats.evaluations == 1


def test_milestones_can_step_over_an_untimed_compile_rung(make_result):
    strict = build_rewarder(RewardConfig(shaper="milestones"))
    skipping = build_rewarder(RewardConfig(shaper="milestones", shaper_params={"skip_untimed_compile": True}))
    fast = make_result(candidate_us=25.0, eager_us=100.0)  # 4x eager, compile not timed
    # The shipped kernel did 2x: ours beats it by the recorded ratio.
    assert strict.score(fast, reference_speedup=2.0).reward == 2.0  # the ladder stops at the missing rung
    record = skipping.score(fast, reference_speedup=2.0)
    assert record.reward == 4.0 and record.components == {"correct": 1.0, "beats_eager": 1.0,
                                                          "beats_reference": 2.0}
    assert record.reference == "recorded"
    assert skipping.score(fast, reference_speedup=5.0).reward == 2.0  # slower than the shipped kernel
    assert skipping.score(fast).reward == 2.0 and skipping.score(fast).reference is None
    # A timed compile baseline is still a rung when it is there.
    timed = make_result(candidate_us=25.0, eager_us=100.0, compile_us=20.0)
    assert skipping.score(timed, reference_speedup=2.0).reward == 2.0


def test_the_record_says_where_the_reference_came_from(make_result):
    rewarder = build_rewarder(RewardConfig(shaper="milestones"))
    timed = rewarder.score(make_result(candidate_us=25.0, eager_us=100.0, compile_us=50.0, reference_us=40.0),
                           reference_speedup=100.0)  # a timed reference wins over a recorded one
    assert timed.reference == "timed" and timed.reward == 4.0
    assert "summary" in timed.to_dict() and "level1/relu" in timed.summary


def test_recorded_reference_matches_device_and_shape(tmp_path):
    import json

    from agentforge.rl.reference import recorded_reference

    folder = tmp_path / "cpu" / "level2" / "fused"
    folder.mkdir(parents=True)
    (folder / "kernel.py").write_text("class ModelNew: ...\n")
    (folder / "meta.json").write_text(json.dumps({"backend": "cpu", "task": "level2/fused"}))
    record = {"measured": True, "machine": {"device": "Xeon X"}, "summary": {"per_shape": {
        "cpu": {"accepted": True, "speedup": 2.5}, "small": {"accepted": False, "speedup": 9.0}}}}
    (folder / "record.json").write_text(json.dumps(record))
    found = recorded_reference("level2/fused", "cpu", "cpu", "cpu", "Xeon X", root=tmp_path)
    assert found is not None and found.speedup == 2.5 and found.source.endswith("record.json#cpu")
    assert recorded_reference("level2/fused", "cpu", "cpu", "small", "Xeon X", root=tmp_path) is None  # rejected
    assert recorded_reference("level2/fused", "cpu", "cpu", "odd", "Xeon X", root=tmp_path) is None  # no shape
    assert recorded_reference("level2/fused", "cpu", "cpu", "cpu", "EPYC Y", root=tmp_path) is None  # other CPU
    assert recorded_reference("level2/fused", "cpu", "h100", "cpu", None, root=tmp_path) is None  # other device
    assert recorded_reference("level2/fused", "triton", "cpu", "cpu", None, root=tmp_path) is None


def test_an_overhead_bound_pair_earns_no_speed_reward(make_result):
    """One meaning of a speedup: a pair within 20x of the harness floor claims none in the reward,
    as in the verdict's headline (a 147x 'speedup' of a content replay was such a pair)."""
    from dataclasses import replace

    rewarder = build_rewarder(RewardConfig(shaper="log_speedup"))
    fast = make_result(candidate_us=1.0)
    bound = replace(fast, timing=replace(fast.timing, overhead_bound=("candidate",)))
    assert bound.speedup == pytest.approx(100.0) and bound.headline_speedup is None
    assert rewarder.score(fast).reward == pytest.approx(2.0)
    assert rewarder.score(bound).reward == pytest.approx(rewarder.score(make_result(candidate_us=100.0)).reward)
