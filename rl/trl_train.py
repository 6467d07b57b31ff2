"""Training on one node with TRL: GRPO with the evaluator as reward, and an SFT warm start.

TRL, transformers, peft and datasets are imported inside the functions, so importing this
module costs nothing. Checkpoints go to `[output] dir`; a run restarts from the last one there
when `[output] resume` is true. Besides TRL's own log, each run writes `rewards.jsonl` (one
RewardRecord per completion, with its provenance), `log_history.json`, `summary.json` and
`training.png`. With `[multi_turn] max_turns > 1` the completions come from multi-turn
episodes (rl/multi_turn.py, through TRL's `rollout_func`). `summary.json` records the versions,
machine and date that made the run, and the wall-clock time it took.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from agentforge.evaluator.result import EvalJob, EvalResult
from agentforge.rl.config import RLConfig, RLConfigError
from agentforge.rl.reward_fn import ServiceReward
from agentforge.rl.rewards import build_rewarder
from agentforge.rl.service import RewardService

# What GRPOConfig gets unless the [grpo] table says otherwise.
GRPO_DEFAULTS: dict[str, Any] = {
    "report_to": "none",
    "logging_steps": 1,
    "save_strategy": "steps",
    "save_steps": 50,
    "beta": 0.0,
    "num_generations": 8,
    "max_completion_length": 1024,
}


@dataclass(frozen=True)
class TrainOutcome:
    output_dir: Path
    log_history: list[dict[str, Any]]
    records_path: Path
    plot_path: Path | None
    service_stats: dict[str, int]
    global_step: int


def load_policy(config: RLConfig) -> tuple[Any, Any]:
    """(model, tokenizer): the tiny in-code model, or a pretrained one from a path or hub id."""
    if config.model.tiny:
        from agentforge.rl.tiny import build_model, build_tokenizer

        tokenizer = build_tokenizer()
        model = build_model(tokenizer, config.model.tiny_hidden_size, config.model.tiny_layers,
                            seed=config.model.seed)
        return model, tokenizer
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(config.model.name_or_path)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    dtype = "auto" if config.model.dtype == "auto" else getattr(torch, config.model.dtype)
    model = AutoModelForCausalLM.from_pretrained(config.model.name_or_path, dtype=dtype)
    return model, tokenizer


def peft_config(config: RLConfig) -> Any:
    if not config.lora.enabled:
        return None
    from peft import LoraConfig

    lora = config.lora
    return LoraConfig(r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout,
                      target_modules=list(lora.target_modules), task_type="CAUSAL_LM")


def prompt_rows(config: RLConfig, report_dir: Path | None = None) -> list[dict[str, Any]]:
    """The training prompts: the smoke problem, or the train split of the suites (minus tasks
    that overlap the held-out or evaluation suites; the report goes to `report_dir` if given)."""
    from agentforge.rl import data

    if config.data.source == "smoke":
        return data.smoke_rows(config.data.repeat, config.data.smoke_tasks, _reference_lookup(config))
    root = Path(config.data.tasks_root) if config.data.tasks_root else None
    items = [it for suite in config.data.suites for it in data.load_suite(suite, root)]
    train, held_out = data.split(items, config.data.held_out_fraction, config.data.split_seed)
    evaluation = held_out + [it for suite in config.data.eval_suites for it in data.load_suite(suite, root)]
    report = data.decontamination_report(train, evaluation)
    if report_dir is not None:
        (report_dir / "decontamination.md").write_text(report.to_markdown())
    train = [it for it in train if it.name not in report.contaminated]
    if config.data.max_tasks:
        train = train[: config.data.max_tasks]
    history = None
    if config.data.prompt == "contrastive":
        if not config.data.results_url:
            raise RLConfigError("[data] prompt = 'contrastive' needs results_url (the results store)")
        from agentforge.rl.prompts import StoreHistory

        history = StoreHistory(config.data.results_url)
    rows = data.grpo_rows(train, config.service.backend, history, config.data.contrastive_examples,
                          config.data.repeat, config.data.split_seed)
    lookup = _reference_lookup(config)
    if lookup is not None:
        for row in rows:
            found = lookup(row["task_name"])
            row["reference_speedup"] = found.speedup if found else None
            row["reference_record"] = found.source if found else None
    if config.data.chat:
        rows = [{**row, "prompt": [{"role": "user", "content": row["prompt"]}]} for row in rows]
    return rows


def timing_shape(config: RLConfig) -> str:
    """The shape variant the reward's jobs time (make_job: `timing_shape`, else the first of `shapes`)."""
    options = config.service.job_options
    shapes = options.get("shapes") or ()
    return str(options.get("timing_shape") or (shapes[0] if shapes else "default"))


def _reference_lookup(config: RLConfig) -> Callable[[str], Any] | None:
    """task name -> the shipped kernel's recorded speedup on this device and timing shape."""
    if not config.data.reference_records:
        return None
    from agentforge.rl.reference import recorded_reference, this_device

    try:
        slug, name = this_device(config.service.device)
    except (RuntimeError, AssertionError) as exc:  # no such device here: no record can match it
        raise RLConfigError(f"[service] device {config.service.device!r} is not usable here: {exc}") from exc
    shape, backend = timing_shape(config), config.service.backend
    return lambda task: recorded_reference(task, backend, slug, shape, name)


def grpo_args(config: RLConfig, max_steps: int | None = None) -> Any:
    from trl import GRPOConfig

    values = {**GRPO_DEFAULTS, **config.grpo, "output_dir": str(config.output_dir)}
    if config.normalize.mode == "reward_fn":
        values.setdefault("scale_rewards", "none")  # already z-scored and clipped per group
    if max_steps is not None:
        values["max_steps"] = max_steps
    if config.model.tiny:  # the tiny policy never writes a verdict word, it only reads them
        from agentforge.rl.tiny import build_tokenizer, input_only_token_ids

        kwargs = dict(values.get("generation_kwargs") or {})
        kwargs.setdefault("suppress_tokens", input_only_token_ids(build_tokenizer()))
        values["generation_kwargs"] = kwargs
    try:
        return GRPOConfig(**values)
    except (TypeError, ValueError) as exc:
        raise RLConfigError(f"[grpo]: {exc}") from exc


def train_grpo(config: RLConfig, *, evaluate_fn: Callable[[EvalJob], EvalResult] | None = None,
               max_steps: int | None = None, callbacks: Sequence[Any] = ()) -> TrainOutcome:
    """GRPO with the reward service as an async reward function; resumes when asked to."""
    from datasets import Dataset
    from transformers.trainer_utils import get_last_checkpoint
    from trl import GRPOTrainer

    started = time.monotonic()
    out = config.output_dir
    out.mkdir(parents=True, exist_ok=True)
    args = grpo_args(config, max_steps)
    model, tokenizer = load_policy(config)
    service = RewardService(build_rewarder(config.reward), config.service, evaluate_fn=evaluate_fn)
    records_path = out / "rewards.jsonl"
    rows = prompt_rows(config, out)
    normalize = config.normalize.mode == "reward_fn"
    extra: dict[str, Any] = {}
    if config.multi_turn.max_turns > 1:
        from agentforge.rl.multi_turn import EpisodeRollout

        rollout = EpisodeRollout(
            rows, service, tokenizer, max_turns=config.multi_turn.max_turns, gamma=config.multi_turn.gamma,
            num_generations=args.num_generations, compact=config.data.source == "smoke", chat=config.data.chat,
            backend=config.service.backend, clip=config.normalize.group_clip, normalize=normalize,
            log_path=records_path)
        reward: Any = rollout.reward
        extra["rollout_func"] = rollout
    else:
        reward = ServiceReward(service, args.num_generations, config.normalize.group_clip,
                               normalize=normalize, log_path=records_path)
    trainer = GRPOTrainer(
        model=model, reward_funcs=[reward], args=args, train_dataset=Dataset.from_list(rows),
        processing_class=tokenizer, peft_config=peft_config(config), callbacks=list(callbacks) or None, **extra,
    )
    last = get_last_checkpoint(str(out)) if config.output.resume and out.is_dir() else None
    trainer.train(resume_from_checkpoint=last)
    trainer.save_model(str(out / "final"))
    return _finish(config, trainer, records_path, asdict(service.stats), started=started)


def train_sft(config: RLConfig, *, max_steps: int | None = None, kernels: Sequence[Any] | None = None,
              evaluate_fn: Callable[[EvalJob], EvalResult] | None = None) -> TrainOutcome:
    """Warm start on verified kernels (shipped reference kernels and accepted agent runs)."""
    from agentforge.rl import data
    from datasets import Dataset
    from transformers.trainer_utils import get_last_checkpoint
    from trl import SFTConfig, SFTTrainer

    out = config.output_dir
    out.mkdir(parents=True, exist_ok=True)
    rows = data.sft_rows(kernels if kernels is not None else sft_kernels(config, evaluate_fn))
    if not rows:
        raise RLConfigError("no verified kernels for these suites: nothing to fine-tune on")
    (out / "sft_dataset.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    values = {"report_to": "none", "logging_steps": 1, **config.sft, "output_dir": str(out)}
    if max_steps is not None:
        values["max_steps"] = max_steps
    try:
        args = SFTConfig(**values)
    except (TypeError, ValueError) as exc:
        raise RLConfigError(f"[sft]: {exc}") from exc
    model, tokenizer = load_policy(config)
    trainer = SFTTrainer(model=model, args=args, train_dataset=Dataset.from_list(rows),
                         processing_class=tokenizer, peft_config=peft_config(config))
    last = get_last_checkpoint(str(out)) if config.output.resume and out.is_dir() else None
    trainer.train(resume_from_checkpoint=last)
    trainer.save_model(str(out / "final"))
    return _finish(config, trainer, out / "rewards.jsonl", {}, plot=False)


def sft_kernels(config: RLConfig, evaluate_fn: Callable[[EvalJob], EvalResult] | None = None) -> list[Any]:
    """Verified kernels of the configured tasks: the smoke problem's known answer, or the suites'
    train split (shipped reference kernels and accepted agent runs). Kernels without a record of
    acceptance are evaluated now, through the reward service, and kept only if accepted."""
    from agentforge.rl import data

    if config.data.source == "smoke":
        from agentforge.rl.tiny import smoke_task, smoke_template

        name, source = smoke_task()
        reply = smoke_template().replace("{completion}", "v=v>0.0f?v:0.0f;")
        kernel = reply.strip().removeprefix("```python").removesuffix("```").strip()
        candidates = [data.VerifiedKernel(name, source, kernel, "cpu", None, "smoke")]
    else:
        root = Path(config.data.tasks_root) if config.data.tasks_root else None
        items = [it for suite in config.data.suites for it in data.load_suite(suite, root)]
        train, _ = data.split(items, config.data.held_out_fraction, config.data.split_seed)
        candidates = [k for k in data.reference_kernels(train) if k.backend == config.service.backend]
        if config.data.results_url:
            candidates += data.store_kernels(config.data.results_url, train)
    service = RewardService(build_rewarder(config.reward), config.service, evaluate_fn=evaluate_fn)
    return data.verify(candidates, service)


def run_environment() -> dict[str, Any]:
    """What made a run: library versions, the machine, the date (for summary.json)."""
    import datetime
    import os
    import platform
    from importlib import metadata

    versions = {"python": platform.python_version()}
    for dist in ("torch", "trl", "transformers", "accelerate", "peft", "datasets"):
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    from agentforge.rl.reference import this_device

    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    return {
        "versions": versions,
        "machine": {"cpu": this_device("cpu")[1], "cores": os.cpu_count(), "system": platform.platform(),
                    "load_average_at_end": [round(x, 2) for x in load] if load else None},
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }


def _finish(config: RLConfig, trainer: Any, records_path: Path, stats: dict[str, int],
            plot: bool = True, started: float | None = None) -> TrainOutcome:
    out = config.output_dir
    history = list(trainer.state.log_history)
    (out / "log_history.json").write_text(json.dumps(history, indent=1, default=str))
    plot_path = None
    if plot and config.output.plot:
        from agentforge.rl.plots import plot_training

        plot_path = plot_training(history, records_path, out / "training.png", title=config.name)
    summary = {"name": config.name, "global_step": trainer.state.global_step, "service": stats,
               "final": history[-1] if history else {}, **run_environment()}
    if started is not None:
        summary["wall_clock_s"] = round(time.monotonic() - started, 1)
    (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
    return TrainOutcome(out, history, records_path, plot_path, stats, trainer.state.global_step)
