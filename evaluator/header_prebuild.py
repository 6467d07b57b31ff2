"""Precompiled torch headers for `load_inline` candidates, built by the trusted parent in the background.

Parsing `torch/extension.h` is most of a cold KernelBench `load_inline` build (about 33 s of it on
two cores; 7 s with the header precompiled). The sandbox cannot make that header for itself: the
file (about 800 MB) is over its file-size limit, and one written there would be read by later
candidates' builds, so a hostile candidate could plant a poisoned one. Instead the parent, which
never runs candidate code, builds it into the build cache's trusted tree (`build_cache.TRUSTED_TREE`),
which the sandbox uid may read and not write. The build runs detached: jobs that start before it is
ready compile without it, as before, and every later one finds it (`native.extension_pch`).

The flags to precompile for are read from the candidate's source text without running it
(`flag_sets`): `extra_cflags` and `extra_include_paths` given as literals, and whether CUDA sources
are passed. Anything not literal falls back to torch's defaults; a header that does not match a
build is simply not used by g++. A CUDA flag set also serves compile-only CUDA verdicts on a
machine without a GPU: their main.cpp is compiled with it (`compile_only._main_pch`), the local
toolkit standing in for the one a CPU-only torch does not know.

    python -m agentforge.evaluator.header_prebuild --cache DIR --spec '{"cflags": [], "includes": [], "cuda": false}'
"""

from __future__ import annotations

import argparse
import ast
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from agentforge.evaluator import build_cache

LOG_NAME = "prebuild.log"


@dataclass(frozen=True)
class FlagSet:
    """What a precompiled header depends on among the `load_inline` arguments."""

    cflags: tuple[str, ...] = ()
    includes: tuple[str, ...] = ()
    cuda: bool = False

    def digest(self) -> str:
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:16]


def flag_sets(source: str) -> list[FlagSet]:
    """The distinct flag sets of the `load_inline(...)` calls in `source`, read from its syntax tree
    (nothing is executed). Empty when the source has none or does not parse."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    found: list[FlagSet] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        if name != "load_inline":
            continue
        words = {kw.arg: kw.value for kw in node.keywords if kw.arg}
        flags = FlagSet(cflags=_literal_strings(words.get("extra_cflags")),
                        includes=_literal_strings(words.get("extra_include_paths")),
                        cuda=_passes_cuda(node, words))
        if flags not in found:
            found.append(flags)
    return found


def _literal_strings(node: ast.expr | None) -> tuple[str, ...]:
    if node is None:
        return ()
    try:
        value = ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return ()
    if isinstance(value, str):
        return (value,)
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return tuple(value)
    return ()


def _passes_cuda(call: ast.Call, words: dict[str, ast.expr]) -> bool:
    if "with_cuda" in words:
        try:
            return bool(ast.literal_eval(words["with_cuda"]))
        except (ValueError, TypeError, SyntaxError):
            pass
    value = words.get("cuda_sources", call.args[2] if len(call.args) > 2 else None)
    return value is not None and not (isinstance(value, ast.Constant) and value.value in (None, "", ()))


def start(cache_dir: str, source: str, python: str = sys.executable, cuda_allowed: bool = True,
          emulated: bool = False) -> list[FlagSet]:
    """Start a detached builder for each flag set of `source` whose header is not built yet, and
    return the sets it was started for. The builder exits at once when another holds its lock.
    `emulated`: the job's CUDA sources will run in the CPU emulation (no GPU here), whose build
    reads the header with flags of its own (`emulation_flag_set`)."""
    return prebuild(cache_dir, wanted_sets(source, cuda_allowed, emulated), python)


def wanted_sets(source: str, cuda_allowed: bool = True, emulated: bool = False) -> list[FlagSet]:
    """The flag sets `start` builds for `source`."""
    wanted = []
    for flags in flag_sets(source):
        if flags.cuda and not cuda_allowed:
            continue
        wanted.append(flags)
        if flags.cuda and emulated:
            wanted.append(emulation_flag_set(flags))
    return wanted


def prebuild(cache_dir: str, sets: list[FlagSet], python: str = sys.executable) -> list[FlagSet]:
    """Start a detached builder for each of `sets` not built yet; the sets it was started for."""
    started = []
    for flags in dict.fromkeys(sets):
        if _marker(cache_dir, flags).exists():
            continue
        trusted = Path(cache_dir) / build_cache.TRUSTED_TREE
        trusted.mkdir(parents=True, exist_ok=True)
        trusted.chmod(0o755)
        with open(trusted / LOG_NAME, "ab") as log:
            subprocess.Popen([python, "-m", "agentforge.evaluator.header_prebuild", "--cache", cache_dir,
                              "--spec", json.dumps(asdict(flags))],
                             stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
        started.append(flags)
    return started


def emulation_flag_set(flags: FlagSet) -> FlagSet:
    """The flags the CPU emulation builds a CUDA `load_inline` call with (`cuda_emulation.build`):
    its own cflags and the call's -D/-U/-I, its headers first on the include path, no CUDA."""
    from agentforge.evaluator.cuda_emulation.build import EMULATION_CFLAGS, INCLUDE_DIR

    return FlagSet(cflags=(*EMULATION_CFLAGS, *(f for f in flags.cflags if f.startswith(("-D", "-U", "-I")))),
                   includes=(str(INCLUDE_DIR), *flags.includes), cuda=False)


def link_prebuilt(source_cache: str, cache_dir: str) -> list[str]:
    """Link the precompiled headers ready in `source_cache`'s trusted tree into `cache_dir`'s (hard
    links: the sandbox binds only `cache_dir`), for those not there yet; the keys linked. For a
    cache that starts empty (a test's, a CI job's, a Ray worker's) beside one whose parent built
    them. The source must be a trusted tree too: what is linked is read by every later build."""
    source = Path(source_cache) / build_cache.TRUSTED_TREE / "pch"
    target = Path(cache_dir) / build_cache.TRUSTED_TREE / "pch"
    if not source.is_dir() or source.resolve() == target.resolve():
        return []
    linked = []
    for entry in sorted(source.iterdir()):
        if entry.name.startswith(".") or not (entry / "READY").is_file() or (target / entry.name).exists():
            continue
        staging = Path(tempfile.mkdtemp(prefix=".linking-", dir=_made(target)))
        try:
            for path in sorted(entry.rglob("*")):
                to = staging / path.relative_to(entry)
                if path.is_dir():
                    to.mkdir()
                elif path.name != "READY":
                    os.link(path, to)
            (staging / "READY").write_text("ok\n")  # last, as `build_cache.publish` does
            _readable_by_all(staging)
            os.rename(staging, target / entry.name)
            linked.append(entry.name)
        except OSError:  # another filesystem (no hard link), or linked by another job meanwhile
            shutil.rmtree(staging, ignore_errors=True)
    return linked


def _made(folder: Path) -> Path:
    """`folder` and the trusted tree above it, made readable (not writable) by the sandbox's uid."""
    folder.mkdir(parents=True, exist_ok=True)
    for path in (folder.parent, folder):
        path.chmod(0o755)
    return folder


def _marker(cache_dir: str, flags: FlagSet) -> Path:
    """Written when a builder finished with this flag set (built, or found it cannot be)."""
    return Path(cache_dir) / build_cache.TRUSTED_TREE / f".done-{flags.digest()}"


def build(cache_dir: str, flags: FlagSet) -> str:
    """Build the header for `flags` into the trusted tree (unless another builder holds the set's
    lock); a note for the log."""
    from agentforge.evaluator import native

    trusted = Path(cache_dir) / build_cache.TRUSTED_TREE
    trusted.mkdir(parents=True, exist_ok=True)
    with (build_cache.writing_trusted_tree(cache_dir),
          open(trusted / f".prebuild-{flags.digest()}.lock", "w") as handle):
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return "another builder has this flag set"
        try:
            folder, note = native.prepare_extension_pch(flags.cflags, flags.includes, with_cuda=flags.cuda)
        except Exception as exc:  # recorded once, so later jobs do not start a builder again
            folder, note = None, f"{type(exc).__name__}: {exc}"
        _readable_by_all(trusted)
        _marker(cache_dir, flags).write_text(note + "\n")
        return note if folder else f"not built: {note}"


def _readable_by_all(root: Path) -> None:
    """The sandbox's uid reads the tree; staging folders are created private (0700)."""
    for folder, _dirs, files in os.walk(root):
        os.chmod(folder, 0o755)
        for name in files:
            os.chmod(os.path.join(folder, name), 0o644)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", required=True, help="the build cache the sandbox binds")
    parser.add_argument("--spec", required=True, help="a FlagSet as JSON")
    args = parser.parse_args(argv)
    # In the background of evaluations that time kernels on the same cores: it yields to them.
    os.nice(10)
    spec = json.loads(args.spec)
    flags = FlagSet(cflags=tuple(spec.get("cflags", ())), includes=tuple(spec.get("includes", ())),
                    cuda=bool(spec.get("cuda", False)))
    print(f"{os.getpid()} {flags}: {build(args.cache, flags)}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
