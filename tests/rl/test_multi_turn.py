"""Multi-turn episodes (rl/multi_turn.py): per-turn discounted credit, the prompts each turn sees,
and a real multi-turn GRPO step through TRL's rollout_func with the real evaluator's rewards."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from agentforge.rl.config import RLConfigError, config_from_dict, load_config
from agentforge.rl.grouping import discounted_returns, episode_advantages
from agentforge.rl.multi_turn import (
    EpisodeRollout,
    Turn,
    compact_prompt,
    episode_metrics,
    full_prompt,
    verdict_summary,
    verdict_word,
)
from agentforge.rl.records import RewardRecord
from agentforge.rl.rewards import RewardConfig, build_rewarder
from agentforge.rl.service import RewardService

CONFIG = Path(__file__).resolve().parents[2] / "rl" / "configs" / "cpu-smoke-multiturn.toml"


def record(status: str, reward: float, components: dict[str, float] | None = None,
           summary: str = "") -> RewardRecord:
    return RewardRecord("smoke/relu", "h", status, status == "ok", reward, "milestones",
                        components or ({"correct": 1.0} if status == "ok" else {"gate": -1.0}), summary=summary)


def rollout(max_turns: int = 2, num_generations: int = 4, normalize: bool = True) -> EpisodeRollout:
    service = RewardService(build_rewarder(RewardConfig()))
    return EpisodeRollout([{"prompt": "relu:", "task_name": "smoke/relu", "task_source": ""}], service, None,
                          max_turns=max_turns, gamma=0.4, num_generations=num_generations, compact=True,
                          normalize=normalize)


def test_credit_is_discounted_returns_z_scored_across_the_groups_episodes():
    r = rollout(max_turns=2, num_generations=4)
    rewards = [-1.0, 2.0, 1.0, 1.0, -1.0, -1.0, -1.0, 4.0]  # two groups, two episodes of two turns each
    turns = [1, 2, 1, 2, 1, 2, 1, 2]
    credit = r.advantages(rewards, turns)
    expected = [a for g in ([[-1.0, 2.0], [1.0, 1.0]], [[-1.0, -1.0], [-1.0, 4.0]])
                for ep in episode_advantages(g, 0.4) for a in ep]
    assert credit == pytest.approx(expected)
    # Turn 1 of the first episode is credited with what its revision reached: -1 + 0.4 * 2.
    assert discounted_returns([-1.0, 2.0], 0.4)[0] == pytest.approx(-0.2)
    plain = rollout(max_turns=2, num_generations=4, normalize=False).advantages(rewards, turns)
    assert plain[:2] == pytest.approx([-0.2, 2.0])
    with pytest.raises(ValueError, match="episode order"):
        r.advantages(rewards, [1, 1, 2, 2, 1, 2, 1, 2])


def test_groups_must_be_whole_episodes():
    with pytest.raises(ValueError, match="multiple of max_turns"):
        rollout(max_turns=3, num_generations=4)
    data = load_config(CONFIG)
    with pytest.raises(RLConfigError, match="multiple of \\[multi_turn\\] max_turns"):
        config_from_dict({"model": {"tiny": True}, "multi_turn": {"max_turns": 4},
                          "grpo": {**data.grpo, "num_generations": 6}})
    with pytest.raises(RLConfigError, match="gamma"):
        config_from_dict({"model": {"tiny": True}, "multi_turn": {"gamma": 1.5}})
    with pytest.raises(RLConfigError, match="use_vllm"):
        config_from_dict({"model": {"tiny": True}, "multi_turn": {"max_turns": 2}, "grpo": {"use_vllm": True}})
    assert data.multi_turn.max_turns == 3 and data.multi_turn.gamma == 0.4


def test_the_tiny_policy_reads_verdict_words_but_never_writes_them(tmp_path):
    from agentforge.rl.tiny import VERDICT_WORDS, build_tokenizer
    from agentforge.rl.trl_train import grpo_args

    config = load_config(CONFIG, {"output.dir": str(tmp_path)})
    suppressed = grpo_args(config).generation_kwargs["suppress_tokens"]
    tokenizer = build_tokenizer()
    assert sorted(tokenizer.convert_ids_to_tokens(suppressed)) == sorted(VERDICT_WORDS)
    assert tokenizer("relu: v=; verdict:broken")["input_ids"][-1] in suppressed  # one token each


def test_each_turn_sees_earlier_code_and_verdicts_never_reasoning():
    turns = [Turn("v=; v=v+v;", record("compile_error", -1.0, summary="smoke/relu [cpu] compile_error at build")),
             Turn("v=v>0.0f?v:0.0f; v=v*1.0f;", record("ok", 2.0, {"correct": 1.0, "beats_eager": 1.0}))]
    assert compact_prompt("relu:", turns) == "relu: v=; v=v+v; verdict:broken v=v>0.0f?v:0.0f; v=v*1.0f; verdict:faster"
    assert verdict_word(record("mismatch", -1.0)) == "verdict:wrong"
    assert verdict_word(record("ok", 1.0)) == "verdict:correct"
    assert verdict_summary(turns[1].record).endswith("reward 2 (correct, beats_eager)")
    reply = "Plan: fuse it.\n```python\nclass ModelNew: pass\n```"
    row = {"task_name": "level1/relu", "task_source": "class Model: pass"}
    text = full_prompt(row, [Turn(reply, record("mismatch", -1.0, summary="level1/relu [cuda] mismatch"))], "cuda")
    assert "### Attempt 1" in text and "class ModelNew: pass" in text
    assert "Verdict: level1/relu [cuda] mismatch; reward -1 (rejected)" in text
    assert "Plan: fuse it." not in text  # the model's reasoning is not carried over


def test_metrics_per_turn():
    records = [record("compile_error", -1.0), record("ok", 1.0), record("ok", 2.0, {"correct": 1.0,
                                                                                        "beats_eager": 1.0}),
               record("ok", 1.0)]
    metrics = episode_metrics(records, [1, 2, 1, 2], [-0.6, 1.0, 2.4, 1.0], 4)
    assert metrics["rl/turn1_reward_mean"] == 0.5 and metrics["rl/turn2_reward_mean"] == 1.0
    assert metrics["rl/turn1_acceptance_rate"] == 0.5 and metrics["rl/turn2_acceptance_rate"] == 1.0
    assert metrics["rl/turn1_return_mean"] == pytest.approx(0.9)
    assert metrics["rl/beats_eager_rate"] == 0.25


@pytest.mark.slow  # about 95 s on 2 cores at load 16: eight turns, a sandbox child per distinct kernel
def test_a_real_multi_turn_grpo_step(tmp_path, build_cache_dir):
    from agentforge.rl.tiny import build_model, build_tokenizer
    from agentforge.rl.trl_train import train_grpo
    from transformers import LlamaForCausalLM

    base = load_config(CONFIG)
    config = config_from_dict({
        "name": "test-multiturn", "model": {"tiny": True, "seed": 0},
        "data": {"source": "smoke", "smoke_tasks": ["relu"], "repeat": 4},
        "multi_turn": {"max_turns": 2, "gamma": 0.4},
        "reward": {"shaper": "milestones", "shaper_params": {"skip_untimed_compile": True}},
        "service": {**vars(base.service), "sandbox_options": {"cache_dir": build_cache_dir}},
        "grpo": {**base.grpo, "max_steps": 1, "per_device_train_batch_size": 8, "num_generations": 8,
                 "save_strategy": "no"},
        "output": {"dir": str(tmp_path / "run"), "resume": False, "plot": True},
    })
    before = {k: v.clone() for k, v in build_model(build_tokenizer(), seed=0).state_dict().items()}
    outcome = train_grpo(config)

    records = [json.loads(line) for line in outcome.records_path.read_text().splitlines()]
    assert [r["meta"]["turn"] for r in records] == [1, 2] * 4  # four episodes of two turns
    by_episode = {}
    for r in records:
        by_episode.setdefault(r["meta"]["episode"], []).append(r)
        assert r["provenance"]["backend"] == "cpu" and r["provenance"]["evaluator_version"]
        assert r["summary"].startswith("smoke/relu [cpu] ")  # the evaluator's own verdict line
    for first, second in by_episode.values():
        assert first["meta"]["prompt"] == "relu:"
        word = verdict_word(RewardRecord(**{k: first[k] for k in (
            "task_name", "candidate_hash", "status", "accepted", "reward", "shaper", "components")}))
        assert second["meta"]["prompt"] == f"relu: {first['meta']['completion'].strip()} {word}"
        assert first["turn_return"] == pytest.approx(first["reward"] + 0.4 * second["reward"])
    episodes = [[first["reward"], second["reward"]] for first, second in by_episode.values()]
    expected = [a for ep in episode_advantages(episodes, 0.4) for a in ep]
    assert [r["advantage"] for r in records] == pytest.approx(expected)
    assert len({r["status"] for r in records}) > 1, "the real verdicts should differ within the group"

    logged = [h for h in outcome.log_history if "rl/turn1_reward_mean" in h]
    assert len(logged) == 1
    step = logged[0]
    for t in (1, 2):
        turn = [r for r in records if r["meta"]["turn"] == t]
        assert step[f"rl/turn{t}_reward_mean"] == pytest.approx(sum(r["reward"] for r in turn) / 4)
        assert step[f"rl/turn{t}_return_mean"] == pytest.approx(sum(r["turn_return"] for r in turn) / 4)
    assert (outcome.output_dir / "training.png").is_file()
    summary = json.loads((outcome.output_dir / "summary.json").read_text())
    assert summary["versions"]["trl"] and summary["versions"]["torch"] and summary["date"]

    after = LlamaForCausalLM.from_pretrained(outcome.output_dir / "final").state_dict()
    moved = [k for k in before if not torch.equal(before[k], after[k])]
    assert moved  # the verdicts differed, so the credit did, so the policy moved
