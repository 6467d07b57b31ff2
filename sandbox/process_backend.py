"""The default backend: each job in a fresh, limited, isolated child process on this machine.

Per job: a fresh directory (`job-*/` holding the parent's stdout/stderr logs, and `work/`, the only
place the child may write), an isolation plan (`isolation.py`), two private pipes (request in,
result out) passed by fd, a new session (its own process group), and a wait loop that reads the
result channel, watches the wall clock and the tree's resident memory, then kills whatever is left
of the tree. The result is parsed strictly; anything else becomes a timeout or crash verdict.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import select
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import BinaryIO

from agentforge.evaluator import build_cache, header_prebuild
from agentforge.evaluator.build_cache import TRUSTED_TREE
from agentforge.evaluator.cuda_emulation import judge as emulation
from agentforge.evaluator.judge import baseline_cache, stage_budget
from agentforge.evaluator.result import EvalJob, EvalResult
from agentforge.sandbox import channel, isolation, reaper, spares, verdict
from agentforge.sandbox.config import DEFAULT_ENTRY, SandboxConfig
from agentforge.sandbox.request import ChildRequest, Limits
from agentforge.sandbox.watchdog import Breach, ProcessTree

from agentforge.candidate import code_hash

STDERR_TAIL_CHARS = 4000
WATCHDOG_PERIOD_S = 0.25
DRAIN_S = 0.5  # after the child exits, how long to wait for the rest of a frame in flight

# Variables the child inherits when set (compilers and GPUs need them); nothing else leaks through.
PASSTHROUGH_ENV = ("PATH", "LANG", "LC_ALL", "CUDA_HOME", "CUDA_PATH", "LD_LIBRARY_PATH", "CC", "CXX",
                   "CUDA_VISIBLE_DEVICES", "TORCH_CUDA_ARCH_LIST", "MAX_JOBS", "OMP_NUM_THREADS",
                   "NVIDIA_VISIBLE_DEVICES", "TRITON_INTERPRET")


def child_env(config: SandboxConfig, workdir: str, cache_dir: str) -> dict[str, str]:
    """The minimal, sanitised environment of the child (no keys, no tokens, no proxies)."""
    env = {name: os.environ[name] for name in PASSTHROUGH_ENV if name in os.environ}
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env.setdefault("LANG", "C.UTF-8")
    env.update(HOME=workdir, TMPDIR=str(Path(workdir) / "tmp"), PYTHONDONTWRITEBYTECODE="1",
               PYTHONNOUSERSITE="1", PYTHONUNBUFFERED="1",
               TORCH_EXTENSIONS_DIR=str(Path(cache_dir) / "torch_extensions"),
               TRITON_CACHE_DIR=str(Path(cache_dir) / "triton"))
    if config.python_paths:
        env["PYTHONPATH"] = os.pathsep.join(config.python_paths)
    return env


def limits_for(config: SandboxConfig, job: EvalJob) -> Limits:
    on_cuda = job.device.startswith("cuda")
    return Limits(
        address_space_bytes=None if on_cuda else int(config.memory_gb * 2**30),
        cpu_seconds=int(config.cpu_seconds),
        file_size_bytes=int(config.file_size_mb * 2**20),
        max_processes=int(config.max_processes),
    )


def prepare_cache(cache_dir: str, uid: int | None) -> None:
    """The cache must exist and be writable by the sandbox uid (chown'd to it when we are root)."""
    path = Path(cache_dir)
    path.mkdir(parents=True, exist_ok=True)
    if uid is not None and path.stat().st_uid != uid:
        for root, dirs, files in os.walk(path):
            if root == str(path):  # the parent's and the judge's own: read-only to the sandbox
                dirs[:] = [d for d in dirs if d not in (TRUSTED_TREE, build_cache.JUDGE_STORE)]
            for name in [*dirs, *files]:
                os.lchown(os.path.join(root, name), uid, uid)
        os.chown(path, uid, uid)


def _tail(handle: BinaryIO) -> str:
    handle.flush()
    size = os.fstat(handle.fileno()).st_size
    with open(handle.fileno(), "rb", closefd=False) as reader:
        reader.seek(max(0, size - STDERR_TAIL_CHARS))
        return reader.read().decode("utf-8", "replace")


@dataclasses.dataclass
class _Outcome:
    """What the wait loop saw."""

    data: bytes = b""
    timed_out: bool = False
    breach: Breach | None = None  # the limit the watchdog killed the tree for
    overflow: bool = False


class ProcessBackend:
    """`run(job)` in a local child process; `run_many` spreads jobs over a thread pool."""

    name = "process"

    def __init__(self, config: SandboxConfig | None = None) -> None:
        self.config = config or SandboxConfig()
        isolation.resolve_mode(self.config.isolation)  # an explicit mode that cannot run fails here
        reaper.remove_dead_job_dirs(self.config.workdir_root)  # left by runs killed before they cleaned up

    def run(self, job: EvalJob) -> EvalResult:
        started, clock = verdict.now(), time.monotonic()
        warm = self._warm(job)
        spare = spares.take(self._spare_key()) if warm else None
        if spare is not None:
            job_dir, claim = spare.job_dir, spare.claim
        else:
            root = Path(self.config.workdir_root)
            try:
                root.mkdir(parents=True, exist_ok=True)
                job_dir, claim = reaper.make_job_dir(root)
            except OSError as exc:
                info = verdict.RunInfo("process", started, time.monotonic() - clock)
                return verdict.sandbox_error(job, f"cannot create a workdir under {root}: {exc}", info)
        try:
            return self._run_in(job, job_dir, started, clock, spare)
        except OSError as exc:  # preparing the workdir or cache failed: a value, not an exception
            info = verdict.RunInfo("process", started, time.monotonic() - clock)
            return verdict.sandbox_error(job, f"could not prepare the sandbox: {exc}", info)
        finally:
            if self.config.keep_workdir:
                reaper.mark_kept(job_dir)  # a kept workdir is not a dead job's
            else:
                reaper.remove_job_dir(job_dir)
            claim.release()
            if warm:
                self.start_spare(warm_compile=compiles_baseline(job))

    def _warm(self, job: EvalJob) -> bool:
        """Whether `job` may run in a spare child started before it (`warm_eligible`)."""
        return self.config.warm_spares > 0 and warm_eligible(job.device, job.backend, job.compile_only)

    def prestart(self, device: str, backend: str, compiles: bool = False) -> None:
        """A spare for a job on `device` with `backend`, started now when it may run in one (see
        `sandbox.prestart`); `compiles`: the job times a torch.compile baseline."""
        if self.config.warm_spares > 0 and warm_eligible(device, backend, compile_only=False):
            self.start_spare(warm_compile=compiles)

    def _spare_key(self) -> str:
        """What a spare's process depends on: a spare started under another config is not used."""
        cfg = self.config
        return repr((cfg.isolation, cfg.workdir_root, cfg.cache_dir, cfg.python, cfg.python_paths, cfg.sandbox_uid,
                     cfg.entry, cfg.disk_gb, cfg.torch_switches))

    def start_spare(self, warm_compile: bool = False) -> None:
        """Start a child for the next CPU job now, up to `warm_spares` of them, in the background:
        it starts Python and imports torch (most of a job's start, about 1-4 s on two cores) while
        nothing waits for it, then blocks reading its request. Its job folder, isolation and process
        are its own, as for a child started at the job; only the request, with the job and its
        limits, comes later. `warm_compile`: the last job timed a torch.compile baseline, so the next
        likely will, and the spare imports Inductor too while it waits (1.6 s of CPU that a run of
        eager-only jobs, an RL step or a lean suite, would pay beside its jobs for nothing)."""
        spares.start(self._spare_key(), self.config.warm_spares,
                     functools.partial(self._make_spare, warm_compile))

    def _make_spare(self, warm_compile: bool = False) -> spares.Spare | None:
        root = Path(self.config.workdir_root)
        try:
            root.mkdir(parents=True, exist_ok=True)
            job_dir, claim = reaper.make_job_dir(root)
        except OSError:
            return None  # a spare is only an optimisation
        try:
            workdir, plan, python = self._prepare(job_dir)
            out, err = _log_files(job_dir)
            proc, req_w, res_r = self._spawn(plan, python, str(workdir), out, err, interpret=False,
                                             warm_compile=warm_compile)
        except OSError:
            reaper.remove_job_dir(job_dir)
            claim.release()
            return None
        return spares.Spare(proc, req_w, res_r, job_dir, claim, workdir, plan, python, out, err)

    def run_many(self, jobs: Sequence[EvalJob], workers: int = 1,
                 on_result: Callable[[int, EvalResult], None] | None = None) -> list[EvalResult]:
        from agentforge.sandbox.pool import run_pool

        return run_pool(self.run, jobs, self.config, workers, on_result)

    def _prepare(self, job_dir: Path) -> tuple[Path, isolation.IsolationPlan, str]:
        """The job folder's work directory, the isolation plan, and the child's interpreter."""
        cfg = self.config
        workdir = job_dir / "work"
        (workdir / "tmp").mkdir(parents=True)
        cache_path = Path(cfg.cache_dir).expanduser().resolve()
        # made before the plan checks who can reach it: a new account has no ~/.cache yet
        cache_path.mkdir(parents=True, exist_ok=True)
        cache = str(cache_path)
        python = cfg.python or sys.executable
        plan = isolation.plan(cfg.isolation, str(workdir), cache,
                              isolation.child_paths(python, cfg.python_paths), cfg.sandbox_uid,
                              fallback_cache=str(Path(cfg.workdir_root) / f"cache-{cfg.sandbox_uid}"), python=python,
                              tmpfs_bytes=int(cfg.disk_gb * 2**30))
        if plan.drop_to_uid is not None:
            for path in (workdir, workdir / "tmp"):
                os.chown(path, plan.drop_to_uid, plan.drop_to_uid)
            job_dir.chmod(0o711)
        prepare_cache(plan.cache_dir, plan.drop_to_uid)
        build_cache.prepare_store(plan.cache_dir, None if plan.drop_to_uid is None
                                  else isolation.judge_uid(plan.drop_to_uid))
        return workdir, plan, python

    def _run_in(self, job: EvalJob, job_dir: Path, started: str, clock: float,
                spare: spares.Spare | None = None) -> EvalResult:
        cfg = self.config
        if spare is not None:
            workdir, plan, python = spare.workdir, spare.plan, spare.python
        else:
            workdir, plan, python = self._prepare(job_dir)
        if cfg.headers_from:
            header_prebuild.link_prebuilt(cfg.headers_from, plan.cache_dir)
        if cfg.prebuild_headers and "load_inline" in job.candidate_source:
            header_prebuild.start(plan.cache_dir, job.candidate_source, python, emulated=emulation.applies(job))
        baseline = baseline_cache.spec_for_job(job, _has_cuda()) if cfg.prebuild_baselines else None
        if baseline is not None:  # compiled beside the job by a process that never sees the candidate
            baseline_cache.start(plan.cache_dir, baseline, python)
        # each stage's share of the wall clock
        budget = stage_budget.for_sandbox(job.budget, cfg.timeout_s, shares=cfg.stage_shares)
        request = ChildRequest(entry=cfg.entry, job=dataclasses.replace(job, cache_dir=plan.cache_dir, budget=budget),
                               workdir=str(workdir), limits=limits_for(cfg, job),
                               drop_to_uid=plan.drop_to_uid, mounts=plan.mounts,
                               torch_switches=cfg.torch_switches)

        def info() -> verdict.RunInfo:
            return verdict.RunInfo(plan.description, started, time.monotonic() - clock, plan.mode)

        if spare is not None:
            out, err, (proc, req_w, res_r) = spare.out, spare.err, (spare.proc, spare.req_w, spare.res_r)
        else:
            out, err = _log_files(job_dir)
        with out, err:
            try:
                if spare is None:
                    interpret = _interprets(job.device, job.backend, job.compile_only)
                    proc, req_w, res_r = self._spawn(plan, python, str(workdir), out, err, interpret)
            except OSError as exc:
                return verdict.sandbox_error(job, f"could not start the child: {exc}", info())
            outcome, returncode, nonce = self._send_and_wait(proc, req_w, res_r, request)
            return self._verdict(job, outcome, returncode, nonce, plan, _tail(err), info())

    def _spawn(self, plan: isolation.IsolationPlan, python: str, workdir: str, out: BinaryIO, err: BinaryIO,
               interpret: bool, warm_compile: bool = False) -> tuple[subprocess.Popen[bytes], int, int]:
        """Start the child (it imports, forks its worker, then waits for its request); the child's
        process, the request pipe's write end and the result pipe's read end."""
        cfg = self.config
        req_r, req_w = os.pipe()
        res_r, res_w = os.pipe()
        argv = [*plan.prefix, python, "-P", "-m", "agentforge.sandbox.child",
                "--request-fd", str(req_r), "--result-fd", str(res_w),
                *(["--worker"] if cfg.entry == DEFAULT_ENTRY else []),
                *(["--interpret"] if interpret else []),
                *(["--preload"] if cfg.torch_switches and not interpret else []),
                *(["--warm-compile"] if warm_compile and cfg.torch_switches and not interpret else [])]
        try:
            proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err, pass_fds=(req_r, res_w),
                start_new_session=True, cwd=workdir, env=child_env(cfg, workdir, plan.cache_dir),
            )
        except OSError:
            for fd in (req_r, req_w, res_r, res_w):
                os.close(fd)
            raise
        os.close(req_r)
        os.close(res_w)
        return proc, req_w, res_r

    def _send_and_wait(self, proc: subprocess.Popen[bytes], req_w: int, res_r: int,
                       request: ChildRequest) -> tuple[_Outcome, int, bytes]:
        cfg = self.config
        nonce = channel.new_nonce()
        frame = channel.encode_frame(request.to_json().encode(), nonce)
        threading.Thread(target=_write_and_close, args=(req_w, frame), daemon=True).start()
        tree = ProcessTree(proc.pid, memory_limit=int(cfg.memory_gb * 2**30), process_limit=cfg.max_processes,
                           disk_limit=int(cfg.disk_gb * 2**30), watch_dirs=(request.workdir,))
        try:
            outcome = _wait(proc, res_r, tree, cfg)
        finally:
            tree.kill(proc.pid, cfg.kill_grace_s, reap=proc.poll)
            proc.wait()
            os.close(res_r)
        return outcome, proc.returncode, nonce

    def _verdict(self, job: EvalJob, outcome: _Outcome, returncode: int, nonce: bytes,
                 plan: isolation.IsolationPlan, stderr_tail: str, info: verdict.RunInfo) -> EvalResult:
        parsed, problem = _parse(outcome, nonce, job)
        if parsed is not None:
            return verdict.stamp(parsed, plan.description, plan.mode, info.duration_s)
        if outcome.timed_out:
            return verdict.timeout(job, self.config.timeout_s, stderr_tail, info)
        if outcome.breach is not None:
            return verdict.over_limit(job, outcome.breach, stderr_tail, info)
        return verdict.crashed(job, returncode, plan.mode == "bwrap", problem, stderr_tail, info,
                               garbled=bool(outcome.data))


def _log_files(job_dir: Path) -> tuple[BinaryIO, BinaryIO]:
    """The child's stdout and stderr files (evidence only; closed once the job is judged)."""
    return open(job_dir / "stdout.txt", "w+b"), open(job_dir / "stderr.txt", "w+b")


def compiles_baseline(job: EvalJob) -> bool:
    """Whether `job` times a torch.compile baseline (and so imports Inductor in its judge)."""
    return job.measure.timing and "compile" in job.measure.baselines and not job.compile_only


def warm_eligible(device: str, backend: str, compile_only: bool) -> bool:
    """Whether a job may run in a spare child started before it: CPU jobs only (a spare has
    imported torch, and nothing may initialise CUDA before its job says which device), and not
    Triton-interpreter jobs (the child must know before torch imports triton)."""
    on_cpu = device == "cpu" or (device == "auto" and not _has_cuda())
    return on_cpu and not _interprets(device, backend, compile_only)


def _interprets(device: str, backend: str, compile_only: bool) -> bool:
    """Whether the job's Triton kernels run in Triton's interpreter (the child must know before it
    imports torch, which imports triton)."""
    return backend == "triton" and not compile_only and not device.startswith("cuda") and (
        device != "auto" or not _has_cuda())


def _has_cuda() -> bool:
    import shutil as _shutil

    return _shutil.which("nvidia-smi") is not None


def _write_and_close(fd: int, data: bytes) -> None:
    try:
        channel.write_all(fd, data)
    except OSError:
        pass  # the child died before reading its request; the wait loop reports how
    finally:
        os.close(fd)


def _parse(outcome: _Outcome, nonce: bytes, job: EvalJob) -> tuple[EvalResult | None, str]:
    """The child's EvalResult, or None and why not."""
    if outcome.overflow:
        return None, "result channel overflowed"
    if not outcome.data:
        return None, "no result on the private channel"
    try:
        result = EvalResult.from_json(channel.decode_frame(outcome.data, nonce).decode())
    except (ValueError, TypeError, KeyError, UnicodeDecodeError) as exc:
        return None, f"unreadable result on the private channel ({type(exc).__name__}: {exc})"
    if result.task_name != job.task_name or result.candidate_hash != code_hash(job.candidate_source):
        return None, "the result names another task or candidate"
    return result, ""


def _wait(proc: subprocess.Popen[bytes], res_r: int, tree: ProcessTree, cfg: SandboxConfig) -> _Outcome:
    """Read the result channel until the child exits, the budget runs out or memory overflows."""
    outcome = _Outcome()
    chunks: list[bytes] = []
    size, limit = 0, channel.HEADER_BYTES + channel.MAX_FRAME_BYTES
    os.set_blocking(res_r, False)
    try:
        pidfd = os.pidfd_open(proc.pid)
    except OSError:
        pidfd = None
    deadline = time.monotonic() + cfg.timeout_s
    next_check = time.monotonic()
    channel_open = True
    try:
        while True:
            now = time.monotonic()
            if now >= deadline:
                outcome.timed_out = True
                break
            if now >= next_check:
                next_check = now + WATCHDOG_PERIOD_S
                outcome.breach = tree.check()
                if outcome.breach is not None:
                    break
            waits = ([res_r] if channel_open else []) + ([pidfd] if pidfd is not None else [])
            timeout = max(0.0, min(deadline, next_check) - now)
            if pidfd is None:
                timeout = min(timeout, 0.05)
            ready, _, _ = select.select(waits, [], [], timeout)
            if res_r in ready:
                channel_open, got = _read_some(res_r)
                chunks.append(got)
                size += len(got)
                if size > limit:
                    outcome.overflow = True
                    break
            if proc.poll() is not None:
                chunks.append(_drain(res_r) if channel_open else b"")
                break
    finally:
        if pidfd is not None:
            os.close(pidfd)
    outcome.data = b"".join(chunks)
    return outcome


def _read_some(fd: int) -> tuple[bool, bytes]:
    """(still open, bytes read) from a non-blocking fd."""
    try:
        data = os.read(fd, 1 << 20)
    except BlockingIOError:
        return True, b""
    return bool(data), data


def _drain(fd: int) -> bytes:
    """What is left in the pipe after the child exited; stops at EOF, or when nothing more comes
    (a surviving grandchild may hold the write end open)."""
    chunks = []
    deadline = time.monotonic() + DRAIN_S
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            break
        still_open, data = _read_some(fd)
        chunks.append(data)
        if not still_open:
            break
    return b"".join(chunks)
