"""The evaluation child: `python -m agentforge.sandbox.child --request-fd R --result-fd W`
(or `--io-dir DIR` in a container).

Reads one framed `ChildRequest` from fd R, hardens itself (mount namespace under `unshare`, uid
drop when started as root, no new privileges, resource limits), pins the process-wide numeric
switches, calls the entry (the real pipeline by default) and writes one framed EvalResult to fd W,
then exits at once so nothing the candidate registered (atexit, threads) runs after the verdict.
Both fds are made non-inheritable before any job code runs. stdout and stderr are files the
parent reads only as evidence; they never carry the result.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import faulthandler
import importlib
import inspect
import os
import select
import shutil
import sys
import threading
import traceback
from collections.abc import Callable
from typing import Any

from agentforge.evaluator.judge import native_evidence, stage_budget
from agentforge.evaluator.numerics import numeric_switches
from agentforge.evaluator.result import ErrorRecord, EvalJob, EvalResult, Stage, Status, to_plain
from agentforge.evaluator.worker import triton_interpret
from agentforge.sandbox import channel, isolation, limits, mounts
from agentforge.sandbox.request import ChildRequest

from agentforge.candidate import code_hash

TRACEBACK_CHARS = 4000


def load_entry(spec: str) -> Callable[[EvalJob], EvalResult]:
    module_name, _, function = spec.partition(":")
    return getattr(importlib.import_module(module_name), function)


def _exception_result(job: EvalJob, exc: BaseException) -> EvalResult:
    tail = "".join(traceback.format_exception(exc))[-TRACEBACK_CHARS:]
    return EvalResult(
        task_name=job.task_name, candidate_hash=code_hash(job.candidate_source), backend=job.backend,
        status=Status.CRASH, stage=Stage.SANDBOX, candidate_meta=dict(job.candidate_meta),
        error=ErrorRecord(type=type(exc).__name__, message=str(exc)[:2000], traceback_tail=tail),
    )


def _memory_verdict(result: EvalResult, request: ChildRequest) -> EvalResult:
    """A MemoryError under our RLIMIT_AS is the memory limit at work: a crash, typed MemoryLimit."""
    error, limit = result.error, request.limits.address_space_bytes
    if result.status == Status.OK or error is None or error.type != "MemoryError" or limit is None:
        return result
    message = f"address-space limit of {limit / 2**30:g} GiB reached (RLIMIT_AS -> MemoryError)"
    error = dataclasses.replace(error, type="MemoryLimit", message=f"{message}: {error.message}"[:2000])
    return dataclasses.replace(result, status=Status.CRASH, error=error)


def evaluate(request: ChildRequest, worker: Any = None) -> EvalResult:
    """Call the entry (with the candidate worker, when it takes one); whatever it raises or
    returns becomes an EvalResult."""
    job = request.job
    try:
        request = _one_visible_gpu(request)  # before anything initialises CUDA
        job = request.job
        triton_interpret.prepare_for(job.backend, job.device, job.compile_only)  # before anything imports triton
        entry = load_entry(request.entry)
        takes_worker = "worker" in inspect.signature(entry).parameters
        with numeric_switches(request.torch_switches):
            result = entry(job, worker=_worker_for(worker, request)) if takes_worker else entry(job)
        if not isinstance(result, EvalResult):
            raise TypeError(f"entry {request.entry} returned {type(result).__name__}, not EvalResult")
        if takes_worker:
            result = _native_evidence(result, worker, job)
            result = _separation(result, worker)
    except BaseException as exc:  # the verdict must be a value, whatever the job did
        result = _exception_result(job, exc)
    return _memory_verdict(result, request)


def _native_evidence(result: EvalResult, worker: Any, job: EvalJob) -> EvalResult:
    """The verdict with what the judge's native sampler of the worker saw (`native_evidence`); a
    sampler that failed leaves the verdict as it was, saying why in its provenance where it can."""
    sampler = getattr(worker, "sampler", None)
    if sampler is None:
        return result
    try:
        return native_evidence.apply(result, sampler.finish(), job.task_source, job.task_name, job.device)
    except Exception as exc:
        report = {"available": False, "why": f"{type(exc).__name__}: {str(exc)[:200]}"}
        if result.provenance is None:
            return result
        settings = {**result.provenance.track_settings, "native_sampling": report}
        return dataclasses.replace(result, provenance=dataclasses.replace(result.provenance, track_settings=settings))


def _separation(result: EvalResult, worker: Any) -> EvalResult:
    """The verdict's provenance says how the judge and the worker were kept apart, and what the
    operating system did not protect."""
    if worker is None or result.provenance is None:
        return result
    report: dict[str, Any] = {"judge_uid": os.getuid(), "judge_capabilities": hex(limits.capabilities()),
                              "judge_tmpdir": "private" if _JUDGE_TMP else "shared", **dict(worker.separation)}
    open_to_worker = []
    if report["worker_uid"] == report["judge_uid"]:
        open_to_worker.append("same uid (not started as root): the judge is not dumpable (no ptrace, no /proc "
                              "memory) and the seccomp guard refuses signals, priority, affinity and ptrace on "
                              "others, but files of that uid (the judge's TMPDIR included) are the worker's too")
    if report.get("seccomp") != "installed" or report.get("guard_seen") is not True:
        open_to_worker.append(f"no seccomp guard ({report.get('seccomp', 'unknown')})")
    if report.get("private_tmp") != "yes":
        open_to_worker.append(f"/tmp and /dev/shm shared with the judge ({report.get('private_tmp', 'unknown')})")
    report["not_protected"] = open_to_worker
    if getattr(worker, "builds", None) is not None:
        report["judge_built"] = worker.builds.report()
    settings = {**result.provenance.track_settings, "separation": report}
    return dataclasses.replace(result, provenance=dataclasses.replace(result.provenance, track_settings=settings))


def _one_visible_gpu(request: ChildRequest) -> ChildRequest:
    """A job on cuda:N: this process sees only that GPU (CUDA_VISIBLE_DEVICES) and runs on cuda:0."""
    from agentforge.sandbox.pool import child_device

    visible, device = child_device(request.job.device, os.environ.get("CUDA_VISIBLE_DEVICES"))
    if visible is None:
        return request
    os.environ["CUDA_VISIBLE_DEVICES"] = visible
    return dataclasses.replace(request, job=dataclasses.replace(request.job, device=device))


def _worker_for(worker: Any, request: ChildRequest) -> Any:
    """The pre-forked worker, hardened; where none could be forked, the launcher that starts one
    for the job (`sandbox.worker.launch_worker`, a fresh interpreter)."""
    if worker is None:
        from agentforge.sandbox.worker import launch_worker

        return launch_worker
    return _set_up(worker, request)


def _set_up(worker: Any, request: ChildRequest) -> Any:
    """Harden the pre-forked worker as this process was hardened, once the request says how."""
    if worker is None:
        return None
    job = request.job
    fields = dict(workdir=request.workdir, limits=to_plain(request.limits), drop_to_uid=request.drop_to_uid,
                  cache_dir=job.cache_dir, cpu_threads=job.cpu_threads, device=job.device,
                  torch_switches=request.torch_switches, cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"))
    from agentforge.evaluator import build_cache

    build_cache.set_cache_root(job.cache_dir)
    builds, why = _set_up_control(worker, request, fields)
    worker.setup(**fields, judge_builds=builds is not None)
    if builds is not None and worker.separation.get("worker_uid") == os.getuid():
        builds.reuse = False  # the store is the worker's to write too: every build is made afresh
    worker.builds = builds
    worker.separation["judge_builds"] = f"by the judge, stored in {builds.store}" if builds is not None else why
    if getattr(worker, "sampler", None) is not None:
        if str(job.device).startswith("cuda"):  # a GPU call's host samples decide nothing; their cost is real
            worker.sampler.stop("not sampled on a CUDA device: the host's samples show the driver waiting")
        elif builds is not None:  # the candidate's own code: what the judge built for it, by content
            worker.sampler.set_judge_builds(builds)
        else:
            worker.sampler.set_own_roots((str(build_cache.cache_root()),))
    from agentforge.evaluator import op_observer

    # The judge's own observer (for its baselines), warmed in a thread now that this process is
    # hardened: whatever it creates on disk must belong to the sandbox user.
    op_observer.warm_up(background=True)
    return worker


def _set_up_control(worker: Any, request: ChildRequest, fields: dict[str, Any]) -> tuple[Any, str]:
    """The control worker (`judge.control`), set up as the candidate's where the job is timed on a
    CPU (where its null round trips bound the candidate's outside windows, and it makes the judge's
    builds: the `JudgeBuilds` returned); shut down elsewhere ((None, why) returned)."""
    control = getattr(worker, "control", None)
    if control is None:
        return None, "built by the worker: no control worker to build in"
    job = request.job
    # Timed on a CPU: the cpu backend (Triton there runs in its interpreter, CUDA compile-only or
    # emulated: neither is timed).
    if not (job.measure.timing and job.backend == "cpu" and not job.compile_only
            and not str(job.device).startswith("cuda")):
        worker.drop_control()
        return None, "built by the worker: the job is not timed on a CPU"
    try:
        control.setup(**fields, sampled=False)
    except Exception as exc:
        worker.drop_control()
        return None, f"built by the worker: the control worker's setup failed ({type(exc).__name__})"
    from agentforge.evaluator import build_cache
    from agentforge.evaluator.judge.judge_builds import JudgeBuilds

    return JudgeBuilds.open(control, build_cache.cache_root())


def _start_worker(interpret: bool) -> Any:
    """The candidate worker, forked now: this process has imported torch but read nothing secret
    (the request is still in its pipe) and initialised no CUDA. None when it cannot start."""
    if interpret:
        os.environ[triton_interpret.ENV] = "1"  # before anything imports triton, in both processes
    try:
        import agentforge.evaluator.worker.candidate_side  # noqa: F401 - warm: imported once, before the fork
        _import_observer_modules()
        from agentforge.evaluator.judge.remote import WorkerClient
        from agentforge.sandbox.worker import fork_worker, seccomp_names

        pid, sock = fork_worker()
    except Exception:
        return None
    client = WorkerClient(sock, pid, filters=seccomp_names())
    client.sampler = _open_sampler(pid)
    if not interpret:  # the control worker: forked as the candidate's, never given its code
        with contextlib.suppress(Exception):
            control_pid, control_sock = fork_worker()
            client.control = WorkerClient(control_sock, control_pid, filters=seccomp_names())
    return client


def _import_observer_modules() -> None:
    """What the operator observer's first start imports (torch's profiler asks for `torch._inductor`:
    about 2 s on two cores), imported once here before the fork instead of in each of the three
    processes that start one (the judge, the candidate worker, the control worker). Only with a CPU
    build of torch, as `_warm_imports`."""
    import torch

    if torch.version.cuda is None and torch.version.hip is None:
        with contextlib.suppress(Exception):
            importlib.import_module("torch._inductor")


INDUCTOR_MODULES = ("torch._inductor.compile_fx", "torch._inductor.codecache")


def _readable(fd: int) -> bool:
    """Whether `fd` has data (or its end) waiting now."""
    return bool(select.select([fd], [], [], 0)[0])


def _warm_imports() -> None:
    """Inductor's compiler modules (about 2 s on two cores), imported after the worker is forked
    (it stays without them) by a child started with `--warm-compile` (its parent's last job, or the
    command about to send one, times a torch.compile baseline) whose request is not there yet: a
    spare between an agent's candidates, whose baseline then starts from imported modules. A child
    whose job already waits (a suite's next job) reads it at once, and a spare after eager-only
    jobs (an RL step, most suites) imports nothing more: they would pay the 2 s for nothing. Only with a
    CPU build of torch: elsewhere an import could reach the CUDA driver before the request says
    which device is this job's. (Imported on a thread beside the job instead, they slowed its
    correctness stage by as much as they saved: the judge's own work needs the interpreter's
    lock.)"""
    import torch

    if torch.version.cuda is not None or torch.version.hip is not None:
        return
    for name in INDUCTOR_MODULES:
        try:
            importlib.import_module(name)
        except Exception:  # imported again where the baseline needs it, and said there
            return


def _open_sampler(pid: int) -> Any:
    """The judge's native sampler of the worker, opened now: the worker has one thread and has run
    nothing; whatever it starts later is sampled too (`native_sampler`)."""
    try:
        from agentforge.evaluator.judge.native_sampler import NativeSampler

        return NativeSampler.open(pid)
    except Exception:
        return None


def _no_dumps() -> None:
    """Not dumpable: a process of the same uid (the worker) can neither ptrace this one nor read
    its memory or descriptors under /proc."""
    with contextlib.suppress(OSError):
        limits.not_dumpable()


def loopback_up() -> bool:
    """Bring `lo` up in this network namespace (a fresh one, under `unshare`, has it down): Nsight
    Compute reaches its profiled process over a loopback port. The namespace has no other
    interface, so this opens nothing to the outside. False when not permitted."""
    import fcntl
    import socket
    import struct

    get_flags, set_flags, up = 0x8913, 0x8914, 0x1  # SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            reply = fcntl.ioctl(sock, get_flags, struct.pack("16sH14x", b"lo", 0))
            flags = struct.unpack("16sH14x", reply)[1]
            if not flags & up:
                fcntl.ioctl(sock, set_flags, struct.pack("16sH14x", b"lo", flags | up))
        return True
    except OSError:
        return False


def harden(request: ChildRequest, judge: bool = False) -> None:
    """`judge`: this process is the judge of a forked candidate worker, which drops to
    `drop_to_uid`; the judge takes a uid of its own (with the few capabilities it needs over the
    worker). Without a worker, the entry runs the job here, as the sandbox uid, with none."""
    if request.mounts:  # under `unshare`: still privileged in the new namespaces
        loopback_up()
        mounts.apply_mounts(request.mounts)
    if request.drop_to_uid is not None and judge:
        limits.drop_privileges(isolation.judge_uid(request.drop_to_uid), keep=limits.JUDGE_CAPABILITIES)
    elif request.drop_to_uid is not None:
        limits.drop_privileges(request.drop_to_uid)
    limits.no_new_privileges()
    limits.apply_limits(request.limits)
    os.chdir(request.workdir)
    os.umask(0o077)
    if judge:
        _private_tmpdir()


_JUDGE_TMP: list[str] = []


def _private_tmpdir() -> None:
    """The judge's own scratch folder: a fresh 0700 folder in /tmp, which the worker (in a mount
    namespace of its own with a fresh /tmp, and of another uid) can neither see nor enter. It is the
    judge's TMPDIR, so every cache that defaults to the temporary folder (torch.compile's inductor
    cache among them) is the judge's own; Triton's cache too, not the job's shared one."""
    import tempfile

    path = tempfile.mkdtemp(prefix="agentforge-judge-", dir="/tmp")
    os.environ["TMPDIR"] = path
    os.environ["TRITON_CACHE_DIR"] = os.path.join(path, "triton")
    tempfile.tempdir = None  # computed again from TMPDIR
    _JUDGE_TMP.append(path)


def _open_channel(args: argparse.Namespace) -> tuple[bytes, Callable[[bytes], None]]:
    """The request bytes, and how to send the result frame: over the two inherited pipe fds, or
    (in a container, `--io-dir`) through files in a directory only this child and the parent see:
    the request file is deleted once read, the result is written beside and renamed into place."""
    if args.io_dir:
        request_path = os.path.join(args.io_dir, "request.frame")
        with open(request_path, "rb") as fh:
            data = fh.read()
        os.unlink(request_path)
        tmp = os.path.join(args.io_dir, "result.frame.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)

        def send_file(frame: bytes) -> None:
            channel.write_all(fd, frame)
            os.fsync(fd)
            os.close(fd)
            os.replace(tmp, os.path.join(args.io_dir, "result.frame"))

        return data, send_file
    for fd in (args.request_fd, args.result_fd):
        os.set_inheritable(fd, False)
    data = channel.read_all(args.request_fd)
    os.close(args.request_fd)

    def send_pipe(frame: bytes) -> None:
        channel.write_all(args.result_fd, frame)
        os.close(args.result_fd)

    return data, send_pipe


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="agentforge.sandbox.child")
    parser.add_argument("--request-fd", type=int)
    parser.add_argument("--result-fd", type=int)
    parser.add_argument("--io-dir", help="container mode: request and result files in this directory")
    parser.add_argument("--worker", action="store_true",
                        help="fork the candidate worker now, before the request is read (the real pipeline)")
    parser.add_argument("--interpret", action="store_true",
                        help="the job runs Triton in its interpreter: set before torch imports triton")
    parser.add_argument("--preload", action="store_true",
                        help="import torch before the request is read (a spare child does it while no job waits)")
    parser.add_argument("--warm-compile", action="store_true",
                        help="with --preload: import Inductor too while no request waits (the job will compile)")
    args = parser.parse_args(argv)
    if not args.io_dir and (args.request_fd is None or args.result_fd is None):
        parser.error("give --request-fd and --result-fd, or --io-dir")
    _no_dumps()
    with contextlib.suppress(OSError):
        limits.child_subreaper()  # orphans of the worker's processes come here, where the judge sees them
    if args.preload and not args.interpret:
        import torch  # noqa: F401 - imported now, before the request: no CUDA is initialised by it
    worker = _start_worker(args.interpret) if args.worker else None
    if (args.preload and args.warm_compile and not args.interpret and args.request_fd is not None
            and not _readable(args.request_fd)):
        _warm_imports()  # a spare with time to spare: no request is waiting yet
    data, send = _open_channel(args)
    limits.die_with_parent()
    faulthandler.enable(file=sys.stderr, all_threads=True)

    nonce = data[len(channel.MAGIC):channel.HEADER_BYTES - 8]
    request = ChildRequest.from_json(channel.decode_frame(data, nonce).decode())
    deliver = _Delivery(request, send, nonce)
    try:
        harden(request, judge=worker is not None)
    except BaseException as exc:
        result = _exception_result(request.job, exc)
        result = dataclasses.replace(result, error=dataclasses.replace(result.error, type="SandboxError"))
    else:
        _no_dumps()  # again: a change of uid resets the flag
        # A stage stuck in the judge past its deadline: the stage clock hands the verdict it kept
        # (every finished stage) to this writer, from its own thread, before the parent's limit.
        stage_budget.set_writer(lambda kept: deliver.last(_memory_verdict(_native_evidence(kept, worker, request.job),
                                                                          request)))
        result = evaluate(request, worker)
    deliver.last(result)


class _Delivery:
    """The one result frame, sent once, by the main thread or the stage clock's: whichever comes
    first sends and ends the process; the other waits for that."""

    def __init__(self, request: ChildRequest, send: Callable[[bytes], None], nonce: bytes) -> None:
        self.request, self.send, self.nonce = request, send, nonce
        self.lock = threading.Lock()

    def last(self, result: EvalResult) -> None:
        self.lock.acquire()  # never released: the process ends holding it
        try:
            payload = result.to_json().encode()
        except (TypeError, ValueError) as exc:  # e.g. a NaN the entry left in a record
            payload = _exception_result(self.request.job, exc).to_json().encode()
        try:
            self.send(channel.encode_frame(payload, self.nonce))
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            for path in _JUDGE_TMP:  # in a sandbox's own /tmp it would go anyway; not under `none`
                shutil.rmtree(path, ignore_errors=True)
            os._exit(0)


if __name__ == "__main__":
    main()
