"""`agentforge doctor`: is this machine ready for the GPU path, and if not, what to do.

One check per prerequisite of the CUDA path (the evaluator's build, CuPy launch, event timing,
L2 flush and reset, Nsight Compute profile, the sandbox around them). Each says `ok`, `warn`
(that part degrades: a profile becomes "unavailable", say), `fail` (the GPU path cannot run;
`fix` says what to do) or `info`. On a machine without a GPU the checks that need one say what
runs instead (the CPU backend, CUDA compile-only verdicts, Triton's interpreter) and none fails.

Standard library and torch only (it runs first on bare GPU images): `python -m
agentforge.doctor [--json]`. The whole run takes a few seconds; every external
command has a short timeout.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import importlib.metadata
import json
import os
import platform
import re
import stat
import subprocess
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass

OK, WARN, FAIL, INFO = "ok", "warn", "fail", "info"
SANDBOX_UID = 65534  # SandboxConfig.sandbox_uid's default (nobody)
COMMAND_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Check:
    name: str
    status: str  # ok | warn | fail | info
    detail: str
    fix: str = ""  # what to do, when not ok


@dataclass
class Facts:
    """What the checks share: torch's view of the machine, read once."""

    torch_version: str = ""
    torch_cuda: str | None = None  # torch.version.cuda: the CUDA torch was built for
    gpu: bool = False
    gpu_name: str = ""
    capability: str = ""
    driver_cuda: str | None = None  # the newest CUDA the driver supports (cuDriverGetVersion)
    driver_version: str | None = None


def _major(version: str | None) -> int | None:
    found = re.match(r"(\d+)", version or "")
    return int(found.group(1)) if found else None


def _run(argv: list[str]) -> tuple[int, str]:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        return -1, str(exc)
    return proc.returncode, proc.stdout + proc.stderr


def driver_cuda_version() -> str | None:
    """The CUDA version the installed driver supports ("13.0"), from libcuda's cuDriverGetVersion;
    None without an NVIDIA driver. Needs no GPU and does not initialise CUDA."""
    for name in ("libcuda.so.1", "libcuda.so"):
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        value = ctypes.c_int(0)
        if lib.cuDriverGetVersion(ctypes.byref(value)) == 0 and value.value > 0:
            return f"{value.value // 1000}.{value.value % 1000 // 10}"
    return None


def gather() -> Facts:
    facts = Facts(driver_cuda=driver_cuda_version())
    with contextlib.suppress(OSError), open("/proc/driver/nvidia/version") as fh:
        found = re.search(r"Kernel Module\s+(?:for \S+\s+)?([\d.]+)", fh.readline())
        facts.driver_version = found.group(1) if found else None
    try:
        import torch
    except ImportError:
        return facts
    facts.torch_version, facts.torch_cuda = torch.__version__, torch.version.cuda
    with contextlib.suppress(Exception):
        facts.gpu = torch.cuda.is_available()
    if facts.gpu:
        props = torch.cuda.get_device_properties(0)
        facts.gpu_name, facts.capability = props.name, f"{props.major}.{props.minor}"
    return facts


# ----- the checks -------------------------------------------------------------------------
def check_python(_: Facts) -> Check:
    ok = sys.version_info >= (3, 11)
    return Check("python", OK if ok else FAIL, f"{platform.python_version()} ({sys.executable})",
                 "" if ok else "use Python >= 3.11")


def check_torch(facts: Facts) -> Check:
    if not facts.torch_version:
        return Check("torch", FAIL, "torch is not importable", "pip install torch (make setup does)")
    build = f"CUDA {facts.torch_cuda} build" if facts.torch_cuda else "CPU-only build"
    return Check("torch", OK, f"{facts.torch_version}, {build}")


def check_gpu(facts: Facts) -> Check:
    if facts.gpu:
        return Check("gpu", OK, f"{facts.gpu_name}, compute capability {facts.capability}")
    if facts.driver_cuda and facts.torch_cuda is None:
        return Check("gpu", FAIL, f"an NVIDIA driver (CUDA {facts.driver_cuda}) but torch is a CPU-only build",
                     "install torch's CUDA build: make clean && make setup (with nvidia-smi on PATH)")
    if facts.driver_cuda:
        return Check("gpu", FAIL, "an NVIDIA driver is installed but torch sees no GPU",
                     "check nvidia-smi, CUDA_VISIBLE_DEVICES and that /dev/nvidia* exist")
    return Check("gpu", INFO, "no GPU here: what runs is the CPU backend (C++ kernels built, checked and "
                 "timed), compile-only verdicts for CUDA sources (nvcc, sm_90a) and Triton kernels in "
                 "Triton's interpreter; the GPU checks below say what they would need")


def check_driver(facts: Facts) -> Check:
    if facts.driver_cuda is None:
        return Check("driver", INFO, "no NVIDIA driver (libcuda) on this machine")
    detail = f"driver {facts.driver_version or '?'} supports CUDA up to {facts.driver_cuda}"
    need, have = _major(facts.torch_cuda), _major(facts.driver_cuda)
    if need is not None and have is not None and need > have:
        return Check("driver", FAIL, f"{detail}; torch was built for CUDA {facts.torch_cuda}",
                     f"install a torch build for CUDA {have}.x (or update the driver)")
    return Check("driver", OK, detail + (f"; torch needs {facts.torch_cuda}" if facts.torch_cuda else ""))


def check_nvcc(facts: Facts) -> Check:
    from agentforge.evaluator.worker.compile_only import find_nvcc

    nvcc = find_nvcc()
    if nvcc is None:
        return Check("nvcc", WARN if facts.gpu else INFO, "nvcc not found: no CUDA builds (load_inline, "
                     "load_cuda) and no compile-only verdicts", "install the CUDA toolkit (nvcc) matching torch's CUDA")
    _, out = _run([nvcc, "--version"])
    found = re.search(r"release (\d+\.\d+)", out)
    version = found.group(1) if found else "?"
    if facts.torch_cuda and _major(version) != _major(facts.torch_cuda):
        return Check("nvcc", FAIL if facts.gpu else WARN,
                     f"nvcc {version} ({nvcc}) but torch was built for CUDA {facts.torch_cuda}: torch's "
                     "load_inline refuses a toolkit of another major version",
                     f"put a CUDA {_major(facts.torch_cuda)}.x nvcc first on PATH (or set CUDA_HOME)")
    return Check("nvcc", OK, f"nvcc {version} ({nvcc})")


def check_cuda_home(facts: Facts) -> Check:
    """torch's `CUDA_HOME` must hold CUDA's headers, or no `load_inline` with CUDA builds: torch
    guesses it from the folder above `which nvcc`, wrong when that nvcc is a wrapper script."""
    from agentforge.evaluator import native

    local = native.local_cuda_home()
    if not facts.torch_cuda:
        return Check("cuda home", INFO, f"torch is a CPU-only build: compile-only CUDA builds use nvcc's "
                     f"toolkit at {local or '(none found)'}")
    from torch.utils import cpp_extension

    torch_home = cpp_extension.CUDA_HOME
    if native.has_cuda_headers(torch_home):
        return Check("cuda home", OK, f"torch builds CUDA extensions against {torch_home}")
    if native.has_cuda_headers(local):
        return Check("cuda home", WARN, f"torch's CUDA_HOME is {torch_home}, which holds no CUDA headers; the "
                     f"evaluator's builds use {local} (nvcc's own toolkit root), other torch extensions fail",
                     f"export CUDA_HOME={local}")
    return Check("cuda home", FAIL if facts.gpu else WARN, f"no CUDA headers under torch's CUDA_HOME "
                 f"({torch_home}) nor nvcc's toolkit ({local}): no load_inline with CUDA builds",
                 "install the CUDA toolkit's headers and set CUDA_HOME to its root")


def check_cupy(facts: Facts) -> Check:
    wheels = sorted(d.metadata["Name"] for d in importlib.metadata.distributions()
                    if (d.metadata["Name"] or "").lower().startswith("cupy"))
    want = _major(facts.torch_cuda)
    extra = "cuda12" if want == 12 else "cuda"
    if not wheels:
        status = WARN if facts.gpu else INFO
        return Check("cupy", status, "CuPy is not installed: candidates using native.load_cuda cannot launch",
                     f"pip install 'agentforge[{extra}]'" if want else "")
    found = re.search(r"cuda(\d+)x", wheels[0].lower())
    major = int(found.group(1)) if found else None
    if want is not None and major is not None and major != want:
        return Check("cupy", FAIL if facts.gpu else WARN,
                     f"{wheels[0]} but torch was built for CUDA {facts.torch_cuda}",
                     f"pip uninstall {wheels[0]} && pip install 'agentforge[{extra}]'")
    return Check("cupy", OK, ", ".join(wheels))


def check_triton(facts: Facts) -> Check:
    try:
        version = importlib.metadata.version("triton")
    except importlib.metadata.PackageNotFoundError:
        return Check("triton", WARN, "Triton is not installed: Triton candidates cannot run",
                     "pip install 'agentforge[triton]'")
    where = "on the GPU" if facts.gpu else "in Triton's interpreter (correctness) and compiled for sm_90a"
    return Check("triton", OK, f"triton {version}: Triton candidates run {where}")


def check_device_nodes(facts: Facts, dev: str = "/dev") -> Check:
    """The sandbox user (uid 65534, no supplementary groups) must open /dev/nvidia*. Only character
    devices count: a MIG-capable card's /dev/nvidia-caps is a folder (0755), not a node to open."""
    if facts.driver_cuda is None:
        return Check("device nodes", INFO, "no /dev/nvidia* (no NVIDIA driver)")
    nodes = sorted(p for p in os.listdir(dev) if p.startswith("nvidia") and _is_char_device(os.path.join(dev, p)))
    paths = [os.path.join(dev, n) for n in nodes]
    closed = [p for p in paths if not _others_rw(p)]
    missing = [n for n in ("nvidiactl", "nvidia-uvm") if n not in nodes]
    if missing:
        return Check("device nodes", FAIL if "nvidiactl" in missing else WARN,
                     f"missing: {', '.join(os.path.join(dev, m) for m in missing)} (nvidia-uvm is created on the "
                     "first CUDA use by root; a sandbox child as uid 65534 cannot create it)",
                     "run `nvidia-modprobe -u -c=0` (or any CUDA program as root) before evaluating")
    if closed:
        return Check("device nodes", FAIL, f"not readable and writable by others: {', '.join(closed)}",
                     "chmod 0666 those nodes (the sandbox child runs as uid 65534 with no groups)")
    return Check("device nodes", OK, f"{len(paths)} nodes, all open to the sandbox user: {', '.join(nodes[:6])}")


def _is_char_device(path: str) -> bool:
    try:
        return stat.S_ISCHR(os.stat(path).st_mode)
    except OSError:  # a dangling link: nothing to open
        return False


def _others_rw(path: str) -> bool:
    mode = os.stat(path).st_mode
    return bool(mode & stat.S_IROTH and mode & stat.S_IWOTH)


def check_ncu(facts: Facts) -> Check:
    from agentforge.evaluator.hardware import ncu

    binary = ncu.find_ncu()
    if binary is None:
        return Check("ncu", WARN if facts.gpu else INFO, "Nsight Compute (ncu) not found: profiles are "
                     "'unavailable', timing-only feedback", "install Nsight Compute (part of the CUDA toolkit)")
    _, out = _run([binary, "--version"])
    version = next((ln.strip() for ln in out.splitlines() if "Version" in ln), out.strip()[:80])
    restricted = ncu.profiling_restricted()
    if restricted:
        return Check("ncu", WARN, f"{binary}: {version}; the driver lets only admin users read counters "
                     "(RmProfilingAdminOnly: 1), and the sandbox child runs as uid 65534 with no-new-privileges: "
                     "its profiles will say ERR_NVGPUCTRPERM",
                     "load the driver with NVreg_RestrictProfilingToAdminUsers=0 "
                     "(options nvidia NVreg_RestrictProfilingToAdminUsers=0 in /etc/modprobe.d, then reload)")
    return Check("ncu", OK, f"{binary}: {version}" + ("; counters open to all users" if restricted is False else "")
                 + (_metric_coverage(binary) if facts.gpu else ""))


def _metric_coverage(binary: str) -> str:
    """Which of the judge's metrics this GPU lacks (`ncu --query-metrics`): each is dropped before a
    profile runs, rather than found by a failed run and a rerun."""
    from agentforge.evaluator.hardware import ncu

    kept, dropped = ncu.prune_metrics(ncu.CURATED_METRICS, ncu.query_metrics(binary))
    if ncu.query_metrics(binary) is None:
        return "; `ncu --query-metrics` gave no listing: a metric this GPU lacks costs a profile rerun"
    return (f"; {len(kept)} of {len(ncu.CURATED_METRICS)} curated metrics on this GPU"
            + (f" (dropped before each profile: {', '.join(m.split('.')[0] for m in dropped)})" if dropped else ""))


def check_isolation(facts: Facts) -> Check:
    from agentforge.sandbox import isolation

    modes = {mode: isolation.probe(mode) for mode in isolation.ISOLATING_MODES}
    working = [m for m, why in modes.items() if why is None]
    as_root = none_runs_as_root()
    if not working:
        why = "; ".join(f"{m}: {r}" for m, r in modes.items())
        return Check("sandbox", WARN, f"no isolation works here ({why})" + (f"; {as_root}" if as_root else ""),
                     "apt-get install -y bubblewrap")
    return Check("sandbox", OK, f"isolation auto = {working[0]} (working: {', '.join(working)}; both bring "
                 "loopback up in their empty network namespace, for ncu)"
                 + (f"; an explicit `--isolation none` {as_root}" if as_root else ""))


def none_runs_as_root(paths: list[str] | None = None) -> str | None:
    """What `--isolation none` would do as root where the sandbox uid cannot reach the interpreter
    (no mount namespace can mask the ancestor that blocks it): run every candidate as uid 0. None
    when it drops to the sandbox uid, or when this process is not root. `paths`: what the child
    reads (by default this interpreter's, as `isolation.plan` checks them)."""
    from agentforge.sandbox import isolation

    if not isolation.is_root():
        return None
    for path in paths if paths is not None else isolation.child_paths(sys.executable, ()):
        blocked = isolation.blocking_ancestor(path, SANDBOX_UID)
        if blocked:
            return (f"would run candidates as root (uid 0): uid {SANDBOX_UID} cannot traverse {blocked}, "
                    f"above {path}")
    return None


def check_sandbox_gpu(facts: Facts) -> Check:
    """cuInit inside the judge's own confinement (`sandbox/gpu_probe.py`): a mount tree, a uid or a
    limit that hides the GPU shows here, not as every CUDA job's "no CUDA GPU" verdict."""
    if facts.driver_cuda is None:
        return Check("gpu in sandbox", INFO, "needs a GPU (cuInit under the sandbox's confinement)")
    from agentforge.sandbox.gpu_probe import probe

    result = probe("auto")
    where = f"under {result.sandbox or result.mode}"
    if result.ok:
        return Check("gpu in sandbox", OK, f"cuInit 0 {where} as uid {result.uid}: {result.devices} device(s)")
    if result.code is None:
        return Check("gpu in sandbox", WARN, f"the probe could not ask the driver {where}: {result.detail}",
                     "run `python -m agentforge.sandbox.gpu_probe none` to compare without isolation")
    return Check("gpu in sandbox", FAIL, f"cuInit returned {result.code} ({result.detail}) {where}, as uid "
                 f"{result.uid}: every CUDA job's judge would find no GPU",
                 "compare `python -m agentforge.sandbox.gpu_probe none` with bwrap and unshare, and report it; "
                 "meanwhile `--isolation none` runs CUDA jobs without namespaces")


def check_loopback(facts: Facts) -> Check:
    from agentforge.evaluator.hardware import ncu

    if ncu.loopback_works():
        return Check("loopback", OK, "127.0.0.1 reachable (ncu talks to its profiled process over it)")
    return Check("loopback", WARN, "no TCP connection to 127.0.0.1 here: ncu cannot profile",
                 "bring loopback up (ip link set lo up)")


def check_persisting_l2(facts: Facts) -> Check:
    if not facts.gpu:
        return Check("persisting L2", INFO, "needs a GPU (read with cuCtxGetLimit from the driver)")
    from agentforge.evaluator import device_state

    value = device_state.persisting_l2_bytes()
    if value is None:
        return Check("persisting L2", FAIL, "cuCtxGetLimit did not answer: the carve-out check and reset "
                     "cannot run", "check that libcuda.so.1 loads (ldconfig -p | grep libcuda)")
    import torch

    stream = torch.cuda.current_stream().cuda_stream
    if device_state.access_window_bytes(stream) is None:
        return Check("persisting L2", WARN, f"carve-out readable through the driver ({value} bytes now); the driver "
                     f"refused cuStreamGetAttribute on the current stream ({stream or 'the legacy default stream 0'}): "
                     "an access-policy window a candidate sets there is not seen (missing evidence; the carve-out "
                     "reset still runs)", "nothing to do unless a newer driver answers it; the verdict is not failed")
    return Check("persisting L2", OK, f"carve-out and the current stream's access window readable through the "
                 f"driver ({value} bytes of carve-out now)")


CHECKS: tuple[Callable[[Facts], Check], ...] = (
    check_python, check_torch, check_gpu, check_driver, check_nvcc, check_cuda_home, check_cupy, check_triton,
    check_device_nodes, check_ncu, check_isolation, check_sandbox_gpu, check_loopback, check_persisting_l2,
)


def run_checks(facts: Facts | None = None) -> list[Check]:
    """Every check, in order; a check that raises is reported as a failure of that check."""
    facts = facts or gather()
    results = []
    for check in CHECKS:
        try:
            results.append(check(facts))
        except Exception as exc:  # a doctor must finish: one broken probe is one line
            name = check.__name__.removeprefix("check_").replace("_", " ")
            results.append(Check(name, FAIL, f"the check itself failed: {type(exc).__name__}: {exc}"))
    return results


def exit_code(checks: list[Check]) -> int:
    """0 when nothing failed (warnings and a missing GPU included), 2 otherwise."""
    return 2 if any(c.status == FAIL for c in checks) else 0


def render_text(checks: list[Check]) -> str:
    lines = []
    for check in checks:
        lines.append(f"{check.status:<5} {check.name}: {check.detail}")
        if check.fix:
            lines.append(f"      -> {check.fix}")
    failed = sum(c.status == FAIL for c in checks)
    warned = sum(c.status == WARN for c in checks)
    lines.append(f"{failed} failed, {warned} warnings" + ("" if failed else ": ready for what this machine has"))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m agentforge.doctor")
    parser.add_argument("--json", action="store_true", help="one JSON object instead of lines")
    args = parser.parse_args(argv)
    checks = run_checks()
    if args.json:
        print(json.dumps({"checks": [asdict(c) for c in checks], "exit_code": exit_code(checks)}, indent=2))
    else:
        print(render_text(checks))
    return exit_code(checks)


if __name__ == "__main__":
    sys.exit(main())
