"""Run under a CUDA build of torch on a machine without a GPU (`make cuda-venv`): the real
`load_inline` CUDA builds of the GPU path, which a CPU-only torch cannot link.

    python cuda_torch_driver.py load SOURCE_FILE CACHE [--as-sandbox-user]
    python cuda_torch_driver.py prebuild TASK CACHE_PARENT

Prints one JSON object on its last line. Imports only the standard library, torch and the project.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
SANDBOX_UID = 65534


def load(source_file: str, cache: str, as_sandbox_user: bool) -> dict[str, Any]:
    """Execute a candidate as the build stage does (`load_candidate`, builds into `cache`)."""
    if as_sandbox_user:
        os.setgroups([])
        os.setgid(SANDBOX_UID)
        os.setuid(SANDBOX_UID)
    from agentforge.evaluator import build_cache
    from agentforge.evaluator.worker.loading import load_candidate
    from torch.utils import cpp_extension

    build_cache.set_cache_root(cache)
    started = time.monotonic()
    outcome = load_candidate(Path(source_file).read_text(), "cuda", False, "sm_90a", "agentforge_candidate_under_test")
    libraries = sorted(str(p) for p in Path(cache).rglob("*.so"))
    return {"ok": outcome.compile.ok, "path": outcome.compile.path, "cached": outcome.compile.cached,
            "seconds": round(time.monotonic() - started, 1), "has_model": outcome.model_cls is not None,
            "error": None if outcome.error is None else f"{outcome.error.type}: {outcome.error.message}",
            "log_tail": outcome.compile.log_tail[-3000:], "torch_cuda_home": cpp_extension.CUDA_HOME,
            "libraries": libraries, "uid": os.getuid()}


def prebuild(task: str, parent: str) -> dict[str, Any]:
    """`make gpu-check`'s prebuild of one reference kernel, its cache under `parent`."""
    scripts = str(REPO / "scripts")
    # its pool's spawned workers import the module by name to find the function they run
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [scripts, os.environ.get("PYTHONPATH")]))
    sys.path.insert(0, scripts)
    import gpu_check
    gpu_check.WORK = Path(parent)
    from agentforge.kernel_library import find_kernel

    kernel = find_kernel(task, "cuda", gpu="h100")
    assert kernel is not None, task
    return gpu_check.prebuild([kernel], workers=1)


def main() -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    one = sub.add_parser("load")
    one.add_argument("source_file")
    one.add_argument("cache")
    one.add_argument("--as-sandbox-user", action="store_true")
    pre = sub.add_parser("prebuild")
    pre.add_argument("task")
    pre.add_argument("parent")
    args = parser.parse_args()
    os.environ.setdefault("TORCH_CUDA_ARCH_LIST", "9.0a")  # no GPU to ask: the H100's
    if args.command == "load":
        result = load(args.source_file, args.cache, args.as_sandbox_user)
    else:
        result = prebuild(args.task, args.parent)
    sys.stdout.flush()
    print(json.dumps(result))


if __name__ == "__main__":
    main()
