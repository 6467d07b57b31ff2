"""Anthropic's Messages API through its native SDK."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from agentforge.llm.base import Completion, Message, ProviderError, Usage
from agentforge.llm.pricing import PriceTable
from agentforge.llm.retry import Retryable, RetryPolicy, call_with_retries, retry_after_s
from agentforge.settings import ProviderSettings

DEFAULT_MODEL = "claude-sonnet-4-6"


class AnthropicProvider:
    name = "anthropic"

    def __init__(
        self, settings: ProviderSettings, prices: PriceTable | None = None,
        sleep: Callable[[float], None] = time.sleep, client: Any = None,
    ):
        import anthropic

        if client is None and not settings.api_key:
            raise ProviderError(
                "the anthropic provider needs a key: set ANTHROPIC_API_KEY (or AGENTFORGE_PROVIDER_API_KEY)"
            )
        self._anthropic = anthropic
        self.settings = settings
        self.prices = prices or PriceTable()
        self.sleep = sleep
        self.client = client or anthropic.Anthropic(
            api_key=settings.api_key, base_url=settings.base_url, timeout=settings.timeout_s, max_retries=0,
        )
        self.policy = RetryPolicy(max_retries=settings.max_retries)
        self.on_retry: Callable[[str], None] | None = None  # hears each retry's one-line reason

    def model_for(self, role: str) -> str:
        if role == "judge" and self.settings.judge_model:
            return self.settings.judge_model
        return self.settings.model or DEFAULT_MODEL

    def complete(
        self, messages: list[Message], *, model: str | None = None, role: str = "coder",
        max_tokens: int | None = None, temperature: float | None = None,
    ) -> Completion:
        model = model or self.model_for(role)
        system = "\n\n".join(m.content for m in messages if m.role == "system")
        kwargs: dict[str, Any] = {
            "model": model,
            "max_tokens": max_tokens or self.settings.max_tokens,
            "messages": [{"role": m.role, "content": m.content} for m in messages if m.role != "system"],
        }
        if system:
            kwargs["system"] = system
        # The current Messages API takes no sampling temperature; `temperature` is accepted for the
        # protocol and ignored.
        response, retries = call_with_retries(
            lambda: self.client.messages.create(**kwargs), self._classify, self.policy, self.sleep,
            what=f"anthropic {model}", on_retry=self.on_retry,
        )
        text = "".join(block.text for block in response.content if getattr(block, "type", "") == "text")
        tokens_in = int(response.usage.input_tokens or 0)
        tokens_out = int(response.usage.output_tokens or 0)
        return Completion(
            text=text, model=model, retries=retries,
            usage=Usage(tokens_in, tokens_out, self.prices.cost(model, tokens_in, tokens_out)),
        )

    def _classify(self, exc: BaseException) -> Retryable | None:
        anthropic = self._anthropic
        if isinstance(exc, anthropic.RateLimitError):
            return Retryable("rate limited (429)", retry_after_s(exc.response.headers))
        if isinstance(exc, anthropic.APIStatusError) and exc.status_code >= 500:  # 529 overloaded too
            return Retryable(f"server error {exc.status_code}", retry_after_s(exc.response.headers))
        if isinstance(exc, anthropic.APIConnectionError):
            return Retryable("connection error")
        return None
