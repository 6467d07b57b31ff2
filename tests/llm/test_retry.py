"""The retry layer on its own: what is retried, how long it waits, when it gives up."""

from __future__ import annotations

import pytest

from agentforge.llm.base import ProviderError
from agentforge.llm.retry import Retryable, RetryPolicy, call_with_retries, retry_after_s


def test_backoff_is_exponential_and_capped_and_honours_retry_after():
    policy = RetryPolicy(base_s=1.0, cap_s=10.0)
    assert [policy.delay(n, None) for n in range(5)] == [1.0, 2.0, 4.0, 8.0, 10.0]
    assert policy.delay(0, 3.5) == 3.5 and policy.delay(0, 600.0) == 10.0


def test_retry_after_forms():
    assert retry_after_s({"retry-after": "7"}) == 7.0
    assert retry_after_s({"retry-after-ms": "250"}) == 0.25
    assert retry_after_s({"retry-after": "Wed, 21 Oct 2015 07:28:05 GMT"}, now=1445412480.0) == 5.0
    assert retry_after_s({"retry-after": "soon"}) is None and retry_after_s({}) is None


def test_gives_up_after_max_retries_and_never_retries_the_unclassified():
    sleeps: list[float] = []
    calls = iter([ConnectionError("down"), ConnectionError("down"), "ok"])

    def flaky():
        value = next(calls)
        if isinstance(value, Exception):
            raise value
        return value

    def classify(exc):
        return Retryable("connection") if isinstance(exc, ConnectionError) else None

    assert call_with_retries(flaky, classify, RetryPolicy(max_retries=2), sleeps.append) == ("ok", 2)
    assert sleeps == [1.0, 2.0]
    with pytest.raises(ProviderError, match="ValueError"):
        call_with_retries(lambda: (_ for _ in ()).throw(ValueError("bad")), classify, RetryPolicy(), sleeps.append)
