"""`agentforge rl sft`: a warm-start dataset of kernels the real evaluator accepted, trained
with TRL's SFT trainer on the tiny in-code model."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from agentforge.rl.config import config_from_dict

SMOKE = Path(__file__).resolve().parents[2] / "rl" / "configs" / "cpu-smoke.toml"


def test_sft_warm_start_on_evaluator_verified_kernels(tmp_path, build_cache_dir):
    from agentforge.rl.config import load_config
    from agentforge.rl.tiny import build_model, build_tokenizer
    from agentforge.rl.trl_train import train_sft
    from transformers import LlamaForCausalLM

    smoke = load_config(SMOKE)
    config = config_from_dict({
        "name": "sft-test", "model": {"tiny": True}, "data": {"source": "smoke"},
        "service": {**vars(smoke.service), "sandbox_options": {"cache_dir": build_cache_dir}},
        "sft": {"use_cpu": True, "bf16": False, "per_device_train_batch_size": 1, "learning_rate": 0.01,
                "max_length": 512, "save_strategy": "no"},
        "output": {"dir": str(tmp_path / "sft"), "resume": False, "plot": False},
    })
    before = build_model(build_tokenizer()).state_dict()
    outcome = train_sft(config, max_steps=2)
    rows = [json.loads(line) for line in (outcome.output_dir / "sft_dataset.jsonl").read_text().splitlines()]
    assert len(rows) == 1 and "v=v>0.0f?v:0.0f;" in rows[0]["completion"]
    assert outcome.global_step == 2
    assert any("loss" in h for h in outcome.log_history)
    after = LlamaForCausalLM.from_pretrained(outcome.output_dir / "final").state_dict()
    assert any(not torch.equal(before[k], after[k]) for k in before)
