"""Native builds the judge makes for the candidate's worker, so that "the candidate's own code" means
code the judge built (issue 31, item 4).

Where a job is timed on a CPU, the worker's `load_cpp` and `load_inline` do not compile: they send the
judge a `messages.Build` mid-request (`native.set_judge_builder`). The judge has the control worker
(`judge.control`: hardened and sealed like the candidate's worker, never given candidate code) build
it in a private folder and send back the artifact's bytes; the judge writes them into its own store,
a folder of the build cache that only the judge's uid may write (`prepare_store`: made by the
sandbox's parent, owned by the judge's uid), keeps the file's SHA-256, and hands the worker the path
to load. The native sampler then counts a mapped file as the candidate's own only when its content
hashes to an artifact this judge handed out (`NativeSampler.set_judge_builds`): a library the worker
compiled itself, copied or renamed into the build cache counts by what it is (a BLAS, a known
library, or other code), not as the candidate's. The judge's record of each build (its sources and
flags as asked) is the evidence the build rules read (`integrity.build_findings`), not the worker's.

A store entry is keyed by the request's content and read again only where the judge's uid owns it
and nobody else may write it. Bounds: what a build links in statically (`extra_ldflags`) is inside
the artifact, and counts as the candidate's own.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentforge.evaluator import build_cache, native
from agentforge.evaluator.build_cache import judges, store_root
from agentforge.evaluator.protocol import messages

MAX_BUILDS = 32  # per job: a worker that asks for more is refused
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,100}")
_ARTIFACT = "artifact.so"


@dataclass
class Served:
    """One build as the judge served it: what was asked (the evidence for the build rules, with the
    attributes of `native.BuildEvent` they read) and what came of it."""

    kind: str
    name: str
    sources: dict[str, str]
    flags: tuple[str, ...]
    ok: bool
    cached: bool
    seconds: float
    sha256: str = ""
    error: str = ""

    def plain(self) -> dict[str, Any]:
        return {"kind": self.kind, "name": self.name, "ok": self.ok, "cached": self.cached,
                "seconds": round(self.seconds, 3), "sha256": self.sha256[:16], "error": self.error[:300]}


@dataclass
class JudgeBuilds:
    """The judge's builds for one worker: the control that builds, the store, and the hashes of every
    artifact handed out."""

    control: Any  # WorkerClient of the control worker
    store: Path
    artifacts: dict[str, str] = field(default_factory=dict)  # sha256 -> path handed out
    served: list[Served] = field(default_factory=list)
    closed: str = ""  # why no more builds are served (the worker sealed, the control lost)
    # Whether a stored artifact is served again: not where the worker runs as the judge's uid (started
    # without root), which could write the store and plant an artifact at a key it can compute.
    reuse: bool = True

    @classmethod
    def open(cls, control: Any, cache_dir: str | os.PathLike[str]) -> tuple[JudgeBuilds | None, str]:
        """(builds, "") where the store is the judge's; (None, why) where it is not usable."""
        root = store_root(cache_dir)
        if not root.exists():
            try:
                root.mkdir(mode=0o755, parents=True)
            except OSError as exc:
                return None, f"built by the worker: the judge's build store {root} cannot be made: {exc}"
        if not judges(root):
            return None, f"built by the worker: the judge's build store {root} is not the judge's alone"
        return cls(control, root), ""

    def serve(self, raw: dict[str, Any]) -> dict[str, Any]:
        """The answer to one `Build` the worker asked for: {"ok": True, "path", ...} or why not."""
        started = time.perf_counter()
        try:
            build = messages.Build.parse({k: v for k, v in raw.items() if k != "id"})
        except messages.ProtocolError as exc:
            return {"op": "built", "ok": False, "error": f"a malformed build request: {exc}"[:2000]}
        sources = {"cpp": "\n".join(build.sources), "cuda": "\n".join(build.cuda_sources)}
        record = Served(build.kind, build.name, sources, _flags(build), False, False, 0.0)
        self.served.append(record)
        refused = self._refused(build)
        if refused:
            record.error = refused
            return {"op": "built", "ok": False, "error": refused}
        key = build_cache.build_key(f"judge-{build.kind}", [json.dumps(build.to_fields(), sort_keys=True, default=str)],
                                    [], _toolchain())
        if not self.reuse:  # the worker's uid may write the store: nothing in it is read back
            key = f"{key}-{os.urandom(6).hex()}"
        target = self.store / build.kind / key
        answer = (self._cached(target) if self.reuse else None) or self._build(build, target)
        digest = answer.pop("sha256", "")
        record.ok, record.cached = answer["ok"], answer.get("cached") is True
        record.seconds, record.error = time.perf_counter() - started, str(answer.get("error", ""))
        if record.ok:
            record.sha256 = digest
            self.artifacts[digest] = str(answer["path"])
            answer["seconds"] = record.seconds
        return {"op": "built", **answer}

    def _refused(self, build: messages.Build) -> str:
        if self.closed:
            return f"no builds now: {self.closed}"
        if len(self.served) > MAX_BUILDS:
            return f"no more than {MAX_BUILDS} builds per evaluation"
        if build.kind not in ("lean-cpp", "load_inline"):
            return f"no such build kind {build.kind!r}"
        if not _NAME.fullmatch(build.name):
            return f"the build's name {build.name[:60]!r} is not an identifier"
        if self.control is None or self.control.closed:
            return "the judge's builder (the control worker) is gone"
        return ""

    def _cached(self, target: Path) -> dict[str, Any] | None:
        artifact = target / _ARTIFACT
        if judges(target) and judges(artifact) and (target / "log.txt").is_file():
            return {"ok": True, "path": str(artifact), "cached": True, "log": (target / "log.txt").read_text()[-20000:],
                    "pch": (target / "pch.txt").read_text() if (target / "pch.txt").is_file() else "",
                    "sha256": hashlib.sha256(artifact.read_bytes()).hexdigest()}
        return None

    def _build(self, build: messages.Build, target: Path) -> dict[str, Any]:
        try:
            reply = self.control.send(build)
        except (messages.WorkerBroken, messages.CandidateRaised) as exc:
            self.closed = f"the control worker failed a build: {exc}"
            return {"ok": False, "error": self.closed}
        log, pch = str(reply.get("log", ""))[-20000:], str(reply.get("pch", ""))[:2000]
        if reply.get("ok") is not True:
            return {"ok": False, "error": str(reply.get("error", "the build failed"))[:2000], "log": log, "pch": pch}
        data = reply.get("artifact")
        if not hasattr(data, "numpy") or data.dtype.itemsize != 1 or data.dim() != 1:
            return {"ok": False, "error": "the control worker sent no artifact", "log": log}
        if not target.parent.is_dir():
            try:
                target.parent.mkdir()
                target.parent.chmod(0o755)  # the judge's umask may be 077: the worker reads what it is handed
            except FileExistsError:  # made by another job's judge meanwhile (two jobs, one new kind)
                pass
        staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=target.parent))
        content = data.numpy().tobytes()
        (staging / _ARTIFACT).write_bytes(content)
        (staging / "log.txt").write_text(log)
        (staging / "pch.txt").write_text(pch)
        for path in staging.iterdir():
            path.chmod(0o644)
        staging.chmod(0o755)
        try:
            os.rename(staging, target)
        except OSError:  # built and stored by another job meanwhile: its entry, if it is the judge's
            shutil.rmtree(staging, ignore_errors=True)
            stored = self._cached(target)
            return stored or {"ok": False, "error": "the judge's store entry is not the judge's", "log": log}
        # The hash of the bytes the control built, not of the file read back: a file is the sampler's
        # to check when mapped, whatever happened to it in between.
        return {"ok": True, "path": str(target / _ARTIFACT), "cached": False, "log": log, "pch": pch,
                "sha256": hashlib.sha256(content).hexdigest()}

    def close(self, why: str) -> None:
        """No builds from now on (the worker is sealed for timing: a build then is refused)."""
        self.closed = self.closed or why

    def report(self) -> dict[str, Any]:
        return {"store": str(self.store), "builds": [s.plain() for s in self.served[:MAX_BUILDS]],
                "closed": self.closed}


def _flags(build: messages.Build) -> tuple[str, ...]:
    return (*build.extra_cflags, "|", *build.extra_cuda_cflags, "|", *build.extra_ldflags)


_TOOLCHAIN: list[str] = []


def _toolchain() -> str:
    """torch's version and the compiler's, once per process."""
    if not _TOOLCHAIN:
        import torch

        try:
            cxx = subprocess.run(["g++", "--version"], capture_output=True, text=True, timeout=30).stdout.split("\n")[0]
        except (OSError, subprocess.SubprocessError):
            cxx = "g++"
        _TOOLCHAIN.append(f"torch-{torch.__version__} {cxx} {native.DEFAULT_CXX_FLAGS}")
    return _TOOLCHAIN[0]
