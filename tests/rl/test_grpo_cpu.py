"""Real GRPO steps (TRL) on a tiny Llama built in code, with a tokenizer built locally.

The first test is the control: when every completion of a group gets the same reward the
gradient is exactly zero and the weights do not move. The second gives rewards from the real
evaluator on the CPU backend: the policy's tokens are C statements placed into a lean C++
kernel, so some completions compile and compute 2*relu(x), some compute something else, some do
not compile. Rewards vary within groups and the weights change.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from agentforge.evaluator.result import CompileRecord, CorrectnessRecord, EvalResult, Stage, Status
from agentforge.rl.config import config_from_dict, load_config

SMOKE_CONFIG = Path(__file__).resolve().parents[2] / "rl" / "configs" / "cpu-smoke.toml"


def smoke_config(tmp_path, service=None, **grpo):
    service = service or {}
    config = load_config(SMOKE_CONFIG, {"output.dir": str(tmp_path / "run")})
    data = {
        "name": "test", "model": {"tiny": True, "seed": 0}, "data": {"source": "smoke", "repeat": 8},
        "reward": {"shaper": "milestones"}, "service": {**vars(config.service), **service},
        "grpo": {**config.grpo, "max_steps": 2, "save_steps": 1, **grpo},
        "output": {"dir": str(tmp_path / "run"), "resume": True, "plot": True},
    }
    return config_from_dict(data)


def initial_weights(config) -> dict[str, torch.Tensor]:
    from agentforge.rl.tiny import build_model, build_tokenizer

    model = build_model(build_tokenizer(), config.model.tiny_hidden_size, config.model.tiny_layers,
                        seed=config.model.seed)
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def final_weights(out) -> dict[str, torch.Tensor]:
    from transformers import LlamaForCausalLM

    return LlamaForCausalLM.from_pretrained(out / "final").state_dict()


def changed(before, after) -> list[str]:
    return [k for k in before if k in after and not torch.equal(before[k], after[k])]


def always_wrong(job) -> EvalResult:
    return EvalResult(job.task_name, "h", "cpu", Status.MISMATCH, Stage.CORRECTNESS,
                      compile=CompileRecord(ok=True, backend="cpu"),
                      correctness=(CorrectnessRecord("default", 42, passed=False),))


def test_equal_rewards_in_every_group_leave_the_weights_unchanged(tmp_path):
    from agentforge.rl.trl_train import train_grpo

    config = smoke_config(tmp_path)
    before = initial_weights(config)
    outcome = train_grpo(config, evaluate_fn=always_wrong)
    assert outcome.global_step == 2
    assert changed(before, final_weights(outcome.output_dir)) == []
    logged = [h for h in outcome.log_history if "rl/raw_reward_mean" in h]
    assert logged and all(h["rl/raw_reward_mean"] == -1.0 and h["rl/groups_with_signal"] == 0 for h in logged)


def _sandbox_ready() -> bool:
    from agentforge import sandbox

    return hasattr(sandbox, "run")


@pytest.mark.slow  # about 80 s on 2 busy cores: each distinct kernel is a fresh sandbox child
@pytest.mark.skipif(not _sandbox_ready(), reason="agentforge.sandbox.run is not available yet")
def test_real_evaluator_rewards_vary_within_groups_and_weights_change(tmp_path, build_cache_dir):
    from agentforge.rl.trl_train import train_grpo

    config = smoke_config(tmp_path, service={"sandbox_options": {"cache_dir": build_cache_dir}})
    before = initial_weights(config)
    outcome = train_grpo(config)
    out = outcome.output_dir

    # The reward plumbing: one record per completion, real verdicts with their provenance.
    records = [json.loads(line) for line in outcome.records_path.read_text().splitlines()]
    assert len(records) == 2 * 8
    statuses = {r["status"] for r in records}
    assert "ok" in statuses and statuses - {"ok"}, statuses
    for r in records:
        assert r["provenance"]["evaluator_version"] and r["provenance"]["backend"] == "cpu"
        assert r["provenance"]["device_kind"] == "cpu"
        assert r["reward"] == sum(r["components"].values())
        assert r["reward"] == (-1.0 if r["status"] != "ok" else r["reward"])
    ok = [r for r in records if r["accepted"]]
    assert all(r["speedup"] and r["speedup"] > 0 for r in ok)
    groups: dict[tuple[int, int], set[float]] = {}
    for r in records:
        groups.setdefault((r["step"], r["meta"]["group"]), set()).add(r["reward"])
    assert any(len(rewards) > 1 for rewards in groups.values())

    # The logged metrics.
    logged = [h for h in outcome.log_history if "rl/raw_reward_mean" in h]
    assert len(logged) == 2
    for key in ("rl/acceptance_rate", "rl/integrity_flag_rate", "rl/compile_error_rate", "rl/reward_gate",
                "rl/groups_with_signal", "reward", "loss"):
        assert all(key in h for h in logged), key
    assert any("rl/speedup_median" in h for h in logged)
    assert (out / "training.png").stat().st_size > 10_000
    assert json.loads((out / "summary.json").read_text())["global_step"] == 2

    # Rewards varied within a group, so the policy moved.
    assert changed(before, final_weights(out))


def relu_judge(job) -> EvalResult:
    """A stand-in verdict by inspection (fast), for tests of checkpoints and LoRA only."""
    from agentforge.evaluator.result import TimingRecord, TimingStats

    ok = "v=v>0.0f?v:0.0f;" in job.candidate_source or "v=v<0.0f?0.0f:v;" in job.candidate_source
    stats = TimingStats(10.0, 10.0, 0.1, 9.0, 11.0, 20, 0.001)
    return EvalResult(job.task_name, "h", "cpu", Status.OK if ok else Status.MISMATCH,
                      Stage.DONE if ok else Stage.CORRECTNESS, compile=CompileRecord(ok=True, backend="cpu"),
                      correctness=(CorrectnessRecord("default", 42, passed=ok),),
                      timing=TimingRecord("default", "host-monotonic", stats, {"eager": stats}) if ok else None)


def test_training_resumes_from_its_last_checkpoint(tmp_path):
    from agentforge.rl.trl_train import train_grpo

    config = smoke_config(tmp_path)
    first = train_grpo(config, evaluate_fn=relu_judge, max_steps=2)
    assert (first.output_dir / "checkpoint-2").is_dir()
    second = train_grpo(config, evaluate_fn=relu_judge, max_steps=3)
    assert second.global_step == 3
    steps = [json.loads(line)["step"] for line in second.records_path.read_text().splitlines()]
    assert sorted(set(steps)) == [0, 1, 2]  # the resumed run scored only step 3's batch


def test_lora_trains_the_adapter_and_leaves_the_base_weights(tmp_path):
    from agentforge.rl.trl_train import train_grpo
    from peft import PeftModel

    config = smoke_config(tmp_path, num_generations=4)
    config = config_from_dict({**_as_dict(config), "lora": {"enabled": True, "r": 4, "alpha": 8, "dropout": 0.0,
                                                              "target_modules": ["q_proj", "v_proj"]}})
    outcome = train_grpo(config, evaluate_fn=relu_judge, max_steps=2)
    adapter = PeftModel.from_pretrained(_tiny(config), outcome.output_dir / "final")
    lora_b = [p for n, p in adapter.named_parameters() if "lora_B" in n]
    assert lora_b and any(p.abs().sum() > 0 for p in lora_b)  # B starts at zero: it moved
    base = {k.removeprefix("base_model.model."): v for k, v in adapter.state_dict().items()
            if "lora_" not in k}
    before = initial_weights(config)
    assert all(torch.equal(before[k.replace(".base_layer", "")], v) for k, v in base.items()
               if k.replace(".base_layer", "") in before)


def _tiny(config):
    from agentforge.rl.tiny import build_model, build_tokenizer

    return build_model(build_tokenizer(), config.model.tiny_hidden_size, config.model.tiny_layers,
                       seed=config.model.seed)


def _as_dict(config) -> dict:
    import dataclasses

    return {f.name: (vars(getattr(config, f.name)) if dataclasses.is_dataclass(getattr(config, f.name))
                     else getattr(config, f.name)) for f in dataclasses.fields(config)}
