"""OpenAI's chat completions API, and any server that speaks it (vLLM, SGLang, Ollama, llama.cpp)
when `provider.base_url` points at it.

A server named by base URL is asked, once, what it serves (`GET /models`): its model when none is
configured (a local server does not serve `gpt-5`), and its context window when it reports one
(vLLM's `max_model_len`, llama.cpp's `n_ctx` from `/props`, ...), so that a reply is never asked
for more tokens than the context leaves after the prompt, and a prompt too long for the context
is cut to fit (context_fit.py) rather than refused by the server."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from agentforge.llm.base import Completion, Message, ProviderError, Usage
from agentforge.llm.context_fit import estimate_tokens, fit_messages
from agentforge.llm.pricing import PriceTable
from agentforge.llm.retry import Retryable, RetryPolicy, call_with_retries, retry_after_s
from agentforge.settings import ProviderSettings

DEFAULT_MODEL = "gpt-5"
# Whatever the context leaves, a reply may have at least this many tokens (a kernel needs room).
MIN_REPLY_TOKENS = 256
# Prompt tokens estimated from characters: code and English run 3-4 characters a token; 3 errs
# toward a shorter reply rather than a request the server refuses.
CHARS_PER_TOKEN = 3
# Keys under which servers report a model's context window in their /models entries.
_CONTEXT_KEYS = ("max_model_len", "context_length", "context_window", "max_context_length", "n_ctx")
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
        self.on_retry: Callable[[str], None] | None = None  # hears each retry's one-line reason
        self._served: tuple[str | None, int | None] | None = None  # (model, context) the server reports
        self.prompt_chars_cut = 0  # characters cut from prompts to fit the server's context, all calls

    def model_for(self, role: str) -> str:
        if role == "judge" and self.settings.judge_model:
            return self.settings.judge_model
        if self.settings.model:
            return self.settings.model
        if self.settings.base_url:
            model, _ = self.served()
            if model is None:
                raise ProviderError(f"the server at {self.settings.base_url} lists no model; name one with --model")
            return model
        return DEFAULT_MODEL

    def served(self) -> tuple[str | None, int | None]:
        """(model id, context tokens) of what the server at base_url serves, asked once; (None,
        None) for OpenAI's own API. ProviderError when the server cannot be reached."""
        if self._served is None:
            self._served = self._ask_server() if self.settings.base_url else (None, None)
        return self._served

    def reply_limit(self, messages: list[Message], wanted: int) -> int:
        """`wanted`, capped by what the server's context leaves after the prompt."""
        _, context = self.served()
        if not context:
            return wanted
        prompt = estimate_tokens(messages, CHARS_PER_TOKEN)
        return max(MIN_REPLY_TOKENS, min(wanted, context - prompt))

    def fit(self, messages: list[Message], wanted: int) -> tuple[list[Message], int]:
        """(messages, reply tokens) that fit the server's context together: the prompt is cut so
        that at least min(wanted, MIN_REPLY_TOKENS) tokens are left for the reply."""
        _, context = self.served()
        if not context:
            return messages, wanted
        reserve = min(wanted, MIN_REPLY_TOKENS)
        fitted, cut = fit_messages(messages, context - reserve, context, CHARS_PER_TOKEN)
        self.prompt_chars_cut += cut
        prompt = estimate_tokens(fitted, CHARS_PER_TOKEN)
        return fitted, max(reserve, min(wanted, context - prompt))

    def _ask_server(self) -> tuple[str | None, int | None]:
        def listing() -> Any:
            try:
                return self.client.models.list()
            except self._openai.APIStatusError as exc:
                if exc.status_code == 501 or (exc.status_code < 500 and exc.status_code != 429):
                    return None  # a server without /models: nothing to learn, not a failure
                raise

        page, _ = call_with_retries(
            listing, self._classify, self.policy, self.sleep,
            what=f"the LLM server at {self.settings.base_url}", on_retry=self.on_retry,
        )
        entries = list(getattr(page, "data", None) or [])
        wanted = self.settings.model
        entry = next((e for e in entries if getattr(e, "id", None) == wanted), entries[0] if entries else None)
        if entry is None:
            return None, self._props_context()
        return str(entry.id), self._props_context() or _entry_context(entry)

    def _props_context(self) -> int | None:
        """llama.cpp's runtime context (`/props`), which its /models entry does not give (only the
        context the model was trained with)."""
        import httpx

        root = str(self.settings.base_url).rstrip("/").removesuffix("/v1")
        try:
            reply = httpx.get(f"{root}/props", timeout=5.0)
            data = reply.json() if reply.status_code == 200 else {}
        except (httpx.HTTPError, ValueError):
            return None
        settings = data.get("default_generation_settings") or {} if isinstance(data, dict) else {}
        value = settings.get("n_ctx") or (data.get("n_ctx") if isinstance(data, dict) else None)
        return int(value) if isinstance(value, int | float) and value > 0 else None

    def complete(
        self, messages: list[Message], *, model: str | None = None, role: str = "coder",
        max_tokens: int | None = None, temperature: float | None = None,
    ) -> Completion:
        model = model or self.model_for(role)
        messages, limit = self.fit(messages, max_tokens or self.settings.max_tokens)
        kwargs: dict[str, Any] = {
            "model": model, "messages": [{"role": m.role, "content": m.content} for m in messages],
        }
        # OpenAI's own API wants max_completion_tokens; compatible servers know max_tokens.
        kwargs["max_tokens" if self.settings.base_url else "max_completion_tokens"] = limit
        temp = self.settings.temperature if temperature is None else temperature
        if not model.startswith(_FIXED_TEMPERATURE_PREFIXES):
            kwargs["temperature"] = temp
        response, retries = call_with_retries(
            lambda: self.client.chat.completions.create(**kwargs), self._classify, self.policy,
            self.sleep, what=f"openai {model}", on_retry=self.on_retry,
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


def _entry_context(entry: Any) -> int | None:
    """The context window a /models entry reports, under any of the keys servers use."""
    fields = dict(getattr(entry, "model_extra", None) or {})
    meta = fields.get("meta") if isinstance(fields.get("meta"), dict) else {}
    for source in (fields, meta):
        for key in (*_CONTEXT_KEYS, "n_ctx_train"):
            value = source.get(key)
            if isinstance(value, int | float) and value > 0:
                return int(value)
    return None
