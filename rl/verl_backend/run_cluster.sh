#!/usr/bin/env bash
# GRPO with verl on a Ray cluster, rewarded by agentforge's evaluator.
#
# verl lives in its own environment (its pins conflict with the default install):
#   python3 -m venv ~/verl-env && ~/verl-env/bin/pip install "verl[vllm]==0.9.1"
#   ~/verl-env/bin/pip install --no-deps -e <repo>      # agentforge itself, nothing upgraded
# On the head node:        ray start --head --port=6379
# On every training node:   ray start --address=<head>:6379
# On every evaluation node: ray start --address=<head>:6379 --num-gpus=0 \
#                             --resources='{"agentforge_eval_gpu": <its GPU count>}'
#   (its GPUs stay out of training's reach; each reward evaluation reserves one unit and takes
#   one free device there: rl/ray_eval.py)
# Then, on the head:  REPO=<repo> MODEL=<model path> DATA=<folder> rl/verl_backend/run_cluster.sh
# It first checks that the evaluation resource and training's GPUs are in the cluster.
set -euo pipefail
REPO=${REPO:-$(pwd)}
DATA=${DATA:-$REPO/data/rl}
MODEL=${MODEL:?set MODEL to a local model folder or hub id}
PY=${VERL_PYTHON:-python}
REWARD_CONFIG=$REPO/rl/configs/verl-reward.toml
TRAIN_GPUS=$(( $(sed -nE 's/^trainer\.nnodes:[[:space:]]*([0-9]+).*/\1/p' "$REPO/rl/configs/verl-cluster.yaml") \
  * $(sed -nE 's/^trainer\.n_gpus_per_node:[[:space:]]*([0-9]+).*/\1/p' "$REPO/rl/configs/verl-cluster.yaml") ))
"$PY" -m agentforge.rl.verl_backend.preflight --config "$REWARD_CONFIG" --training-gpus "$TRAIN_GPUS"
"$PY" -m agentforge.rl.verl_backend.dataset --config "$REPO/rl/configs/gpu-lora.toml" --out "$DATA"
mapfile -t OVERRIDES < <(grep -v '^\s*#' "$REPO/rl/configs/verl-cluster.yaml" | grep ':' \
  | sed -E 's/^([^:]+):[[:space:]]*(.*)$/\1=\2/; s/[[:space:]]+#.*$//' \
  | sed "s#\${REPO}#$REPO#g; s#\${DATA}#$DATA#g; s#\${MODEL}#$MODEL#g")
exec "$PY" -m verl.trainer.main_ppo "${OVERRIDES[@]}" "$@"
