"""Providers through the real SDKs over real HTTP to a scripted loopback server: replies, token
usage and cost, and the one retry layer (the SDKs' own retries are off)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentforge.llm.anthropic_provider import AnthropicProvider
from agentforge.llm.base import Message, Provider, ProviderError
from agentforge.llm.openai_provider import OpenAIProvider
from agentforge.llm.pricing import PriceTable, load_price_table
from agentforge.llm.registry import make_provider
from agentforge.settings import ProviderSettings, SettingsError

MESSAGES = [Message("system", "You are terse."), Message("user", "Say hi.")]


class Sleeps(list):
    def __call__(self, seconds: float) -> None:
        self.append(seconds)


def _openai(server, sleeps, **kw) -> OpenAIProvider:
    settings = ProviderSettings(name="openai", base_url=server.openai_base_url, api_key="dummy",
                                model="gpt-4.1", timeout_s=10, **kw)
    return OpenAIProvider(settings, PriceTable(), sleep=sleeps)


def _anthropic(server, sleeps, **kw) -> AnthropicProvider:
    settings = ProviderSettings(name="anthropic", base_url=server.root, api_key="dummy",
                                model="claude-sonnet-4-6", timeout_s=10, **kw)
    return AnthropicProvider(settings, PriceTable(), sleep=sleeps)


@pytest.mark.parametrize("make", [_openai, _anthropic], ids=["openai", "anthropic"])
def test_reply_usage_and_cost(scripted, make):
    with scripted.ScriptedServer([scripted.Reply("hello", input_tokens=1000, output_tokens=500)]) as server:
        provider = make(server, Sleeps())
        assert isinstance(provider, Provider)
        completion = provider.complete(MESSAGES)
    assert completion.text == "hello"
    assert completion.usage.input_tokens == 1000 and completion.usage.output_tokens == 500
    expected = {"gpt-4.1": (1000 * 2.0 + 500 * 8.0) / 1e6, "claude-sonnet-4-6": (1000 * 3 + 500 * 15) / 1e6}
    assert completion.usage.cost_usd == pytest.approx(expected[completion.model])
    assert completion.retries == 0
    request = server.log[0]
    assert "You are terse." in (request.system or "")


@pytest.mark.parametrize("make", [_openai, _anthropic], ids=["openai", "anthropic"])
def test_429_with_retry_after_then_500_then_success(scripted, make):
    replies = [scripted.rate_limited(0.25), scripted.server_error(500), scripted.Reply("ok")]
    sleeps = Sleeps()
    with scripted.ScriptedServer(replies) as server:
        completion = make(server, sleeps).complete(MESSAGES)
    assert completion.text == "ok" and completion.retries == 2
    assert [r.status for r in server.log] == [429, 500, 200]
    assert sleeps[0] == pytest.approx(0.25)  # the server's Retry-After is honoured
    assert sleeps[1] == pytest.approx(2.0)  # then exponential backoff (base 1 s, second attempt)


def test_retries_are_bounded(scripted):
    sleeps = Sleeps()
    with scripted.ScriptedServer([scripted.server_error(503)]) as server:
        provider = _openai(server, sleeps, max_retries=2)
        with pytest.raises(ProviderError, match="after 2 retries"):
            provider.complete(MESSAGES)
    assert len(server.log) == 3 and len(sleeps) == 2


def test_client_errors_are_not_retried(scripted):
    with (scripted.ScriptedServer([scripted.Reply(status=400)]) as server,
          pytest.raises(ProviderError, match="BadRequestError")):
        _openai(server, Sleeps()).complete(MESSAGES)
    assert len(server.log) == 1


def test_connection_errors_are_retried():
    sleeps = Sleeps()
    settings = ProviderSettings(name="openai", base_url="http://127.0.0.1:9/v1", api_key="x",
                                max_retries=1, timeout_s=2)
    with pytest.raises(ProviderError, match="connection error"):
        OpenAIProvider(settings, sleep=sleeps).complete(MESSAGES)
    assert sleeps == [1.0]


def test_judge_uses_its_own_model(scripted):
    with scripted.ScriptedServer([scripted.Reply("v")]) as server:
        settings = ProviderSettings(name="openai", base_url=server.openai_base_url, api_key="d",
                                    model="coder-m", judge_model="judge-m")
        provider = OpenAIProvider(settings)
        provider.complete(MESSAGES, role="coder")
        provider.complete(MESSAGES, role="judge")
    assert [r.model for r in server.log] == ["coder-m", "judge-m"]


def test_unpriced_model_costs_nothing_and_prices_are_overridable(tmp_path: Path):
    assert PriceTable().cost("my-local-llama", 10**6, 10**6) == 0.0
    assert PriceTable().lookup("claude-sonnet-4-5-20250929") == PriceTable().lookup("claude-sonnet-4-5")
    file = tmp_path / "prices.toml"
    file.write_text('[models."my-local-llama"]\ninput = 1.0\noutput = 2.0\n')
    assert load_price_table(file).cost("my-local-llama", 10**6, 10**6) == pytest.approx(3.0)
    file.write_text('[models."bad"]\ninput = "x"\n')
    with pytest.raises(ValueError, match="bad"):
        load_price_table(file)


def test_registry_rejects_unknown_and_explains_missing_keys():
    with pytest.raises(SettingsError, match="openai, anthropic, library"):
        make_provider(ProviderSettings(name="bogus"))
    with pytest.raises(ProviderError, match="OPENAI_API_KEY"):
        make_provider(ProviderSettings(name="openai"))
    with pytest.raises(ProviderError, match="ANTHROPIC_API_KEY"):
        make_provider(ProviderSettings(name="anthropic"))


def test_library_provider_without_a_kernel_explains_how_to_configure(tmp_path: Path):
    with pytest.raises(ProviderError, match="OPENAI_API_KEY"):
        make_provider(ProviderSettings(name="library"), task_name="level1/nothing", backend="cpu",
                      kernels_root=tmp_path)


def test_library_provider_walks_the_tunable_variants(tmp_path: Path):
    folder = tmp_path / "cpu" / "level1" / "relu"
    folder.mkdir(parents=True)
    (folder / "kernel.py").write_text(
        "UNROLL = 1\nTUNABLES = {'UNROLL': [1, 2, 4]}\n\nclass ModelNew:\n    pass\n")
    provider = make_provider(ProviderSettings(name="library"), task_name="level1/relu", backend="cpu",
                             kernels_root=tmp_path)
    assert provider.planned_rounds == 3
    from agentforge.candidate import code_hash, extract_code

    seen: list[str] = []
    for expected in (1, 2, 4):
        reply = provider.complete([Message("user", "tried: " + " ".join(seen))]).text
        code = extract_code(reply)
        assert f"UNROLL = {expected}" in code
        seen.append(code_hash(code))
    assert "```" not in provider.complete([Message("user", " ".join(seen))]).text
    judged = provider.complete([Message("user", '{"mode": "repair"}')], role="judge").text
    assert '"critical_issue"' in judged
