"""torch.compile baselines compiled once, by a process that never sees candidate code.

Compiling the reference with Inductor is most of a small task's verdict when done from nothing:
about 20-30 s on two cores (Dynamo, AOT, C++ codegen and g++), where a warm compile takes 2-4 s.
Each sandboxed job has a private, fresh `/tmp`, so before this every verdict compiled its baselines
cold. Now the parent starts a builder (`start`) beside the job, which compiles the reference for the
job's timing shape into the build cache's trusted tree (`trusted/inductor/<key>`, keyed by the
task's source, the shape, the modes, the device, the thread count, torch's version and the numeric
switches). The sandbox uid may read that tree and not write it, and the builder never loads
candidate code: a candidate cannot change a baseline.

The judge (`judge_cache_dir`) copies a ready entry into a private folder and points Inductor at
it, so its own compile is answered by Inductor's FX graph cache. When the builder is still at work,
the judge waits for it (compiling the same graph twice at once on two cores helps neither); when
there is no entry, the judge compiles cold as before, and the verdict says which it was.

    python -m agentforge.evaluator.judge.baseline_cache --cache DIR --spec '{...}'
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from agentforge.evaluator import build_cache

FORMAT = "1"  # bump when what an entry holds, or how it is keyed, changes
KIND = "inductor"
LOG_NAME = "baseline-builds.log"
WARMUP_SEED = 1234  # the builder's weights and inputs: their values do not enter the compiled graph
# The builder runs outside the sandbox's watchdog: on the CPU it refuses a shape whose inputs and
# weights exceed this many elements (4 GiB of fp32, before copies) and runs under an address-space
# limit of MEMORY_LIMIT_BYTES; the judge then compiles for itself, under the sandbox's limits.
CPU_MAX_ELEMENTS = 2**30
MEMORY_LIMIT_BYTES = 16 * 2**30
# A builder that runs longer than this (a task whose reference hangs or sleeps) gives up and marks
# its key failed, so that later jobs compile for themselves inside their sandbox's limits.
BUILD_TIMEOUT_S = 600


@dataclass(frozen=True)
class BaselineSpec:
    """Everything a compiled baseline depends on that the judge and the builder both know."""

    task_name: str
    task_source: str
    shape: str
    modes: tuple[str, ...]
    device: str  # "cpu" or "cuda"
    cpu_threads: int  # Inductor's CPU code is generated for the thread count it will run on

    def key(self) -> str:
        digest = hashlib.sha256(FORMAT.encode())
        for part in (_torch_version(), self.task_source, self.shape, ",".join(self.modes), self.device,
                     str(self.cpu_threads)):
            digest.update(part.encode())
            digest.update(b"\0")
        return digest.hexdigest()[:24]

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> BaselineSpec:
        raw = json.loads(text)
        return cls(**{**raw, "modes": tuple(raw["modes"])})


def _torch_version() -> str:
    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return "unknown"


def _tree(cache_dir: str | os.PathLike[str]) -> Path:
    return Path(cache_dir) / build_cache.TRUSTED_TREE / KIND


def entry(cache_dir: str | os.PathLike[str], spec: BaselineSpec) -> build_cache.CacheEntry:
    return build_cache.CacheEntry(_tree(cache_dir) / spec.key())


def _lock_path(cache_dir: str | os.PathLike[str], spec: BaselineSpec) -> Path:
    return _tree(cache_dir) / f".{spec.key()}.lock"


def _failed_marker(cache_dir: str | os.PathLike[str], spec: BaselineSpec) -> Path:
    return _tree(cache_dir) / f".failed-{spec.key()}"


# ----- the parent's side -----------------------------------------------------------------------
def spec_for_job(job: Any, has_gpu: bool) -> BaselineSpec | None:
    """The baseline the judge of `job` (an EvalJob) will compile, as the judge will key it; None
    when it compiles none (no timing, no compile baseline, a job without a GPU that only builds or
    emulates). Mirrors the pipeline's choice of timing shape and of modes (no max-autotune on the
    CPU, where it tunes GEMM templates for minutes)."""
    device = "cuda" if job.device.startswith("cuda") or (job.device == "auto" and has_gpu) else "cpu"
    if not job.measure.timing or "compile" not in job.measure.baselines or job.compile_only:
        return None
    if job.backend in ("cuda", "triton") and device != "cuda":
        return None
    if job.track == "kernelbench":
        shape = "default"
    elif job.shapes:
        shape = job.timing_shape if job.timing_shape in job.shapes else job.shapes[0]
    else:
        shape = job.timing_shape  # the judge times it when the task declares it (else "default")
    modes = tuple(m for m in job.measure.compile_modes if device != "cpu" or m != "max-autotune")
    if not modes:
        return None
    threads = job.cpu_threads if job.cpu_threads > 0 else (os.cpu_count() or 1)
    return BaselineSpec(job.task_name, job.task_source, shape, modes, device, threads if device == "cpu" else 0)


def start(cache_dir: str, spec: BaselineSpec, python: str = sys.executable) -> bool:
    """Start a detached builder for `spec` unless its entry is ready, failed before, or being built;
    whether one was started. Called by the parent, which never runs candidate code."""
    if entry(cache_dir, spec).ready or _failed_marker(cache_dir, spec).exists():
        return False
    tree = _tree(cache_dir)
    tree.mkdir(parents=True, exist_ok=True)
    for folder in (tree.parent, tree):
        folder.chmod(0o755)
    if _locked_by_builder(_lock_path(cache_dir, spec)):
        return False
    with open(tree / LOG_NAME, "ab") as log:
        subprocess.Popen([python, "-m", "agentforge.evaluator.judge.baseline_cache", "--cache", cache_dir,
                          "--spec", spec.to_json()],
                         stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
    return True


def _limit_memory() -> None:
    """Set by the builder on itself, first thing: a `preexec_fn` would run Python between fork and
    exec in a parent that has threads (a leaderboard's pool, pytest-xdist's), where it can deadlock."""
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT_BYTES, MEMORY_LIMIT_BYTES))


def _locked_by_builder(lock: Path) -> bool:
    """Whether a builder holds `lock` now (a shared lock taken on a read-only descriptor is enough
    to tell, so the sandboxed judge can ask too)."""
    try:
        handle = open(lock)  # noqa: SIM115 - held only for the test below
    except OSError:
        return False
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(handle, fcntl.LOCK_UN)
        return False


# ----- the builder -----------------------------------------------------------------------------
def configure_inductor() -> None:
    """The Inductor settings both sides compile under: they enter Inductor's own cache key, so the
    builder and the judge must agree. One compile thread (a pool of compile workers would outlive
    the compile inside the judge and count as background work); no precompiled header (a 150 MB
    file per flag set, and preprocessing the header again at every cache hit)."""
    import torch._inductor.config as inductor_config

    inductor_config.compile_threads = 1
    inductor_config.cpp_cache_precompile_headers = False


def build(cache_dir: str, spec: BaselineSpec) -> str:
    """Compile the reference for `spec` into the trusted tree (unless another builder holds its
    lock); a line for the log."""
    tree = _tree(cache_dir)
    tree.mkdir(parents=True, exist_ok=True)
    target = entry(cache_dir, spec)
    with open(_lock_path(cache_dir, spec), "w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return f"{spec.task_name}/{spec.shape}: another builder has it"
        if target.ready:
            return f"{spec.task_name}/{spec.shape}: ready"
        staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=tree))
        started = time.monotonic()
        try:
            _compile_into(staging, spec)
        except Exception as exc:  # the judge compiles for itself, as without a cache
            shutil.rmtree(staging, ignore_errors=True)
            _failed_marker(cache_dir, spec).write_text(f"{type(exc).__name__}: {str(exc)[:2000]}\n")
            return f"{spec.task_name}/{spec.shape}: failed: {type(exc).__name__}: {str(exc)[:300]}"
        for path in [staging, *staging.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)
        build_cache.publish(staging, target)
        return f"{spec.task_name}/{spec.shape}: built in {time.monotonic() - started:.1f} s"


@contextlib.contextmanager
def _inductor_cache_at(folder: Path) -> Iterator[None]:
    """Inductor's cache in `folder` for the time being; the caller's setting back afterwards (a
    leftover would send a later build, or a process started later, to a folder since removed)."""
    previous = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(folder)
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)
        else:
            os.environ["TORCHINDUCTOR_CACHE_DIR"] = previous


def _compile_into(folder: Path, spec: BaselineSpec) -> None:
    with _inductor_cache_at(folder):
        _compile_reference(spec)


def _compile_reference(spec: BaselineSpec) -> None:
    import copy

    import torch
    from agentforge.evaluator.models import set_mode
    from agentforge.evaluator.numerics import numeric_switches

    from agentforge.task import Task

    configure_inductor()
    if spec.device == "cpu" and spec.cpu_threads > 0:
        torch.set_num_threads(spec.cpu_threads)
    device = torch.device(spec.device)
    task = Task(spec.task_name, spec.task_source)
    numel = task.input_numel(spec.shape)
    if spec.device == "cpu" and (numel is None or numel > CPU_MAX_ELEMENTS):
        raise ValueError(f"shape {spec.shape!r} has {numel} input and weight elements: not compiled outside "
                         f"the sandbox (at most {CPU_MAX_ELEMENTS} on the CPU)")
    with numeric_switches(True), torch.no_grad():
        reference = set_mode(task.make_model(WARMUP_SEED, spec.shape, device))
        inputs = task.make_inputs(WARMUP_SEED, spec.shape, device)
        for mode in spec.modes:
            compiled = torch.compile(copy.deepcopy(reference), mode=None if mode == "default" else mode)
            compiled(*inputs)
            torch._dynamo.reset()


# ----- the judge's side ------------------------------------------------------------------------
@dataclass
class JudgeCache:
    """Where the judge's compile reads from, and how it came to be there (for the verdict)."""

    folder: Path
    source: str  # "judge-cache" | "cold"
    note: str
    waited_s: float = 0.0


@contextlib.contextmanager
def judge_cache_dir(cache_dir: str | os.PathLike[str], spec: BaselineSpec, wait_s: float,
                    private_root: str | None = None) -> Iterator[JudgeCache]:
    """A private Inductor cache folder for the judge's compiles, filled from the trusted entry when
    there is one (waiting up to `wait_s` for a builder at work), removed afterwards: what the judge
    loaded stays mapped, and no later reader finds files a candidate could have touched."""
    waited = _wait_for(cache_dir, spec, wait_s)
    source_entry = entry(cache_dir, spec)
    folder = Path(tempfile.mkdtemp(prefix="inductor-judge-", dir=private_root))
    try:
        if source_entry.ready:
            shutil.copytree(source_entry.folder, folder, dirs_exist_ok=True)
            info = JudgeCache(folder, "judge-cache", f"torch.compile baseline from the judge's cache "
                              f"(compiled once for this task and shape by a process without candidate code"
                              f"{f'; waited {waited:.1f} s for it' if waited >= 0.1 else ''})", waited)
        else:
            failed = _failed_marker(cache_dir, spec)
            why = (f"its builder failed: {failed.read_text().strip()[:200]}" if failed.exists()
                   else f"not built yet{f' after waiting {waited:.0f} s' if waited >= 0.1 else ''}")
            info = JudgeCache(folder, "cold", f"torch.compile baseline compiled cold here (the judge's cache: "
                              f"{why})", waited)
        with _inductor_cache_at(folder):
            yield info
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _wait_for(cache_dir: str | os.PathLike[str], spec: BaselineSpec, wait_s: float) -> float:
    started = time.monotonic()
    lock = _lock_path(cache_dir, spec)
    ready = entry(cache_dir, spec)
    while not ready.ready and time.monotonic() - started < wait_s:
        # No builder at work: one may be just starting (the parent starts it beside the job), so it
        # gets a moment to take its lock before the judge compiles cold.
        idle = not _locked_by_builder(lock)
        if idle and (time.monotonic() - started > 3.0 or _failed_marker(cache_dir, spec).exists()):
            break
        time.sleep(0.1)
    return time.monotonic() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", required=True)
    parser.add_argument("--spec", required=True)
    args = parser.parse_args(argv)
    spec = BaselineSpec.from_json(args.spec)
    if spec.device == "cpu":
        _limit_memory()
    build_cache.set_cache_root(args.cache)
    signal.signal(signal.SIGALRM, _out_of_time)
    signal.alarm(BUILD_TIMEOUT_S)
    print(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {build(args.cache, spec)}", flush=True)
    return 0


def _out_of_time(signum: int, frame: Any) -> None:
    raise TimeoutError(f"the baseline builder ran past {BUILD_TIMEOUT_S} s")


def describe(info: JudgeCache | None) -> dict[str, Any]:
    return {} if info is None else {"source": info.source, "waited_s": round(info.waited_s, 3)}


if __name__ == "__main__":
    sys.exit(main())
