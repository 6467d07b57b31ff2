"""The untrusted candidate worker: the only process that imports or runs candidate code.

It is started by the judge before the judge has read anything secret: forked from the sandbox
child the moment that child has imported torch (`fork_worker`, no CUDA initialised yet, so the
fork is clean and the worker starts warm), or spawned as a fresh interpreter (`spawn_worker`, for
a judge running in-process, as tests do). Right after the fork it closes every descriptor but its
socket to the judge and its stdout/stderr files: it never holds the judge's request or result
pipe, the nonce that authenticates the verdict, a seed or the reference.

The first message is the setup (workdir, limits, uid, process-wide switches): the worker hardens
itself the same way the judge did, then serves requests one at a time (`candidate_side.Worker`)
until the judge says `shutdown` or closes the socket. Each reply carries the id of its request.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import traceback
from typing import TYPE_CHECKING, Any

from agentforge.evaluator.protocol import messages, wire
from agentforge.evaluator.protocol.messages import Setup
from agentforge.evaluator.result import from_plain
from agentforge.sandbox import limits, seccomp
from agentforge.sandbox.request import Limits

if TYPE_CHECKING:
    from agentforge.evaluator.judge.remote import SeccompNames, WorkerClient


def _close_other_fds(keep: set[int]) -> None:
    try:
        fds = [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:
        fds = list(range(3, 1024))
    for fd in fds:
        if fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass


def _harden(setup: Setup) -> dict[str, str]:
    """Harden this process before any candidate code; returns what it did, for the judge to check
    (`separation`): a private /tmp and /dev/shm, its own uid, the seccomp guard."""
    plain = setup.limits
    tmpfs_bytes = int(plain["file_size_bytes"]) if plain is not None else None
    keep = tuple(folder for folder in (setup.workdir, setup.cache_dir) if folder)
    # The worker imports more later (the evaluator, torch's submodules): its import roots stay in
    # sight, read-only, when they live under /tmp (a checkout or a virtualenv there). Not the
    # current folder `-m` puts on sys.path: it holds no code of ours, and may hold others' files.
    cwd = os.getcwd()
    code = tuple(p for p in {*sys.path, sys.prefix, *_package_folders()} if p and os.path.abspath(p) != cwd)
    report = {"private_tmp": limits.private_tmp(tmpfs_bytes, keep, code)}  # while still privileged
    os.chdir(setup.workdir)
    os.umask(0o077)
    if setup.drop_to_uid is not None:
        limits.drop_privileges(setup.drop_to_uid)
        if setup.sampled:
            _dumpable()  # a change of uid clears it: the judge reads this process's map and samples it
    if not setup.sampled:
        limits.not_dumpable()  # out of reach of the candidate's worker, which runs as the same uid
    limits.no_new_privileges()
    if plain is not None:
        limits.apply_limits(from_plain(Limits, plain))
    report["seccomp"] = seccomp.guard()
    return report


def _package_folders() -> list[str]:
    """The folders of agentforge's packages: an editable install maps them from a checkout, which
    sys.path does not name (found without importing them)."""
    import importlib.util

    folders: list[str] = []
    for name in ("agentforge", "agentforge.evaluator", "agentforge.sandbox", "agentforge.rl"):
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            continue
        folders += list(spec.submodule_search_locations or []) if spec is not None else []
    return folders


def _configure(setup: Setup) -> None:
    """Process-wide switches, as the judge sets its own: the same numerics on both sides; the
    judge's one visible GPU, set before this process initialises CUDA."""
    if setup.cuda_visible_devices is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = setup.cuda_visible_devices
    import torch
    from agentforge.evaluator import build_cache

    if setup.cache_dir:
        build_cache.set_cache_root(setup.cache_dir)
    if setup.torch_switches:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.set_float32_matmul_precision("highest")
        torch.backends.cudnn.deterministic = False  # as the judge: eager's default algorithms
        torch.backends.cudnn.benchmark = False
    threads = setup.cpu_threads
    if threads > 0 and not setup.device.startswith("cuda"):
        torch.set_num_threads(threads)
        os.environ["OMP_NUM_THREADS"] = str(threads)


def _warm_observer() -> None:
    try:
        from agentforge.evaluator import op_observer

        op_observer.warm_up()
    except Exception:
        pass


def serve(sock: socket.socket) -> None:
    """The worker's whole life after the fork or spawn; never returns."""
    code = 0
    try:
        first = wire.receive(sock)
        setup = Setup.parse(first)  # the judge's own first message: malformed, the worker exits (3)
        hardened = _harden(setup)
        _configure(setup)
        if setup.judge_builds:
            from agentforge.evaluator import native

            native.set_judge_builder(lambda build: _ask_judge(sock, build))
        from agentforge.evaluator.worker.candidate_side import Worker, serve_request

        worker = Worker()
        wire.send(sock, {"id": first.get("id"), "ready": True, "pid": os.getpid(), "separation": hardened})
        # After hardening (it creates files, which must be the sandbox user's), while the judge
        # checks the task; the judge's next request waits in the socket meanwhile.
        _warm_observer()
        while True:
            request = wire.receive(sock)
            if request.get("op") == messages.Shutdown.op:
                break
            # The judge checks the seal from outside (/proc), whatever this reply says.
            reply = _seal(request) if request.get("op") == "seal" else serve_request(worker, request)
            reply["id"] = request.get("id")
            try:
                wire.send(sock, reply)
            except TypeError as exc:  # an output that cannot travel is the candidate's failure
                wire.send(sock, {"id": request.get("id"), "raised": {"type": "UnsendableOutput",
                                                                    "message": str(exc)[:500]}})
    except wire.PeerClosed:
        code = 0
    except BaseException:
        code = 3
        traceback.print_exc()  # the judge turns the exit into WorkerBroken; the stderr says why
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def _ask_judge(sock: socket.socket, build: messages.Build) -> dict[str, Any]:
    """One build asked of the judge mid-request (`native.set_judge_builder`): its answer, a dict."""
    wire.send(sock, {"op": build.op, **build.to_fields()})
    answer = wire.receive(sock)
    return answer if isinstance(answer, dict) else {"ok": False, "error": "the judge's answer is malformed"}


def _seal(raw: dict[str, Any]) -> dict[str, Any]:
    """The seal request, parsed as every request is (a malformed one is an error reply)."""
    try:
        messages.Seal.parse(raw)
    except messages.ProtocolError as exc:
        return messages.protocol_error_reply(exc)
    return seccomp.seal()


def fork_worker() -> tuple[int, socket.socket]:
    """(pid, judge's end of the socket). Call before reading anything secret and before CUDA is
    initialised in this process."""
    judge_end, worker_end = wire.pair()
    ready_r, ready_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            judge_end.close()
            _close_other_fds({0, 1, 2, worker_end.fileno(), ready_w})
            limits.die_with_parent()
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            _dumpable()
            os.close(ready_w)
        except BaseException:
            os._exit(3)
        serve(worker_end)
    worker_end.close()
    os.close(ready_w)
    _wait_closed(ready_r, 5.0)
    return pid, judge_end


def _dumpable() -> None:
    """Born not dumpable (the judge it was forked from is not): dumpable now, before it has run
    anything, so that the judge (same uid) may open its native sampler on it and read its memory
    map. It holds nothing secret; the judge stays not dumpable."""
    try:
        limits.dumpable()
    except OSError:
        pass


def _wait_closed(fd: int, timeout_s: float) -> None:
    """Wait until the worker closed its end of the pipe (it is dumpable then), at most `timeout_s`."""
    import select

    try:
        if select.select([fd], [], [], timeout_s)[0]:
            os.read(fd, 1)
    finally:
        os.close(fd)


def spawn_worker(python: str | None = None, interpret: bool = False) -> tuple[subprocess.Popen[bytes], socket.socket]:
    """A fresh worker interpreter (for a judge that runs in a process already holding secrets)."""
    judge_end, worker_end = wire.pair()
    env = dict(os.environ)
    if interpret:
        env["TRITON_INTERPRET"] = "1"
    argv = [python or sys.executable, "-m", "agentforge.sandbox.worker", "--fd", str(worker_end.fileno())]
    try:
        proc = subprocess.Popen(argv, pass_fds=(worker_end.fileno(),), stdin=subprocess.DEVNULL, env=env,
                                start_new_session=False)
    finally:
        worker_end.close()
    return proc, judge_end


def launch_worker(interpret: bool = False) -> WorkerClient:
    """A fresh worker interpreter (`spawn_worker`) and the judge's handle on it, told what this
    sandbox's seccomp filters refuse. What `run_pipeline` is given to start its own worker."""
    from agentforge.evaluator.judge.proc_view import processes_below
    from agentforge.evaluator.judge.remote import WorkerClient

    older = processes_below(os.getpid())
    proc, sock = spawn_worker(interpret=interpret)
    return WorkerClient(sock, proc.pid, proc, older, filters=seccomp_names())


def seccomp_names() -> SeccompNames:
    """What the worker's guard and seal refuse, for the judge's verdict when one kills it."""
    from agentforge.evaluator.judge.remote import SeccompNames

    return SeccompNames(guarded=seccomp.GUARDED, sealed=seccomp.SEALED)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="agentforge.sandbox.worker")
    parser.add_argument("--fd", type=int, required=True)
    args = parser.parse_args(argv)
    limits.die_with_parent()
    sock = socket.socket(fileno=args.fd)
    _close_other_fds({0, 1, 2, sock.fileno()})
    serve(sock)


if __name__ == "__main__":
    main()
