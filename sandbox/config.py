"""`SandboxConfig`: what limits and isolation one evaluation child runs under.

Built from `SandboxSettings` (the CLI's single source of settings) by `from_settings`, then passed
down explicitly; nothing here reads the environment. Each field is documented once, here, and its
default is defined once, here: `SandboxSettings` takes the defaults of the fields it shares from
`default_of`, so the CLI and a library caller that builds `SandboxConfig()` get the same ones.
"""

from __future__ import annotations

import dataclasses
import math
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentforge.settings import SandboxSettings

KINDS = ("process", "docker", "ray")
ISOLATIONS = ("auto", "bwrap", "unshare", "none")
DEFAULT_ENTRY = "agentforge.evaluator.judge.pipeline:run_pipeline"
NOBODY = 65534


def _default_workdir_root() -> str:
    return str(Path(tempfile.gettempdir()) / "agentforge-sandbox")


def _default_cache_dir() -> str:
    return str(Path("~/.cache/agentforge").expanduser())


@dataclass(frozen=True)
class SandboxConfig:
    """Limits and isolation of one evaluation child.

    `memory_gb` is an address-space limit (RLIMIT_AS) for CPU jobs. CUDA reserves a huge virtual
    address space at context creation (tens of GiB on an 80 GiB card) and fails under any
    realistic RLIMIT_AS, so for jobs on a CUDA device RLIMIT_AS is not set; the parent's RSS
    watchdog (resident memory of the child's whole process tree, polled) enforces `memory_gb`
    instead. The watchdog runs for CPU jobs too, as a second line.
    """

    timeout_s: float = 600.0  # wall clock, from spawn to the result
    memory_gb: float = 16.0  # RLIMIT_AS on CPU jobs; resident-set watchdog on every job
    cpu_seconds: int = 1800  # RLIMIT_CPU: SIGXCPU at the soft limit, SIGKILL one second later
    file_size_mb: int = 512  # RLIMIT_FSIZE: a larger write gets SIGXFSZ / EFBIG
    disk_gb: float = 2.0  # total bytes of the job's workdir, private /tmp and /dev/shm (watchdog)
    max_processes: int = 256  # RLIMIT_NPROC headroom above what the sandbox uid already runs
    isolation: str = "auto"  # auto: bwrap if it works here, else unshare if it works, else none
    workdir_root: str = field(default_factory=_default_workdir_root)  # a fresh workdir per job below
    cache_dir: str = field(default_factory=_default_cache_dir)  # build cache, bound read-write
    kind: str = "process"  # process | docker | ray
    docker_image: str = "agentforge-eval:latest"
    gpus: tuple[str, ...] = ()  # CUDA devices to spread jobs over ("0", "1", ...); empty: jobs' own
    sandbox_uid: int = NOBODY  # when started as root, the child runs as this uid/gid
    entry: str = DEFAULT_ENTRY  # "module:function" the child calls with the EvalJob
    python: str = ""  # interpreter of the child; empty: the parent's own (sys.executable)
    python_paths: tuple[str, ...] = ()  # extra import roots for the child (PYTHONPATH)
    torch_switches: bool = True  # pin TF32 off / fp32 precision in the child (imports torch there)
    # On by default, as for every command that evaluates more than once; a caller that evaluates
    # once (agent.preflight) or must start every child cold says so.
    warm_spares: int = 1  # CPU-job children started ahead of their job (see sandbox/spares.py)
    prebuild_headers: bool = True  # the parent precompiles torch's extension header for load_inline candidates
    prebuild_baselines: bool = True  # the parent compiles torch.compile baselines once per task and shape
    # Another build cache whose trusted precompiled headers are linked into this one before each job
    # (`header_prebuild.link_prebuilt`): a cache that starts empty starts with them. Empty: none.
    headers_from: str = ""
    keep_workdir: bool = False  # leave the workdir (stdout, stderr, build files) after the run
    kill_grace_s: float = 2.0  # SIGTERM to SIGKILL of the process group at the end
    stage_shares: tuple[tuple[str, float], ...] = ()  # replace the jobs' StageBudget shares (stage_budget.py)
    extra: dict[str, Any] = field(default_factory=dict)  # backend-specific options (e.g. ray)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"sandbox kind is {self.kind!r}; choose one of: {', '.join(KINDS)}")
        if self.isolation not in ISOLATIONS:
            raise ValueError(
                f"sandbox isolation is {self.isolation!r}; choose one of: {', '.join(ISOLATIONS)}"
            )
        if ":" not in self.entry:
            raise ValueError(f"sandbox entry must be 'module:function', got {self.entry!r}")
        if self.stage_shares:
            from agentforge.evaluator.judge.stage_budget import check_shares

            check_shares(dict(self.stage_shares))
        for name in ("timeout_s", "memory_gb", "cpu_seconds", "file_size_mb", "max_processes", "disk_gb"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):  # NaN compares false: it would disable the limit
                raise ValueError(f"sandbox {name} must be > 0 and finite (got {value})")

    def replace(self, **changes: Any) -> SandboxConfig:
        return dataclasses.replace(self, **changes)


def default_of(name: str) -> Any:
    """The default of field `name` (for `agentforge.settings.SandboxSettings`)."""
    f = SandboxConfig.__dataclass_fields__[name]
    return f.default_factory() if f.default is dataclasses.MISSING else f.default  # type: ignore[misc]


def from_settings(settings: SandboxSettings, cache_dir: str) -> SandboxConfig:
    """The per-job sandbox config from the CLI's settings (`Settings.sandbox`, `Settings.cache_dir`)."""
    from agentforge.evaluator.judge.stage_budget import parse_shares

    extra: dict[str, Any] = {}
    if settings.ray_address:
        extra["ray_address"] = settings.ray_address
    return SandboxConfig(
        timeout_s=float(settings.timeout_s),
        memory_gb=float(settings.memory_gb),
        cpu_seconds=int(settings.cpu_seconds),
        disk_gb=float(settings.disk_gb),
        isolation=settings.isolation,
        cache_dir=str(Path(cache_dir).expanduser()),
        kind=settings.kind,
        docker_image=settings.docker_image,
        prebuild_headers=bool(settings.prebuild_headers),
        prebuild_baselines=bool(settings.prebuild_baselines),
        headers_from=str(settings.headers_from),
        warm_spares=int(settings.warm_spares),
        stage_shares=tuple(parse_shares(settings.stage_budget).items()),
        extra=extra,
    )
