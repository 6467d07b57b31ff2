"""The training plot: reward, acceptance and flag rates, reward components, speedups."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def read_records(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def plot_training(log_history: Sequence[dict[str, Any]], records_path: Path, out: Path, title: str = "") -> Path:
    """Four panels from the trainer's log and the reward records; written as PNG to `out`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    logs = [h for h in log_history if "step" in h and "rl/raw_reward_mean" in h]
    steps = [h["step"] for h in logs]
    fig, axes = plt.subplots(2, 2, figsize=(11, 7))
    ax = axes[0][0]
    ax.plot(steps, [h["rl/raw_reward_mean"] for h in logs], marker="o", label="raw reward (mean)")
    if logs and "reward" in logs[0]:
        ax.plot(steps, [h.get("reward", 0.0) for h in logs], marker=".", label="normalised reward")
    turns = sorted({k for h in logs for k in h if k.startswith("rl/turn") and k.endswith("_reward_mean")})
    for key in turns:  # multi-turn runs: each turn's raw reward
        ax.plot(steps, [h.get(key, 0.0) for h in logs], marker="x", linestyle=":",
                label=key.removeprefix("rl/").removesuffix("_reward_mean") + " raw")
    ax.set_title("reward per step")
    ax.legend(fontsize=8)
    ax = axes[0][1]
    for key in ("rl/acceptance_rate", "rl/integrity_flag_rate", "rl/compile_error_rate", "rl/no_code_rate"):
        ax.plot(steps, [h.get(key, 0.0) for h in logs], marker="o", label=key.split("/")[1])
    ax.set_ylim(-0.05, 1.05)
    ax.set_title("rates per step")
    ax.legend(fontsize=8)
    ax = axes[1][0]
    components = sorted({k for h in logs for k in h if k.startswith("rl/reward_")})
    for key in components:
        ax.plot(steps, [h.get(key, 0.0) for h in logs], marker="o", label=key.removeprefix("rl/reward_"))
    ax.set_title("reward components (batch mean)")
    if components:
        ax.legend(fontsize=8)
    ax = axes[1][1]
    speedups = [r["speedup"] for r in read_records(records_path) if r.get("speedup") is not None]
    if speedups:
        ax.hist(speedups, bins=min(20, max(5, len(set(speedups)))))
    ax.set_title(f"speedup vs eager of accepted kernels (n={len(speedups)})")
    for row in axes:
        for a in row[:1]:
            a.set_xlabel("step")
    fig.suptitle(title)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out
