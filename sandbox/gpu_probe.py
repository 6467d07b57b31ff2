"""Does CUDA start inside the judge's confinement? One small child answers, in well under a second.

On an H200 every CUDA job said "this machine has no CUDA GPU" while torch outside the sandbox saw
the card: cuInit returned CUDA_ERROR_OPERATING_SYSTEM under the read-only /proc that `unshare`'s
mount tree then had. `probe(mode)` asks that question directly. It starts a child exactly as a
job's judge is started (the isolation plan's prefix, the sanitised environment, the job folder),
and the child confines itself through the judge's own `child.harden` (the plan's mounts, the
judge's uid and capabilities, no-new-privileges, the limits), then calls cuInit(0) through
ctypes. Nothing imports torch, and the child reads no job.

`agentforge doctor` shows it as its `gpu in sandbox` line; `python -m agentforge.sandbox.gpu_probe
[mode]` prints the answer as JSON.
"""

from __future__ import annotations

import ctypes
import dataclasses
import json
import os
import subprocess
import sys
from dataclasses import dataclass

CUDA_SUCCESS = 0
CUDA_ERROR_OPERATING_SYSTEM = 304


@dataclass(frozen=True)
class GpuProbe:
    mode: str  # the isolation the child ran under (auto resolved)
    sandbox: str  # the plan's description: uid, namespaces
    code: int | None  # cuInit's return; None when libcuda did not load or the child failed
    devices: int = 0
    uid: int | None = None  # the child's effective uid after hardening
    root_readonly: bool | None = None  # whether / was read-only to it (the isolating modes' tree)
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.code == CUDA_SUCCESS and self.devices > 0


def _cuda_init() -> dict[str, object]:
    """cuInit(0) and the device count, through the driver library (no torch)."""
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError as exc:
        return {"code": None, "detail": f"libcuda.so.1 does not load: {exc}"}
    code = int(lib.cuInit(0))
    count = ctypes.c_int(0)
    if code == CUDA_SUCCESS:
        lib.cuDeviceGetCount(ctypes.byref(count))
    name = ctypes.c_char_p()
    lib.cuGetErrorName(code, ctypes.byref(name))
    return {"code": code, "devices": count.value, "detail": (name.value or b"").decode()}


def _child() -> None:
    """The child's side: harden as a judge does, then start CUDA; one JSON line on stdout."""
    from agentforge.sandbox.child import harden
    from agentforge.sandbox.request import ChildRequest

    request = ChildRequest.from_json(sys.stdin.read())
    harden(request, judge=True)
    said = _cuda_init()
    said["uid"] = os.geteuid()
    said["root_readonly"] = bool(os.statvfs("/").f_flag & os.ST_RDONLY)
    print(json.dumps(said), flush=True)


def probe(mode: str = "auto", config: object | None = None, timeout_s: float = 60.0) -> GpuProbe:
    """Run the child under `mode` with `config`'s sandbox settings (the defaults when None)."""
    from agentforge.evaluator.result import EvalJob
    from agentforge.sandbox import reaper
    from agentforge.sandbox.config import SandboxConfig
    from agentforge.sandbox.process_backend import ProcessBackend, child_env, limits_for
    from agentforge.sandbox.request import ChildRequest

    cfg = dataclasses.replace(config or SandboxConfig(), isolation=mode)
    try:
        backend = ProcessBackend(cfg)
    except Exception as exc:  # an explicit mode that cannot run here
        return GpuProbe(mode, "", None, detail=f"{type(exc).__name__}: {exc}")
    root = os.path.abspath(cfg.workdir_root)
    os.makedirs(root, exist_ok=True)
    job_dir, claim = reaper.make_job_dir(root, prefix="gpu-probe-")
    try:
        workdir, plan, python = backend._prepare(job_dir)
        job = EvalJob(task_name="gpu-probe", task_source="", candidate_source="", device="cuda")
        request = ChildRequest(entry=cfg.entry, job=job, workdir=str(workdir), limits=limits_for(cfg, job),
                               drop_to_uid=plan.drop_to_uid, mounts=plan.mounts)
        argv = [*plan.prefix, python, "-P", "-m", "agentforge.sandbox.gpu_probe", "--child"]
        try:
            done = subprocess.run(argv, input=request.to_json(), capture_output=True, text=True, cwd=workdir,
                                  env=child_env(cfg, str(workdir), plan.cache_dir), timeout=timeout_s,
                                  start_new_session=True, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return GpuProbe(plan.mode, plan.description, None, detail=f"the probe's child did not answer: {exc}")
        lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
        if not lines:
            tail = (done.stderr or done.stdout).strip()[-400:]
            why = f"the child failed (exit {done.returncode}): {tail}"
            return GpuProbe(plan.mode, plan.description, None, detail=why)
        said = json.loads(lines[-1])
        return GpuProbe(plan.mode, plan.description, said.get("code"), int(said.get("devices") or 0),
                        said.get("uid"), said.get("root_readonly"), str(said.get("detail", "")))
    finally:
        reaper.remove_job_dir(job_dir)
        claim.release()


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["--child"]:
        _child()
        return 0
    result = probe(args[0] if args else "auto")
    print(json.dumps({**dataclasses.asdict(result), "ok": result.ok}, indent=2))
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
