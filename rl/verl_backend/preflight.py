"""Before a verl run: does the Ray cluster hold what the reward side will ask for?

`python -m agentforge.rl.verl_backend.preflight --config rl/configs/verl-reward.toml` (run by
run_cluster.sh on the head node) joins the running cluster and checks that some node declares
each custom resource the reward's evaluation tasks reserve (`[service] ray_resources`), and
that Ray GPUs are still there for training. Without an evaluation node every reward request
would wait for a resource nobody offers and time out with the failure reward, so the run stops
here instead, saying which `ray start` line is missing. Exit status 0: ready; 2: not.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from agentforge.rl.service import ServiceConfig


def problems(service: ServiceConfig, cluster: dict[str, Any], training_gpus: int = 0) -> list[str]:
    """What stops `service`'s evaluations (and `training_gpus` of training) on a cluster whose
    total resources are `cluster` (ray.cluster_resources())."""
    found = []
    for name, amount in service.ray_resources.items():
        have = float(cluster.get(name, 0.0))
        if have < amount:
            found.append(f"no node offers {amount:g} of the evaluation resource {name!r} (cluster total: {have:g}); "
                         f"on each evaluation node run: ray start --address=<head>:6379 --num-gpus=0 "
                         f"--resources='{{\"{name}\": <its GPU count>}}'")
    if service.ray_num_gpus > 0 and service.ray_resources:
        found.append("ray_num_gpus > 0 with ray_resources: evaluation tasks would compete with training for "
                     "Ray GPUs; set ray_num_gpus = 0 (evaluation nodes hide their GPUs from Ray)")
    gpus = float(cluster.get("GPU", 0.0))
    if training_gpus and gpus < training_gpus:
        found.append(f"training asks for {training_gpus} Ray GPUs (trainer.nnodes x trainer.n_gpus_per_node) "
                     f"and the cluster offers {gpus:g}")
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="the reward side's rl config (verl-reward.toml)")
    parser.add_argument("--training-gpus", type=int, default=0, help="GPUs verl's training takes")
    parser.add_argument("--address", default="auto", help="Ray cluster address (default: the running one)")
    args = parser.parse_args(argv)
    import ray
    from agentforge.rl.config import load_config

    service = load_config(args.config).service
    ray.init(address=args.address, logging_level="ERROR", log_to_driver=False)
    try:
        found = problems(service, ray.cluster_resources(), args.training_gpus)
    finally:
        ray.shutdown()
    for line in found:
        print(f"preflight: {line}", file=sys.stderr)
    if not found:
        print(f"preflight: evaluation resources {service.ray_resources or '(none)'} and training GPUs are there")
    return 2 if found else 0


if __name__ == "__main__":
    sys.exit(main())
