"""Bounded retries with exponential backoff for rate limits, server errors and lost connections.

Each provider says which of its SDK's exceptions are worth retrying (and the server's
Retry-After, when it sent one) through a `classify` function; everything else fails at once.
The SDKs' own retries are switched off so that this is the one place retry policy lives.
"""

from __future__ import annotations

import email.utils
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from agentforge.llm.base import ProviderError, ProviderUnavailable

T = TypeVar("T")


@dataclass(frozen=True)
class Retryable:
    """A failure worth another try; `after_s` is the server's Retry-After when it gave one."""

    reason: str
    after_s: float | None = None


@dataclass(frozen=True)
class RetryPolicy:
    max_retries: int = 5
    base_s: float = 1.0
    cap_s: float = 60.0  # no single wait is longer, whatever Retry-After says

    def delay(self, attempt: int, after_s: float | None) -> float:
        wanted = after_s if after_s is not None else self.base_s * (2**attempt)
        return max(0.0, min(self.cap_s, wanted))


def call_with_retries(
    call: Callable[[], T],
    classify: Callable[[BaseException], Retryable | None],
    policy: RetryPolicy,
    sleep: Callable[[float], None] = time.sleep,
    what: str = "LLM call",
    on_retry: Callable[[str], None] | None = None,
) -> tuple[T, int]:
    """Run `call`, retrying what `classify` marks retryable; returns (result, retries used).
    Raises ProviderError when the failure is not retryable, ProviderUnavailable when the retries
    ran out. `on_retry`
    hears one line before each wait, so that a person sees why nothing is happening."""
    attempt = 0
    while True:
        try:
            return call(), attempt
        except Exception as exc:  # the SDK's errors; classify decides
            verdict = classify(exc)
            if verdict is None:
                raise ProviderError(f"{what} failed: {type(exc).__name__}: {exc}") from exc
            if attempt >= policy.max_retries:
                raise ProviderUnavailable(
                    f"{what} failed after {attempt} retries ({verdict.reason}): {exc}"
                ) from exc
            wait = policy.delay(attempt, verdict.after_s)
            if on_retry is not None:
                on_retry(f"{what}: {verdict.reason}; retry {attempt + 1} of {policy.max_retries} in {wait:.0f} s")
            sleep(wait)
            attempt += 1


def retry_after_s(headers: Mapping[str, str] | None, now: float | None = None) -> float | None:
    """The server's requested wait from `retry-after-ms` or `retry-after` (seconds or HTTP date)."""
    if not headers:
        return None
    millis = headers.get("retry-after-ms")
    if millis:
        try:
            return float(millis) / 1000.0
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return float(value)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))
