#!/usr/bin/env bash
# The GPU proof (issue #7, item 8): a short LoRA GRPO run with the CUDA evaluator as reward.
# Run from the repository root on a machine with one CUDA GPU, the `rl` and `cuda` extras
# installed, and the model of rl/configs/gpu-lora.toml in the local Hugging Face cache (or
# MODEL=/path/to/a/local/folder). Writes results/rl/gpu-lora/{log_history.json, summary.json,
# rewards.jsonl, training.png}; commit those (not the checkpoints).
set -euo pipefail
CONFIG=${CONFIG:-rl/configs/gpu-lora.toml}
OUT=${OUT:-results/rl/gpu-lora}
STEPS=${STEPS:-30}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "${OUT}.gpu.txt" || true
ARGS=(--config "$CONFIG" --output-dir "$OUT" --max-steps "$STEPS")
if [[ -n "${MODEL:-}" ]]; then
  # A local folder instead of the hub id: write a copy of the config that points at it.
  sed "s#^name_or_path = .*#name_or_path = \"${MODEL}\"#" "$CONFIG" > /tmp/gpu-lora.toml
  ARGS=(--config /tmp/gpu-lora.toml --output-dir "$OUT" --max-steps "$STEPS")
fi
HF_HUB_OFFLINE=1 agentforge rl train "${ARGS[@]}" 2>&1 | tee "$OUT.log"
mkdir -p "$OUT" && mv "$OUT.log" "$OUT.gpu.txt" "$OUT/" 2>/dev/null || true
echo "plot: $OUT/training.png"
