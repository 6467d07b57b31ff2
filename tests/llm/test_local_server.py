"""A local OpenAI-compatible server by --base-url (issue 19, finding 6): the model it serves is
asked for rather than `gpt-5`, it is billed at 0 unless prices are configured, replies are capped
by the context it reports, and a server that is down is said in one line per retry."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentforge.llm.base import Message, ProviderError
from agentforge.llm.openai_provider import OpenAIProvider
from agentforge.llm.registry import make_provider
from agentforge.settings import ProviderSettings

PROMPT = [Message("system", "You write kernels."), Message("user", "x" * 6000)]


def _settings(base_url: str, **kw) -> ProviderSettings:
    return ProviderSettings(name="openai", base_url=base_url, api_key="dummy", timeout_s=10, **kw)


def test_without_a_model_the_servers_own_model_is_asked_for_and_billed_at_zero(scripted, tmp_path: Path):
    # The server calls its model by a hosted model's name: still a local server, still free.
    models = [{"id": "gpt-4.1", "object": "model", "owned_by": "llamacpp"}]
    with scripted.ScriptedServer([scripted.Reply("hi", input_tokens=10**6, output_tokens=10**6)],
                                 models=models) as server:
        provider = make_provider(_settings(server.openai_base_url))
        first = provider.complete(PROMPT)
        table = tmp_path / "prices.toml"
        table.write_text('[models."gpt-4.1"]\ninput = 1.0\noutput = 2.0\n')
        priced = make_provider(_settings(server.openai_base_url, price_table=str(table))).complete(PROMPT)
    assert [r.model for r in server.log] == ["gpt-4.1", "gpt-4.1"]
    assert "gpt-5" not in {r.model for r in server.log}
    assert first.model == "gpt-4.1" and first.usage.cost_usd == 0.0
    assert priced.usage.cost_usd == pytest.approx(3.0)  # a configured price does apply


def test_a_named_model_is_kept(scripted):
    with scripted.ScriptedServer([scripted.Reply("hi")]) as server:
        provider = OpenAIProvider(_settings(server.openai_base_url, model="my-llama"))
        provider.complete(PROMPT, role="judge")
    assert [r.model for r in server.log] == ["my-llama"]


def test_replies_are_capped_by_the_context_the_server_reports(scripted):
    models = [{"id": "smol", "object": "model", "max_model_len": 4096}]
    with scripted.ScriptedServer([scripted.Reply("hi")], models=models) as server:
        OpenAIProvider(_settings(server.openai_base_url, max_tokens=8192)).complete(PROMPT)
    [asked] = server.max_tokens_asked
    # 6000 characters of prompt are about 2000 tokens: the reply gets what the 4096 leave.
    assert 256 <= asked <= 4096 - 6000 // 4


def test_llama_cpp_runtime_context_wins_over_the_trained_one(scripted):
    models = [{"id": "smol.gguf", "object": "model", "meta": {"n_ctx_train": 8192}}]
    props = {"default_generation_settings": {"n_ctx": 3000}}
    with scripted.ScriptedServer([scripted.Reply("hi")], models=models, props=props) as server:
        provider = OpenAIProvider(_settings(server.openai_base_url, max_tokens=8192))
        provider.complete(PROMPT)
        assert provider.served() == ("smol.gguf", 3000)
    assert server.max_tokens_asked[0] <= 3000 - 6000 // 4


def test_no_reported_context_keeps_the_configured_limit(scripted):
    with scripted.ScriptedServer([scripted.Reply("hi")]) as server:
        OpenAIProvider(_settings(server.openai_base_url, max_tokens=1234)).complete(PROMPT)
    assert server.max_tokens_asked == [1234]


def test_a_server_that_is_down_is_said_once_per_retry_then_fails(unused_port: int):
    heard: list[str] = []
    provider = OpenAIProvider(_settings(f"http://127.0.0.1:{unused_port}/v1", max_retries=2),
                              sleep=lambda s: None)
    provider.on_retry = heard.append
    with pytest.raises(ProviderError, match="connection error"):
        provider.complete(PROMPT)
    assert len(heard) == 2
    assert all(f"127.0.0.1:{unused_port}" in line and "connection error" in line and "\n" not in line
               for line in heard)
    assert "retry 2 of 2" in heard[-1]


@pytest.fixture
def unused_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
