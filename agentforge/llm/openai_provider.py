"""OpenAI's chat completions API, and any server that speaks it (vLLM, SGLang, Ollama, llama.cpp)
when `provider.base_url` points at it."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from agentforge.llm.base import Completion, Message, ProviderError, Usage
from agentforge.llm.pricing import PriceTable
from agentforge.llm.retry import Retryable, RetryPolicy, call_with_retries, retry_after_s
from agentforge.settings import ProviderSettings

DEFAULT_MODEL = "gpt-5"
# Reasoning models accept only the default temperature.
_FIXED_TEMPERATURE_PREFIXES = ("o1", "o3", "o4", "gpt-5")


class OpenAIProvider:
    name = "openai"

    def __init__(
        self, settings: ProviderSettings, prices: PriceTable | None = None,
        sleep: Callable[[float], None] = time.sleep, client: Any = None,
    ):
        import openai

        if client is None and not settings.api_key and not settings.base_url:
            raise ProviderError(
                "the openai provider needs a key: set OPENAI_API_KEY (or AGENTFORGE_PROVIDER_API_KEY), "
                "or --base-url for a local OpenAI-compatible server"
            )
        self._openai = openai
        self.settings = settings
        self.prices = prices or PriceTable()
        self.sleep = sleep
        # The SDK's retries are off: retry.py is the one retry policy.
        self.client = client or openai.OpenAI(
            api_key=settings.api_key or "unused", base_url=settings.base_url,
            timeout=settings.timeout_s, max_retries=0,
        )
        self.policy = RetryPolicy(max_retries=settings.max_retries)

    def model_for(self, role: str) -> str:
        if role == "judge" and self.settings.judge_model:
            return self.settings.judge_model
        return self.settings.model or DEFAULT_MODEL

    def complete(
        self, messages: list[Message], *, model: str | None = None, role: str = "coder",
        max_tokens: int | None = None, temperature: float | None = None,
    ) -> Completion:
        model = model or self.model_for(role)
        kwargs: dict[str, Any] = {
            "model": model, "messages": [{"role": m.role, "content": m.content} for m in messages],
        }
        limit = max_tokens or self.settings.max_tokens
        # OpenAI's own API wants max_completion_tokens; compatible servers know max_tokens.
        kwargs["max_tokens" if self.settings.base_url else "max_completion_tokens"] = limit
        temp = self.settings.temperature if temperature is None else temperature
        if not model.startswith(_FIXED_TEMPERATURE_PREFIXES):
            kwargs["temperature"] = temp
        response, retries = call_with_retries(
            lambda: self.client.chat.completions.create(**kwargs), self._classify, self.policy,
            self.sleep, what=f"openai {model}",
        )
        if not response.choices:
            raise ProviderError(f"openai {model} returned no choices")
        text = response.choices[0].message.content or ""
        usage = response.usage
        tokens_in = int(getattr(usage, "prompt_tokens", 0) or 0)
        tokens_out = int(getattr(usage, "completion_tokens", 0) or 0)
        return Completion(
            text=text, model=model, retries=retries,
            usage=Usage(tokens_in, tokens_out, self.prices.cost(model, tokens_in, tokens_out)),
        )

    def _classify(self, exc: BaseException) -> Retryable | None:
        openai = self._openai
        if isinstance(exc, openai.RateLimitError):
            return Retryable("rate limited (429)", retry_after_s(exc.response.headers))
        if isinstance(exc, openai.APIStatusError) and exc.status_code >= 500:
            return Retryable(f"server error {exc.status_code}", retry_after_s(exc.response.headers))
        if isinstance(exc, openai.APIConnectionError):  # includes timeouts
            return Retryable("connection error")
        return None
