"""One `Settings`, built once at the CLI: flag, then `AGENTFORGE_*` variable, then file, then default.

Each setting is documented once, here (the `help` metadata); CLI help text is read from it.
Library code never reads `os.environ`: it receives the pieces of Settings it needs.
Environment names are `AGENTFORGE_<SECTION>_<FIELD>` (e.g. `AGENTFORGE_AGENT_MAX_ROUNDS`), or
`AGENTFORGE_<FIELD>` for top-level fields. Provider API keys also come from the providers' usual
variables (`OPENAI_API_KEY`, `ANTHROPIC_API_KEY`).
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


class SettingsError(ValueError):
    """A setting with a bad value; the message says which and what to set."""


def _s(default: Any, help: str, **kw: Any) -> Any:
    if isinstance(default, list | dict):
        return field(default_factory=lambda: type(default)(default), metadata={"help": help, **kw})
    return field(default=default, metadata={"help": help, **kw})


@dataclass
class ProviderSettings:
    name: str = _s("auto", "LLM provider: openai, anthropic, library, or auto (a configured key, else library)")
    model: str | None = _s(None, "coder model (provider default when unset)")
    judge_model: str | None = _s(None, "judge model (the coder's model when unset)")
    base_url: str | None = _s(None, "base URL of an OpenAI-compatible server (vLLM, SGLang, Ollama, ...)")
    api_key: str | None = _s(None, "API key (else OPENAI_API_KEY / ANTHROPIC_API_KEY)", secret=True)
    price_table: str | None = _s(None, "TOML file overriding per-model prices in USD per million tokens")
    max_retries: int = _s(5, "retries on rate limits and server errors, with exponential backoff")
    timeout_s: float = _s(300.0, "per-request timeout in seconds")
    temperature: float = _s(0.2, "sampling temperature of the coder")
    max_tokens: int = _s(8192, "maximum tokens of one reply")


@dataclass
class EvalSettings:
    backend: str = _s("auto", "kernel backend: cuda, triton, cpu, or auto (cuda with a GPU, else cpu)")
    device: str = _s("auto", "device to evaluate on: cpu, cuda, cuda:N, or auto")
    track: str = _s("hardened", "evaluation track: hardened, or kernelbench (its published settings)")
    cuda_arch: str = _s("sm_90a", "CUDA architecture for compile-only verdicts without a GPU")
    profile: bool = _s(True, "profile correct candidates with Nsight Compute when available")


@dataclass
class SandboxSettings:
    kind: str = _s("process", "where evaluations run: process, docker, or ray")
    timeout_s: float = _s(600.0, "wall-clock limit of one evaluation")
    memory_gb: float = _s(16.0, "address-space limit of the evaluation child in GiB")
    cpu_seconds: int = _s(1800, "CPU-time limit of the evaluation child")
    isolation: str = _s("auto", "filesystem/network isolation: auto, bwrap, unshare, or none")
    docker_image: str = _s("agentforge-eval:latest", "image for the docker sandbox")
    workers: int = _s(1, "parallel evaluation workers (one per GPU on CUDA)")
    ray_address: str | None = _s(None, "Ray cluster address, or 'auto'")


@dataclass
class AgentSettings:
    max_rounds: int = _s(10, "maximum coder/judge rounds")
    max_cost_usd: float = _s(5.0, "stop when the run's LLM cost reaches this")
    max_minutes: float = _s(60.0, "stop after this many minutes of wall time")
    plateau_rounds: int = _s(4, "stop after this many rounds without improvement")
    sol_stop: float = _s(0.95, "stop when the best kernel reaches this fraction of speed of light")
    max_failed_repairs: int = _s(3, "revert to the best correct kernel after this many failed repairs")
    slower_revert_ratio: float = _s(1.5, "a candidate this much slower than the best is not kept as base")


@dataclass
class Settings:
    tasks_root: str = _s("", "folder of task files (default: the repository's tasks/)")
    runs_dir: str = _s("runs", "where optimisation runs keep their checkpoints, artifacts and reports")
    cache_dir: str = _s("~/.cache/agentforge", "build cache (compiled kernels by source hash)")
    results_url: str = _s("sqlite:///results/agentforge.db", "SQLAlchemy URL of the results store")
    provider: ProviderSettings = field(default_factory=ProviderSettings)
    eval: EvalSettings = field(default_factory=EvalSettings)
    sandbox: SandboxSettings = field(default_factory=SandboxSettings)
    agent: AgentSettings = field(default_factory=AgentSettings)

    def validate(self) -> Settings:
        _choice("provider.name", self.provider.name, ("auto", "openai", "anthropic", "library"))
        _choice("eval.backend", self.eval.backend, ("auto", "cuda", "triton", "cpu"))
        _choice("eval.track", self.eval.track, ("hardened", "kernelbench"))
        _choice("sandbox.kind", self.sandbox.kind, ("process", "docker", "ray"))
        _choice("sandbox.isolation", self.sandbox.isolation, ("auto", "bwrap", "unshare", "none"))
        for name, value in (("agent.max_rounds", self.agent.max_rounds), ("sandbox.workers", self.sandbox.workers)):
            if value < 1:
                raise SettingsError(f"{name} must be >= 1 (got {value}); set --{name.split('.')[-1]}")
        return self


SECTIONS = ("provider", "eval", "sandbox", "agent")
DEFAULT_FILE = "agentforge.toml"


def load_settings(
    flags: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
    file: str | Path | None = None,
) -> Settings:
    """Merge the four sources. `flags` uses dotted keys (`agent.max_rounds`); None values are
    ignored so that unset CLI options fall through to the next source."""
    env = os.environ if env is None else env
    settings = Settings()
    path = Path(file) if file else Path(env.get("AGENTFORGE_CONFIG", DEFAULT_FILE))
    if path.is_file():
        with path.open("rb") as fh:
            _apply(settings, _flatten(tomllib.load(fh)), source=str(path))
    elif file:
        raise SettingsError(f"settings file {file} does not exist")
    _apply(settings, _from_env(env), source="environment")
    _apply(settings, {k: v for k, v in (flags or {}).items() if v is not None}, source="flag")
    _fill_api_key(settings, env)
    return settings.validate()


def describe(key: str) -> str:
    """The help text of a dotted setting, for CLI options."""
    obj: Any = Settings
    *sections, name = key.split(".")
    for section in sections:
        obj = typing.get_type_hints(obj)[section]
    return next(f.metadata["help"] for f in dataclasses.fields(obj) if f.name == name)


def _fill_api_key(settings: Settings, env: Mapping[str, str]) -> None:
    if settings.provider.api_key:
        return
    keys = {"openai": env.get("OPENAI_API_KEY"), "anthropic": env.get("ANTHROPIC_API_KEY")}
    name = settings.provider.name
    if name in keys:
        settings.provider.api_key = keys[name]
    elif name == "auto":
        for provider, key in keys.items():
            if key:
                settings.provider.name, settings.provider.api_key = provider, key
                return
        settings.provider.name = "openai" if settings.provider.base_url else "library"


def _flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, Mapping):
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _from_env(env: Mapping[str, str]) -> dict[str, str]:
    found: dict[str, str] = {}
    for section_name in (None, *SECTIONS):
        target = Settings if section_name is None else typing.get_type_hints(Settings)[section_name]
        for f in dataclasses.fields(target):
            if section_name is None and f.name in SECTIONS:
                continue
            dotted = f.name if section_name is None else f"{section_name}.{f.name}"
            var = "AGENTFORGE_" + dotted.replace(".", "_").upper()
            if var in env:
                found[dotted] = env[var]
    return found


def _apply(settings: Settings, values: Mapping[str, Any], source: str) -> None:
    for dotted, raw in values.items():
        *sections, name = dotted.split(".")
        obj: Any = settings
        for section in sections:
            if section not in SECTIONS or len(sections) > 1:
                raise SettingsError(f"unknown setting {dotted!r} from {source}")
            obj = getattr(obj, section)
        hints = typing.get_type_hints(type(obj))
        if name not in hints or name in SECTIONS:
            raise SettingsError(f"unknown setting {dotted!r} from {source}; known: {_known(obj)}")
        setattr(obj, name, _coerce(hints[name], raw, dotted, source))


def _known(obj: Any) -> str:
    return ", ".join(f.name for f in dataclasses.fields(obj) if f.name not in SECTIONS)


def _coerce(hint: Any, raw: Any, dotted: str, source: str) -> Any:
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    target = args[0] if args else hint
    if raw is None or not isinstance(raw, str):
        return raw
    try:
        if target is bool:
            if raw.lower() in ("1", "true", "yes", "on"):
                return True
            if raw.lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError(raw)
        return target(raw) if target in (int, float, str) else raw
    except ValueError as exc:
        raise SettingsError(f"{dotted} from {source}: {raw!r} is not a valid {target.__name__}") from exc


def _choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise SettingsError(f"{name} is {value!r}; choose one of: {', '.join(choices)}")
