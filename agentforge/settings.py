"""One `Settings`, built once at the CLI: flag, then `AGENTFORGE_*` variable, then file, then default.

Each setting is documented once, here (the `help` metadata); CLI help text is read from it.
Library code never reads `os.environ`: it receives the pieces of Settings it needs.
Environment names are `AGENTFORGE_<SECTION>_<FIELD>` (e.g. `AGENTFORGE_AGENT_MAX_ROUNDS`), or
`AGENTFORGE_<FIELD>` for top-level fields. Provider API keys also come from the providers' usual
variables (`OPENAI_API_KEY`, `ANTHROPIC_API_KEY`).
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import tomllib
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


class SettingsError(ValueError):
    """A setting with a bad value; the message says which and what to set."""


def _s(default: Any, help: str, **kw: Any) -> Any:
    """A setting: its default, its help text, and its bounds (`gt`, `ge`, `le`: numbers must lie
    within them; every float must be finite), `choices`, or a `pattern` (a regular expression the
    whole text must match, said to the user as `pattern_help`), and a `check` (a function of the
    value returning what is wrong with it, or None)."""
    if isinstance(default, list | dict):
        return field(default_factory=lambda: type(default)(default), metadata={"help": help, **kw})
    return field(default=default, metadata={"help": help, **kw})


def _sandbox(name: str, help: str, **kw: Any) -> Any:
    """A sandbox setting whose default is `SandboxConfig`'s (sandbox/config.py holds each number
    once, for the CLI and for library callers alike). Read when a `Settings` is made, not at
    import, so that `agentforge --help` does not import the sandbox."""

    def default() -> Any:
        from agentforge.sandbox.config import default_of

        return default_of(name)

    return field(default_factory=default, metadata={"help": help, **kw})


@dataclass
class ProviderSettings:
    name: str = _s("auto", "LLM provider: openai, anthropic, library, or auto (a configured key, else library)",
                   choices=("auto", "openai", "anthropic", "library"))
    model: str | None = _s(None, "coder model (provider default when unset)")
    judge_model: str | None = _s(None, "judge model (the coder's model when unset)")
    base_url: str | None = _s(None, "base URL of an OpenAI-compatible server (vLLM, SGLang, Ollama, ...)")
    api_key: str | None = _s(None, "API key (else OPENAI_API_KEY / ANTHROPIC_API_KEY)", secret=True)
    price_table: str | None = _s(None, "TOML file overriding per-model prices in USD per million tokens")
    max_retries: int = _s(5, "retries on rate limits and server errors, with exponential backoff", ge=0)
    timeout_s: float = _s(300.0, "per-request timeout in seconds", gt=0)
    temperature: float = _s(0.2, "sampling temperature of the coder", ge=0)
    max_tokens: int = _s(8192, "maximum tokens of one reply (less when a server by base URL reports a "
                         "context that leaves less after the prompt)", ge=1)


@dataclass
class EvalSettings:
    backend: str = _s("auto", "kernel backend: cuda, triton, cpu, or auto (cuda with a GPU, else cpu)",
                      choices=("auto", "cuda", "triton", "cpu"))
    device: str = _s("auto", "device to evaluate on: cpu, cuda, cuda:N, or auto")
    track: str = _s("hardened", "evaluation track: hardened, or kernelbench (its published settings)",
                    choices=("hardened", "kernelbench"))
    cuda_arch: str = _s("sm_90a", "CUDA architecture for compile-only verdicts without a GPU")
    profile: bool = _s(True, "profile correct candidates with Nsight Compute when available")


@dataclass
class SandboxSettings:
    kind: str = _sandbox("kind", "where evaluations run: process, docker, or ray", choices=("process", "docker", "ray"))
    timeout_s: float = _sandbox("timeout_s", "wall-clock limit of one evaluation in seconds", gt=0)
    memory_gb: float = _sandbox("memory_gb", "memory limit of the evaluation child in GiB", gt=0)
    cpu_seconds: int = _sandbox("cpu_seconds", "CPU-time limit of the evaluation child", ge=1)
    isolation: str = _sandbox("isolation", "filesystem/network isolation: auto (bwrap, else unshare; as root without "
                              "either it refuses), bwrap, unshare, or none (no isolation: only when asked for)",
                              choices=("auto", "bwrap", "unshare", "none"))
    disk_gb: float = _sandbox("disk_gb", "total disk use of one evaluation (its work folder, /tmp and /dev/shm) in "
                              "GiB", gt=0)
    docker_image: str = _sandbox("docker_image", "image for the docker sandbox")
    workers: int = _s(1, "parallel evaluation workers (one per GPU on CUDA)", ge=1)
    warm_spares: int = _sandbox("warm_spares", "CPU evaluation children started ahead of their job, so a job does "
                                "not wait for Python and torch to start (0: none)", ge=0)
    prebuild_headers: bool = _sandbox("prebuild_headers", "precompile torch/extension.h in the background for "
                                      "load_inline candidates (once per flag set; later cold builds take ~7 s "
                                      "instead of ~33 s)")
    prebuild_baselines: bool = _sandbox("prebuild_baselines", "compile the torch.compile baselines once per task, "
                                        "shape and torch version, beside the job, in a process without candidate "
                                        "code (later verdicts compile from that cache in seconds)")
    headers_from: str = _sandbox("headers_from", "another build cache whose prebuilt torch headers are linked into "
                                 "this one before each job (same filesystem), so that a new cache starts with them "
                                 "(empty: none)")
    ray_address: str | None = _s(None, "Ray cluster address, or 'auto'")
    stage_budget: str = _s("", "each stage's share of timeout_s, e.g. 'build=0.6,correctness=0.2,timing=0.1,"
                           "profile=0.1' (groups left out keep their defaults: build 0.80, correctness 0.10, "
                           "timing 0.05, profile 0.05; the shares add up to at most 1)",
                           check=lambda text: _stage_budget_problem(text))


def _stage_budget_problem(text: str) -> str | None:
    from agentforge.evaluator.judge.stage_budget import parse_shares

    try:
        parse_shares(text)
    except ValueError as exc:
        return str(exc)
    return None


@dataclass
class AgentSettings:
    max_rounds: int = _s(10, "maximum coder/judge rounds", ge=1)
    max_cost_usd: float = _s(5.0, "stop when the run's LLM cost reaches this", ge=0)
    max_minutes: float = _s(60.0, "stop after this many minutes of wall time", gt=0)
    plateau_rounds: int = _s(4, "stop after this many rounds without improvement", ge=1)
    sol_stop: float = _s(0.95, "stop when the best kernel reaches this fraction of speed of light", gt=0)
    max_failed_repairs: int = _s(3, "revert to the best correct kernel after this many failed repairs", ge=0)
    slower_revert_ratio: float = _s(1.5, "a candidate this much slower than the best is not kept as base", gt=0)
    target: str = _s("compile", "what the run aims at: compile (beat torch.compile), eager (beat eager PyTorch), "
                     "or sol:F (reach F of speed of light, then stop); the judge is steered by the gap to it, "
                     "and a plateau does not stop a kernel short of it while its roofline gap is large",
                     pattern=r"compile|eager|sol:(0?\.\d*[1-9]\d*|1(\.0*)?)", pattern_help="compile, eager, or sol:F "
                     "with 0 < F <= 1 (e.g. sol:0.8)")


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
        """Every value within its bounds; the message names the setting and how to set it."""
        for dotted, value, f in _walk(self):
            problem = _problem(f, value)
            if problem:
                raise SettingsError(f"{dotted} {problem}; {_how_to_set(dotted, None)}")
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
    named = file or env.get("AGENTFORGE_CONFIG")
    path = Path(named) if named else Path(DEFAULT_FILE)
    if path.is_file():
        _apply(settings, _flatten(_read_toml(path)), source=str(path))
    elif named:
        how = "--config" if file else "AGENTFORGE_CONFIG"
        raise SettingsError(f"settings file {named} (from {how}) does not exist; fix {how} or create the file")
    _apply(settings, _from_env(env), source="environment")
    _apply(settings, {k: v for k, v in (flags or {}).items() if v is not None}, source="flag")
    _fill_api_key(settings, env)
    return settings.validate()


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise SettingsError(f"settings file {path} is not valid TOML ({exc}); fix it, or point --config "
                            "or AGENTFORGE_CONFIG at another file") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise SettingsError(f"settings file {path} cannot be read ({exc})") from exc


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
                raise SettingsError(f"unknown setting {dotted!r} from {_source_text(source)}; "
                                    f"sections are {', '.join(SECTIONS)}")
            obj = getattr(obj, section)
        hints = typing.get_type_hints(type(obj))
        if name not in hints or name in SECTIONS:
            raise SettingsError(f"unknown setting {dotted!r} from {_source_text(source)}; known: {_known(obj)}")
        value = _coerce(hints[name], raw, dotted, source)
        problem = _problem(next(f for f in dataclasses.fields(obj) if f.name == name), value)
        if problem:
            raise SettingsError(f"{dotted} from {_source_text(source)} {problem}; {_how_to_set(dotted, source)}")
        setattr(obj, name, value)


def _known(obj: Any) -> str:
    return ", ".join(f.name for f in dataclasses.fields(obj) if f.name not in SECTIONS)


def _walk(settings: Settings) -> list[tuple[str, Any, dataclasses.Field[Any]]]:
    """(dotted name, value, field) of every setting."""
    found = []
    for f in dataclasses.fields(settings):
        if f.name in SECTIONS:
            section = getattr(settings, f.name)
            found += [(f"{f.name}.{g.name}", getattr(section, g.name), g) for g in dataclasses.fields(section)]
        else:
            found.append((f.name, getattr(settings, f.name), f))
    return found


def _problem(f: dataclasses.Field[Any], value: Any) -> str | None:
    """What is wrong with `value` for setting `f`, or None."""
    meta = f.metadata
    if value is None:
        return None
    if "choices" in meta and value not in meta["choices"]:
        return f"is {value!r}; choose one of: {', '.join(meta['choices'])}"
    if "pattern" in meta and not (isinstance(value, str) and re.fullmatch(meta["pattern"], value)):
        return f"is {value!r}; use {meta['pattern_help']}"
    if "check" in meta and (problem := meta["check"](value)):
        return f"is {value!r}; {problem}"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return f"is {value!r}; it must be a finite number"
    for key, ok, words in (("gt", lambda v, b: v > b, "greater than"), ("ge", lambda v, b: v >= b, "at least"),
                           ("le", lambda v, b: v <= b, "at most")):
        if key in meta and not ok(value, meta[key]):
            return f"is {value!r}; it must be {words} {meta[key]:g}"
    return None


def _source_text(source: str) -> str:
    return {"environment": "the environment", "flag": "the command line"}.get(source, source)


def _how_to_set(dotted: str, source: str | None) -> str:
    """Where to fix a setting, for the source that gave the bad value (None: any source)."""
    var = "AGENTFORGE_" + dotted.replace(".", "_").upper()
    *section, name = dotted.split(".")
    in_file = f"{name} under [{section[0]}]" if section else name
    if source == "environment":
        return f"set {var} to a valid value or unset it"
    if source == "flag":
        return f"give --{name.replace('_', '-')} a valid value"
    if source is not None:
        return f"fix {in_file} in {source}"
    return f"set {var}, or {in_file} in {DEFAULT_FILE}"


_TYPE_WORDS = {int: "a whole number", float: "a number", str: "a string", bool: "true or false"}


def _coerce(hint: Any, raw: Any, dotted: str, source: str) -> Any:
    """`raw` as the setting's type: strings (environment, flags) are parsed; TOML values must
    already have the right type (an int is accepted where a float is wanted)."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    target = args[0] if args else hint
    if raw is None:
        return None
    wrong = SettingsError(f"{dotted} from {_source_text(source)} is {raw!r}, not {_TYPE_WORDS.get(target, target)}; "
                          f"{_how_to_set(dotted, source)}")
    if not isinstance(raw, str):
        if target is float and isinstance(raw, int | float) and not isinstance(raw, bool):
            return float(raw)
        if isinstance(raw, target) and (target is bool or not isinstance(raw, bool)):
            return raw
        raise wrong
    try:
        if target is bool:
            if raw.lower() in ("1", "true", "yes", "on"):
                return True
            if raw.lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError(raw)
        return target(raw.strip()) if target in (int, float) else raw
    except ValueError as exc:
        raise wrong from exc
