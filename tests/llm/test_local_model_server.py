"""The in-process OpenAI-compatible server (agentforge/llm/local_server.py) over a real model:
a tiny Llama with random weights and the RL smoke run's word-level tokenizer, saved as a
Hugging Face folder. The real SDK talks to it over loopback HTTP; its tokenizer counts the real
prompt, so a prompt past the context is refused as llama.cpp refuses it, and the provider's cut
(context_fit.py) is what makes the same prompt go through."""

from __future__ import annotations

from pathlib import Path

import openai
import pytest

from agentforge.llm.base import Message
from agentforge.llm.context_fit import fit_messages
from agentforge.llm.local_server import LocalModelServer, LocalServerError
from agentforge.llm.openai_provider import OpenAIProvider
from agentforge.settings import ProviderSettings

CONTEXT = 300


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    import torch
    from agentforge.rl.tiny import build_tokenizer
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = build_tokenizer()
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=1024,
                         pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id,
                         eos_token_id=tokenizer.eos_token_id)
    torch.manual_seed(0)
    out = tmp_path_factory.mktemp("tiny-served")
    LlamaForCausalLM(config).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def server(model_dir):
    with LocalModelServer(model_dir, name="tiny", context=CONTEXT) as running:
        yield running


def _client(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url, api_key="local", max_retries=0, timeout=60)


def test_the_server_reports_its_model_and_context(server):
    provider = OpenAIProvider(ProviderSettings(name="openai", base_url=server.base_url, timeout_s=30))
    assert provider.served() == ("tiny", CONTEXT)


def test_samples_are_reproducible_by_seed_and_counted(server):
    client = _client(server)
    ask = {"model": "tiny", "messages": [{"role": "user", "content": "relu:"}], "max_tokens": 6,
           "temperature": 1.0}
    first = client.chat.completions.create(n=3, seed=7, **ask)
    again = client.chat.completions.create(n=3, seed=7, **ask)
    texts = [c.message.content for c in first.choices]
    assert texts == [c.message.content for c in again.choices]
    assert len(set(texts)) > 1  # three samples, not one repeated
    assert first.usage.completion_tokens <= 3 * 6
    assert all(c.finish_reason in ("stop", "length") for c in first.choices)
    assert server.stats.completion_tokens >= first.usage.completion_tokens
    assert server.stats.tokens_per_s and server.stats.tokens_per_s > 0


def test_a_prompt_past_the_context_is_refused_and_the_provider_cuts_it_to_fit(server):
    long_prompt = [Message("system", "relu:"), Message("user", "relu: " * 500)]  # 500 tokens, context 300
    refused = server.stats.refused
    with pytest.raises(openai.BadRequestError, match="context holds 300"):
        _client(server).chat.completions.create(
            model="tiny", messages=[{"role": m.role, "content": m.content} for m in long_prompt], max_tokens=8)
    assert server.stats.refused == refused + 1
    provider = OpenAIProvider(ProviderSettings(name="openai", base_url=server.base_url, timeout_s=30,
                                               max_tokens=8, max_retries=0))
    reply = provider.complete(long_prompt)
    assert provider.prompt_chars_cut > 0
    assert reply.usage.input_tokens + reply.usage.output_tokens <= CONTEXT
    assert reply.usage.output_tokens >= 1


def test_a_cut_takes_the_longest_message_first_keeps_both_ends_and_says_so():
    head, tail = "TASK: " + "a" * 2000, "b" * 2000 + " ANSWER FORMAT"
    messages = [Message("system", "S" * 500), Message("user", head + "x" * 20000 + tail)]
    fitted, cut = fit_messages(messages, budget_tokens=2000, context=2048, chars_per_token=3)
    assert fitted[0] == messages[0]  # the short system message is not touched
    text = fitted[1].content
    assert text.startswith("TASK: ") and text.endswith(" ANSWER FORMAT")
    assert f"{cut} characters cut to fit the server's 2048-token context" in text
    assert (len(fitted[0].content) + len(text)) / 3 + 32 <= 2000
    assert fit_messages(messages, budget_tokens=10**6, context=10**6, chars_per_token=3) == (messages, 0)
    # A long system prompt (technique notes) is cut too when it is what makes the prompt long.
    notes = [Message("system", "RULES " + "n" * 6000 + " FORMAT"), Message("user", "u" * 1500)]
    fitted, cut = fit_messages(notes, budget_tokens=900, context=1024, chars_per_token=3)
    assert cut > 0 and (len(fitted[0].content) + len(fitted[1].content)) / 3 + 32 <= 900
    assert fitted[0].content.startswith("RULES ") and fitted[0].content.endswith(" FORMAT")


def test_bad_requests_get_a_clear_400_and_the_server_lives_on(server):
    client = _client(server)
    with pytest.raises(openai.BadRequestError, match="max_tokens"):
        client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "relu:"}], max_tokens=0)
    with pytest.raises(openai.BadRequestError, match="messages"):
        client.chat.completions.create(model="tiny", messages=[])
    ok = client.completions.create(model="tiny", prompt="relu:", max_tokens=2, temperature=0)
    assert ok.choices[0].finish_reason in ("stop", "length")


def test_the_server_refuses_other_than_loopback_and_non_model_folders(model_dir, tmp_path):
    with pytest.raises(LocalServerError, match="loopback"):
        LocalModelServer(model_dir, host="0.0.0.0")
    with pytest.raises(LocalServerError, match=r"config\.json"):
        LocalModelServer(tmp_path)
