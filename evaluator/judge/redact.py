"""Secrets never leave the judge inside text a candidate could have shaped.

Every free-text field of a verdict that carries something the worker said (error messages,
tracebacks, compiler logs, flag evidence, correctness messages) passes through `redact_result`
before the verdict leaves the judge, so a candidate that somehow learned a secret (a seed, a
hold-out shape, a nonce) cannot carry it into a store, a report or a log.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from agentforge.evaluator.result import EvalResult

MARK = "[redacted]"
MIN_SECRET_CHARS = 6  # shorter strings are too common to scrub without mangling honest text


def secret_strings(seeds: dict[str, int], extra: Iterable[str] = ()) -> tuple[str, ...]:
    found = {str(v) for v in seeds.values()} | set(extra)
    return tuple(sorted((s for s in found if len(s) >= MIN_SECRET_CHARS), key=len, reverse=True))


def redact_text(text: str, secrets: tuple[str, ...]) -> str:
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, MARK)
    return text


def _scrub(value: Any, secrets: tuple[str, ...]) -> Any:
    if isinstance(value, str):
        return redact_text(value, secrets)
    if isinstance(value, tuple):
        return tuple(_scrub(v, secrets) for v in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {f.name: _scrub(getattr(value, f.name), secrets) for f in dataclasses.fields(value)
                   if isinstance(getattr(value, f.name), str | tuple)
                   or dataclasses.is_dataclass(getattr(value, f.name))}
        return dataclasses.replace(value, **changes)
    return value


def redact_result(result: EvalResult, secrets: tuple[str, ...]) -> EvalResult:
    """The verdict with every secret string replaced in the fields the candidate could shape."""
    if not secrets:
        return result
    return dataclasses.replace(
        result,
        error=_scrub(result.error, secrets) if result.error is not None else None,
        compile=_scrub(result.compile, secrets) if result.compile is not None else None,
        flags=_scrub(result.flags, secrets),
        correctness=_scrub(result.correctness, secrets),
    )
