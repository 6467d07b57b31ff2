"""An RL run's configuration: one TOML file, validated once, each setting documented here.

    [model]      which policy: a local path or hub id, or `tiny = true` for the CPU proof
    [lora]       LoRA through peft (enabled = true)
    [data]       which prompts: the smoke problems, or suites with a train / held-out split
    [multi_turn] Kevin-style episodes: turns of code -> verdict -> revised code, discounted credit
    [reward]     rewards.RewardConfig: shaper, failure reward, significance gate
    [normalize]  group z-scoring with clipping, in the reward function or left to TRL
    [service]    service.ServiceConfig: backend, device, concurrency, timeouts, executor, cache
    [grpo]       passed verbatim to TRL's GRPOConfig (its argument names)
    [sft]        passed verbatim to TRL's SFTConfig
    [output]     where checkpoints, logs and the plot go; resume or not
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from agentforge.rl.rewards import RewardConfig
from agentforge.rl.service import ServiceConfig

DATA_SOURCES = ("smoke", "suite")
PROMPT_STYLES = ("plain", "contrastive")
NORMALIZE_MODES = ("reward_fn", "trl")


class RLConfigError(ValueError):
    """A configuration that cannot run; the message names the setting to change."""


@dataclass(frozen=True)
class ModelSection:
    name_or_path: str = ""  # hub id or local folder; ignored when tiny = true
    tiny: bool = False  # a ~20k-parameter Llama and a WordLevel tokenizer built in code (rl/tiny.py)
    tiny_hidden_size: int = 32
    tiny_layers: int = 2
    seed: int = 0
    dtype: str = "auto"  # auto | float32 | bfloat16 | float16


@dataclass(frozen=True)
class LoraSection:
    enabled: bool = False
    r: int = 16
    alpha: int = 32
    dropout: float = 0.05
    target_modules: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj")


@dataclass(frozen=True)
class DataSection:
    source: str = "smoke"  # smoke: the CPU smoke problems | suite: tasks of `suites`
    smoke_tasks: tuple[str, ...] = ("relu",)  # source = smoke: keys of rl/tiny.py's SMOKE_TASKS
    # Read each task's shipped reference kernel record (same device and shape) for the reward's
    # beats_reference tier (rl/reference.py); records carry it as reference = "recorded".
    reference_records: bool = True
    suites: tuple[str, ...] = ("level1",)  # suite names (tasks/<name>/) or folders
    tasks_root: str | None = None  # None: the repository's tasks/
    eval_suites: tuple[str, ...] = ()  # suites used for evaluation: decontaminated against
    held_out_fraction: float = 0.2
    split_seed: int = 0
    prompt: str = "plain"  # plain | contrastive (earlier scored kernels from the results store)
    results_url: str | None = None  # results store for contrastive prompts
    contrastive_examples: int = 3
    repeat: int = 1  # each training prompt appears this many times per epoch
    chat: bool = False  # prompts as chat messages, so an instruct model's chat template applies
    max_tasks: int | None = None


@dataclass(frozen=True)
class NormalizeSection:
    mode: str = "reward_fn"  # reward_fn: z-score + clip here (one process) | trl: TRL's scale_rewards
    group_clip: float | None = 1.5


@dataclass(frozen=True)
class MultiTurnSection:
    # 1: plain single-turn GRPO. N > 1: each group of `num_generations` completions is
    # num_generations / N episodes of N turns; turn t+1's prompt shows the earlier turns' code and
    # the evaluator's verdict; each turn is trained with its discounted return (rl/multi_turn.py).
    max_turns: int = 1
    gamma: float = 0.4  # G_t = r_t + gamma * G_{t+1} (Kevin: 0.4)


@dataclass(frozen=True)
class OutputSection:
    dir: str = "runs/rl/run"  # runs/ is git-ignored: checkpoints never land in the tracked tree
    resume: bool = True  # continue from the last checkpoint in `dir` when there is one
    plot: bool = True


@dataclass(frozen=True)
class RLConfig:
    name: str = "run"
    model: ModelSection = field(default_factory=ModelSection)
    lora: LoraSection = field(default_factory=LoraSection)
    data: DataSection = field(default_factory=DataSection)
    reward: RewardConfig = field(default_factory=RewardConfig)
    normalize: NormalizeSection = field(default_factory=NormalizeSection)
    multi_turn: MultiTurnSection = field(default_factory=MultiTurnSection)
    service: ServiceConfig = field(default_factory=ServiceConfig)
    grpo: dict[str, Any] = field(default_factory=dict)
    sft: dict[str, Any] = field(default_factory=dict)
    output: OutputSection = field(default_factory=OutputSection)

    @property
    def output_dir(self) -> Path:
        return Path(self.output.dir)


_SECTIONS: dict[str, type] = {
    "model": ModelSection, "lora": LoraSection, "data": DataSection, "reward": RewardConfig,
    "normalize": NormalizeSection, "multi_turn": MultiTurnSection, "service": ServiceConfig,
    "output": OutputSection,
}


def load_config(path: str | Path, overrides: dict[str, Any] | None = None) -> RLConfig:
    """Read and validate a TOML run configuration; `overrides` are dotted keys (output.dir)."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise RLConfigError(f"{path}: {exc}") from exc
    for dotted, value in (overrides or {}).items():
        section, _, key = dotted.partition(".")
        data.setdefault(section, {})[key] = value
    return config_from_dict(data, where=str(path))


def config_from_dict(data: dict[str, Any], where: str = "config") -> RLConfig:
    known = {f.name for f in fields(RLConfig)}
    unknown = set(data) - known
    if unknown:
        raise RLConfigError(f"{where}: unknown sections {sorted(unknown)}; known: {sorted(known)}")
    values: dict[str, Any] = {}
    for name, value in data.items():
        cls = _SECTIONS.get(name)
        values[name] = _section(cls, value, f"{where} [{name}]") if cls else value
    config = RLConfig(**values)
    _validate(config, where)
    return config


def _section(cls: type, value: dict[str, Any], where: str) -> Any:
    if not isinstance(value, dict):
        raise RLConfigError(f"{where} must be a table")
    names = {f.name: f for f in fields(cls)}
    unknown = set(value) - set(names)
    if unknown:
        raise RLConfigError(f"{where}: unknown settings {sorted(unknown)}; known: {sorted(names)}")
    converted = {k: tuple(v) if isinstance(v, list) else v for k, v in value.items()}
    try:
        return cls(**converted)
    except (TypeError, ValueError) as exc:
        raise RLConfigError(f"{where}: {exc}") from exc


def _validate(config: RLConfig, where: str) -> None:
    from agentforge.rl.rewards import RewardConfigError, build_rewarder

    try:
        build_rewarder(config.reward)
    except RewardConfigError as exc:
        raise RLConfigError(f"{where} [reward]: {exc}") from exc
    checks = [
        (config.data.source in DATA_SOURCES, f"[data] source must be one of {DATA_SOURCES}"),
        (config.data.prompt in PROMPT_STYLES, f"[data] prompt must be one of {PROMPT_STYLES}"),
        (config.normalize.mode in NORMALIZE_MODES, f"[normalize] mode must be one of {NORMALIZE_MODES}"),
        (config.model.tiny or bool(config.model.name_or_path),
         "[model] needs name_or_path (a hub id or local folder), or tiny = true"),
        (0.0 <= config.data.held_out_fraction < 1.0, "[data] held_out_fraction must lie in [0, 1)"),
        (config.multi_turn.max_turns >= 1, "[multi_turn] max_turns must be >= 1"),
        (0.0 <= config.multi_turn.gamma <= 1.0, "[multi_turn] gamma must lie in [0, 1]"),
        (config.multi_turn.max_turns == 1 or config.grpo.get("num_generations", 8) % config.multi_turn.max_turns == 0,
         "[grpo] num_generations must be a multiple of [multi_turn] max_turns (a group is whole episodes)"),
        (config.multi_turn.max_turns == 1 or not config.grpo.get("use_vllm", False),
         "[multi_turn] episodes generate in process with transformers; set [grpo] use_vllm = false"),
    ]
    for ok, message in checks:
        if not ok:
            raise RLConfigError(f"{where}: {message}")
    if config.data.source == "smoke":
        from agentforge.rl.tiny import SMOKE_TASKS

        unknown = [t for t in config.data.smoke_tasks if t not in SMOKE_TASKS]
        if unknown or not config.data.smoke_tasks:
            raise RLConfigError(f"{where}: [data] smoke_tasks {unknown or '[]'}: choose from {sorted(SMOKE_TASKS)}")
