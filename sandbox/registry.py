"""One registry of sandbox backends: a name, a factory taking a SandboxConfig, one protocol.

`process` and `docker` are built in (their modules load on first use); other backends register
themselves with `register_backend` when their module is imported: `get_backend("ray")` imports
`agentforge.sandbox.ray_backend`, which does so. An unknown name fails and lists the choices.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable

from agentforge.evaluator.result import EvalJob, EvalResult
from agentforge.sandbox.config import KINDS, SandboxConfig


@runtime_checkable
class Backend(Protocol):
    def run(self, job: EvalJob) -> EvalResult: ...

    def run_many(self, jobs: Sequence[EvalJob], workers: int = 1,
                 on_result: Callable[[int, EvalResult], None] | None = None) -> list[EvalResult]: ...


BackendFactory = Callable[[SandboxConfig], Backend]

_FACTORIES: dict[str, BackendFactory] = {}
# Backends whose module registers them on import.
_PLUGIN_MODULES = {"ray": "agentforge.sandbox.ray_backend"}


def _process(config: SandboxConfig) -> Backend:
    from agentforge.sandbox.process_backend import ProcessBackend

    return ProcessBackend(config)


def _docker(config: SandboxConfig) -> Backend:
    from agentforge.sandbox.docker_backend import DockerBackend

    return DockerBackend(config)


_BUILTIN: dict[str, BackendFactory] = {"process": _process, "docker": _docker}


def register_backend(name: str, factory: BackendFactory) -> None:
    """Make `name` available to `get_backend`; registering a name again replaces it."""
    _FACTORIES[name] = factory


def backend_names() -> list[str]:
    return sorted({*_BUILTIN, *_PLUGIN_MODULES, *_FACTORIES})


def get_backend(kind: str, config: SandboxConfig | None = None) -> Backend:
    """The backend called `kind`, built for `config` (default settings when None)."""
    factory = _FACTORIES.get(kind) or _BUILTIN.get(kind)
    if factory is None and kind in _PLUGIN_MODULES:
        try:
            importlib.import_module(_PLUGIN_MODULES[kind])
        except ImportError as exc:
            raise ValueError(f"sandbox backend {kind!r} is unavailable: {exc}") from exc
        factory = _FACTORIES.get(kind)
    if factory is None:
        raise ValueError(f"unknown sandbox backend {kind!r}; choose one of: {', '.join(backend_names())}")
    if config is None:
        config = SandboxConfig(kind=kind) if kind in KINDS else SandboxConfig()
    return factory(config)
