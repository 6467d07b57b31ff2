"""The docker backend: the same child, the same job, in a throwaway container.

The container has no network (`network_mode=none`), a read-only root, a tmpfs /tmp, runs as
uid 65534 with every capability dropped and no-new-privileges, and is limited by a memory cgroup
(`mem_limit`, swap included), a pids cgroup (`pids_limit`) and ulimits for CPU time, file size and
core files. GPUs are passed through with a device request (the NVIDIA container toolkit) for CUDA
jobs, one device per job. Three host directories are bound: `work/` (the job's writable
directory), the build cache, and `io/`.

The channel. A container has no inherited pipe fds, so the request and result travel as files in
`io/`, a directory bound only into this container: the child reads `request.frame` and deletes it
before it hardens itself and runs any job code, and writes `result.frame` atomically (a temporary
file renamed into place) after the entry returns. The candidate's stdout and stderr are the
container's log streams, read only for the stderr tail. Frames carry the run's nonce, as on the
pipes, so a frame written by anything that did not read this run's request fails to parse. We
chose files over an attach socket because docker's log drivers re-encode stdout (binary frames
would not survive json-file), and attach/stdin half-close is fragile across engine versions.

The docker SDK (`pip install agentforge[docker]`) is imported only when this backend is built.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from agentforge.evaluator.judge import stage_budget
from agentforge.evaluator.result import EvalJob, EvalResult
from agentforge.sandbox import channel, reaper, verdict
from agentforge.sandbox.config import NOBODY, SandboxConfig
from agentforge.sandbox.process_backend import limits_for, prepare_cache
from agentforge.sandbox.request import ChildRequest

from agentforge.candidate import code_hash

WORKDIR, CACHE, IO = "/work", "/cache", "/io"
IMAGE_PYTHONPATH = "/opt/agentforge"  # where sandbox/docker/Dockerfile puts the package
STDERR_TAIL_LINES = 200
DEFAULT_BASE_URL_KEY = "docker_base_url"  # SandboxConfig.extra key; unset: the SDK's from_env()


class DockerUnavailable(RuntimeError):
    """No docker SDK or no reachable daemon; the message says which."""


def docker_client(config: SandboxConfig) -> Any:
    try:
        import docker
    except ImportError as exc:
        raise DockerUnavailable("the docker backend needs the docker SDK: pip install 'agentforge[docker]'") from exc
    try:
        base_url = config.extra.get(DEFAULT_BASE_URL_KEY)
        client = docker.DockerClient(base_url=base_url) if base_url else docker.from_env()
        client.ping()
    except Exception as exc:  # the SDK raises several types (DockerException, requests errors)
        raise DockerUnavailable(f"no docker daemon reachable: {exc}") from exc
    return client


def _device_index(device: str) -> str:
    return device.split(":", 1)[1] if ":" in device else "0"


class DockerBackend:
    name = "docker"

    def __init__(self, config: SandboxConfig | None = None, client: Any = None) -> None:
        self.config = config or SandboxConfig(kind="docker")
        self.client = client or docker_client(self.config)

    def run_many(self, jobs: Sequence[EvalJob], workers: int = 1,
                 on_result: Callable[[int, EvalResult], None] | None = None) -> list[EvalResult]:
        from agentforge.sandbox.pool import run_pool

        return run_pool(self.run, jobs, self.config, workers, on_result)

    def description(self) -> str:
        return (f"docker({self.config.docker_image},no-net,ro-root,uid={NOBODY},cap-drop-all,"
                f"mem={self.config.memory_gb:g}G,pids={self.config.max_processes})")

    def run(self, job: EvalJob) -> EvalResult:
        started, clock = verdict.now(), time.monotonic()
        root = Path(self.config.workdir_root)
        root.mkdir(parents=True, exist_ok=True)
        reaper.remove_dead_job_dirs(root)  # docker-job-* folders of runs killed before they cleaned up
        job_dir, claim = reaper.make_job_dir(root, prefix="docker-job-")
        try:
            return self._run_in(job, job_dir, started, clock)
        finally:
            if self.config.keep_workdir:
                reaper.mark_kept(job_dir)  # a kept workdir is not a dead job's
            else:
                reaper.remove_job_dir(job_dir)
            claim.release()

    def _run_in(self, job: EvalJob, job_dir: Path, started: str, clock: float) -> EvalResult:
        cfg = self.config

        def info() -> verdict.RunInfo:
            return verdict.RunInfo(self.description(), started, time.monotonic() - clock, "docker")

        work, io = job_dir / "work", job_dir / "io"
        cache = Path(cfg.cache_dir).expanduser().resolve()
        for path in (work, io):
            path.mkdir(parents=True)
            _give_to_sandbox(path)
        prepare_cache(str(cache), NOBODY if os.geteuid() == 0 else None)
        if os.geteuid() != 0:
            cache.chmod(0o777)
        job_dir.chmod(0o711)
        on_cuda = job.device.startswith("cuda")
        # The container shares the host's CLOCK_MONOTONIC (no time namespace): the judge counts
        # the stages' shares from now, a little before the container starts, never after.
        budget = stage_budget.for_sandbox(job.budget, cfg.timeout_s, shares=cfg.stage_shares)
        inner_job = dataclasses.replace(job, cache_dir=CACHE, device="cuda:0" if on_cuda else job.device,
                                        budget=budget)
        limits = dataclasses.replace(limits_for(cfg, job), max_processes=None)  # pids cgroup instead
        request = ChildRequest(entry=cfg.entry, job=inner_job, workdir=WORKDIR, limits=limits,
                               torch_switches=cfg.torch_switches)
        nonce = channel.new_nonce()
        (io / "request.frame").write_bytes(channel.encode_frame(request.to_json().encode(), nonce))
        try:
            container = self._create(job, work, io, cache)
        except Exception as exc:  # image missing, daemon refused: a value, not an exception
            return verdict.sandbox_error(job, f"could not create the container: {exc}", info())
        try:
            timed_out, code, oom = self._start_and_wait(container)
            tail = container.logs(stdout=False, stderr=True, tail=STDERR_TAIL_LINES).decode("utf-8", "replace")
        except Exception as exc:  # the daemon failed under us: still a value
            return verdict.sandbox_error(job, f"docker failed during the run: {exc}", info())
        finally:
            try:
                container.remove(force=True)
            except Exception:
                pass  # already gone, or the daemon is; nothing of ours is left running in it
        return self._verdict(job, io, nonce, timed_out, code, oom, tail[-4000:], info())

    def _create(self, job: EvalJob, work: Path, io: Path, cache: Path) -> Any:
        import docker.types

        cfg = self.config
        memory = f"{int(cfg.memory_gb * 1024)}m"
        device_requests = []
        if job.device.startswith("cuda"):
            device_requests.append(docker.types.DeviceRequest(
                device_ids=[_device_index(job.device)], capabilities=[["gpu"]]))
        cpu = int(cfg.cpu_seconds)
        volumes = {str(work): {"bind": WORKDIR, "mode": "rw"}, str(io): {"bind": IO, "mode": "rw"},
                   str(cache): {"bind": CACHE, "mode": "rw"}}
        extra_env = {}
        if cfg.python_paths:  # extra import roots, bound read-only (the image's own come first)
            inner = [f"/opt/python-path/{i}" for i in range(len(cfg.python_paths))]
            for host, path in zip(cfg.python_paths, inner, strict=True):
                volumes[str(Path(host).resolve())] = {"bind": path, "mode": "ro"}
            extra_env["PYTHONPATH"] = ":".join([IMAGE_PYTHONPATH, *inner])
        return self.client.containers.create(
            cfg.docker_image,
            command=["python3", "-P", "-m", "agentforge.sandbox.child", "--io-dir", IO],
            network_mode="none", read_only=True, user=f"{NOBODY}:{NOBODY}",
            tmpfs={"/tmp": "rw,nosuid,nodev,size=1g,mode=1777"},
            volumes=volumes,
            working_dir=WORKDIR, mem_limit=memory, memswap_limit=memory, pids_limit=cfg.max_processes,
            cap_drop=["ALL"], security_opt=["no-new-privileges"], init=True,
            ulimits=[docker.types.Ulimit(name="core", soft=0, hard=0),
                     docker.types.Ulimit(name="cpu", soft=cpu, hard=cpu + 1),
                     docker.types.Ulimit(name="fsize", soft=cfg.file_size_mb * 2**20,
                                         hard=cfg.file_size_mb * 2**20)],
            environment={**extra_env, "HOME": WORKDIR, "TMPDIR": "/tmp", "PYTHONDONTWRITEBYTECODE": "1",
                         "PYTHONUNBUFFERED": "1", "TORCH_EXTENSIONS_DIR": f"{CACHE}/torch_extensions",
                         "TRITON_CACHE_DIR": f"{CACHE}/triton"},
            device_requests=device_requests or None, labels={"agentforge.sandbox": "1"},
            detach=True,
        )

    def _start_and_wait(self, container: Any) -> tuple[bool, int | None, bool]:
        """(timed out, exit code, OOM-killed by the memory cgroup)."""
        container.start()
        try:
            status = container.wait(timeout=self.config.timeout_s)
        except Exception:  # requests' ReadTimeout / ConnectionError: the budget ran out
            container.kill()
            container.reload()
            return True, None, False
        container.reload()
        return False, int(status.get("StatusCode", -1)), bool(container.attrs["State"].get("OOMKilled"))

    def _verdict(self, job: EvalJob, io: Path, nonce: bytes, timed_out: bool, code: int | None,
                 oom: bool, tail: str, info: verdict.RunInfo) -> EvalResult:
        frame = io / "result.frame"
        data = frame.read_bytes() if frame.is_file() else b""
        problem = "no result file"
        if data:
            try:
                result = EvalResult.from_json(channel.decode_frame(data, nonce).decode())
                if result.task_name == job.task_name and result.candidate_hash == code_hash(job.candidate_source):
                    return verdict.stamp(result, info.sandbox, "docker")
                problem = "the result names another task or candidate"
            except (ValueError, TypeError, KeyError, UnicodeDecodeError) as exc:
                problem = f"unreadable result ({type(exc).__name__}: {exc})"
        if timed_out:
            return verdict.timeout(job, self.config.timeout_s, tail, info)
        if oom:
            return verdict.memory_cgroup(job, self.config.memory_gb, code, tail, info)
        # docker reports a death by signal as exit code 128 + signal, like bwrap.
        return verdict.crashed(job, code if code is not None else -1, True, problem, tail, info,
                               garbled=bool(data))


def _give_to_sandbox(path: Path) -> None:
    """The container runs as uid 65534: hand it the directory (chown as root, else open it up)."""
    if os.geteuid() == 0:
        os.chown(path, NOBODY, NOBODY)
    else:
        path.chmod(0o777)
