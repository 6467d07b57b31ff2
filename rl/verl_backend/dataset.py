"""verl's training data: parquet rows with chat prompts, the task as ground truth, and what the
score function needs in `extra_info`.

    python -m agentforge.rl.verl_backend.dataset --config rl/configs/gpu-lora.toml --out data/rl/
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

DATA_SOURCE = "agentforge"


def verl_rows(rows: list[dict[str, Any]], split: str) -> list[dict[str, Any]]:
    """Our GRPO rows (prompt, task_name, task_source, ...) in verl's RLHF dataset layout."""
    out = []
    for i, row in enumerate(rows):
        text = row["prompt"] if isinstance(row["prompt"], str) else row["prompt"][-1]["content"]
        extra = {"split": split, "index": i, "task_source": row["task_source"]}
        for key in ("template", "reference_speedup"):
            if row.get(key) is not None:
                extra[key] = row[key]
        out.append({
            "data_source": DATA_SOURCE,
            "prompt": [{"role": "user", "content": text}],
            "ability": "gpu-kernels",
            "reward_model": {"style": "rule", "ground_truth": row["task_name"]},
            "extra_info": extra,
        })
    return out


def write_parquet(config_path: str, out_dir: Path) -> dict[str, Path]:
    """train.parquet and val.parquet (the held-out tasks) for a run configuration."""
    from agentforge.rl import data
    from agentforge.rl.config import load_config
    from agentforge.rl.trl_train import prompt_rows
    from datasets import Dataset

    config = load_config(config_path)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"train": out_dir / "train.parquet", "val": out_dir / "val.parquet"}
    Dataset.from_list(verl_rows(prompt_rows(config), "train")).to_parquet(str(paths["train"]))
    if config.data.source == "suite":
        root = Path(config.data.tasks_root) if config.data.tasks_root else None
        items = [it for s in config.data.suites for it in data.load_suite(s, root)]
        _, held = data.split(items, config.data.held_out_fraction, config.data.split_seed)
        val = data.grpo_rows(held, config.service.backend)
    else:
        val = prompt_rows(config)[:1]
    Dataset.from_list(verl_rows(val, "val")).to_parquet(str(paths["val"]))
    return paths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", required=True)
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args()
    for split, path in write_parquet(args.config, args.out).items():
        print(f"{split}: {path}")


if __name__ == "__main__":
    main()
