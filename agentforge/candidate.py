"""A candidate kernel: source text in KernelBench's answer format, its backend, its provenance.

Extraction of code from an LLM reply lives here and nowhere else. Standard library only: the
sandbox child on a bare GPU image reads candidates too.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import Any

BACKENDS = ("cuda", "triton", "cpu")


@dataclass(frozen=True)
class Provenance:
    """Where a candidate came from: which model wrote it, in which round, from which parent."""

    source: str = "user"  # user | llm | library | file
    model: str | None = None
    round: int | None = None
    parent: str | None = None  # code hash of the candidate it was derived from
    prompt_version: str | None = None
    note: str | None = None


@dataclass(frozen=True)
class Candidate:
    """A module defining `ModelNew`, and the backend its kernels target."""

    source: str
    backend: str = "cuda"
    provenance: Provenance = field(default_factory=Provenance)

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ValueError(f"unknown backend {self.backend!r}; choose one of {', '.join(BACKENDS)}")

    @property
    def code_hash(self) -> str:
        return code_hash(self.source)

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "backend": self.backend, "provenance": vars(self.provenance).copy()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Candidate:
        return cls(
            source=data["source"], backend=data.get("backend", "cuda"),
            provenance=Provenance(**data.get("provenance", {})),
        )


def guess_backend(source: str) -> str:
    """The backend a candidate's source targets: Triton, CUDA (load_inline with cuda_sources,
    CuPy, `__global__`), else the CPU."""
    if "@triton.jit" in source or "import triton" in source:
        return "triton"
    if "cuda_sources" in source or "__global__" in source or "import cupy" in source:
        return "cuda"
    return "cpu"


def code_hash(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()[:16]


_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)```", re.S)


class NoCodeError(ValueError):
    """An LLM reply that holds no usable `ModelNew` module."""


def extract_code(reply: str) -> str:
    """The Python module defining `ModelNew` in an LLM reply.

    Prefers the last fenced block that defines `ModelNew` (models often show a draft first),
    then any last python block, then the bare reply if it is itself such a module.
    Raises NoCodeError saying what was missing.
    """
    blocks = [(lang.lower(), body) for lang, body in _FENCE.findall(reply)]
    defining = [body for _, body in blocks if "class ModelNew" in body]
    if defining:
        return defining[-1].strip() + "\n"
    if "class ModelNew" in reply and not blocks:
        return reply.strip() + "\n"
    if blocks:
        raise NoCodeError("the reply has code blocks but none defines `class ModelNew`")
    raise NoCodeError("the reply contains no code block")
