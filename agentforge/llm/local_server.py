"""A small OpenAI-compatible server for a local Hugging Face model folder, on loopback.

It serves what `agentforge rl eval` scores (a TRL checkpoint, the base policy) and a real model
for `agentforge optimize --base-url` without any hub or native build: transformers' `generate`
on this machine's CPU (or GPU), one request at a time, in a thread of the calling process.

Endpoints, as llama.cpp and vLLM answer them:
    GET  /v1/models            the model, with its context window (`max_model_len`)
    GET  /props                llama.cpp's runtime context (`default_generation_settings.n_ctx`)
    GET  /health
    POST /v1/chat/completions  messages through the tokenizer's chat template (joined lines
                               when it has none); `n`, `max_tokens`, `temperature`, `top_p`,
                               `seed`, `stop`
    POST /v1/completions       a plain prompt

The context is the model's `max_position_embeddings`, or less when `context` says so: a prompt
that does not fit is refused with 400 (as llama.cpp does), and a reply never runs past it.
Counters of prompt and generated tokens and of generation time give the tokens per second.
"""

from __future__ import annotations

import ipaddress
import json
import threading
import time
import uuid
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

DEFAULT_MAX_TOKENS = 256


class LocalServerError(ValueError):
    """A model folder or setting the server cannot serve; the message says which."""


class RequestError(ValueError):
    """A request the server refuses (HTTP 400) with this message."""


@dataclass
class GenerationStats:
    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    generate_s: float = 0.0
    refused: int = 0  # requests answered 400 (a prompt past the context, bad fields)

    @property
    def tokens_per_s(self) -> float | None:
        return self.completion_tokens / self.generate_s if self.generate_s > 0 else None


class LocalModel:
    """A causal LM and its tokenizer, generating one request at a time."""

    def __init__(self, model_dir: str | Path, *, context: int | None = None, device: str = "cpu") -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        path = Path(model_dir)
        if not (path / "config.json").is_file():
            raise LocalServerError(f"{path}: not a Hugging Face model folder (no config.json)")
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).to(device).eval()
        self.device = device
        trained = int(getattr(self.model.config, "max_position_embeddings", 0) or 0) or None
        if context is not None and context < 16:
            raise LocalServerError(f"context {context} is too small to serve anything")
        self.context = min(c for c in (context, trained) if c) if (context or trained) else 2048
        self.stats = GenerationStats()
        self._lock = threading.Lock()
        self._torch = torch

    def chat_ids(self, messages: list[dict[str, Any]]) -> list[int]:
        if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
            raise RequestError("`messages` must be a non-empty list of {role, content} objects")
        turns = [{"role": str(m.get("role", "user")), "content": _text(m.get("content"))} for m in messages]
        if getattr(self.tokenizer, "chat_template", None):
            ids = self.tokenizer.apply_chat_template(turns, add_generation_prompt=True, tokenize=True,
                                                     return_dict=True)["input_ids"]
            return list(ids)
        return self.text_ids("\n".join(t["content"] for t in turns))

    def text_ids(self, prompt: str) -> list[int]:
        if not isinstance(prompt, str):
            raise RequestError("`prompt` must be a string")
        return list(self.tokenizer(prompt, add_special_tokens=False)["input_ids"])

    def generate(self, ids: list[int], *, max_tokens: int | None, temperature: float, top_p: float,
                 seed: int | None, stop: list[str]) -> tuple[str, int, str]:
        """(text, generated tokens, finish reason) for one prompt."""
        room = self.context - len(ids)
        if not ids or room < 1:
            raise RequestError(f"the prompt has {len(ids)} tokens; the context holds {self.context} "
                               "(prompt and reply together)")
        wanted = DEFAULT_MAX_TOKENS if max_tokens is None else max_tokens
        if not isinstance(wanted, int) or wanted < 1:
            raise RequestError("`max_tokens` must be a positive integer")
        limit = min(wanted, room)
        torch = self._torch
        with self._lock:
            if seed is not None:
                torch.manual_seed(int(seed))
            sampling = {"do_sample": True, "temperature": temperature, "top_p": top_p} if temperature > 0 else {
                "do_sample": False}
            pad = self.tokenizer.pad_token_id
            pad = self.tokenizer.eos_token_id if pad is None else pad
            start = time.perf_counter()
            with torch.no_grad():
                out = self.model.generate(
                    torch.tensor([ids], device=self.device), attention_mask=torch.ones(1, len(ids), dtype=torch.long,
                                                                                      device=self.device),
                    max_new_tokens=limit, pad_token_id=pad, top_k=None, **sampling)
            elapsed = time.perf_counter() - start
            new = out[0, len(ids):].tolist()
            self.stats.requests += 1
            self.stats.prompt_tokens += len(ids)
            self.stats.completion_tokens += len(new)
            self.stats.generate_s += elapsed
        eos = self.tokenizer.eos_token_id
        ended = eos is not None and eos in new
        text = self.tokenizer.decode(new, skip_special_tokens=True)
        for s in stop:
            if s and s in text:
                text, ended = text[: text.index(s)], True
        return text, len(new), "stop" if ended or len(new) < limit else "length"


class LocalModelServer:
    """`LocalModel` behind an OpenAI-compatible HTTP server on a loopback port (0: any free one).
    Use as a context manager; `base_url` is what an OpenAI client or `--base-url` takes."""

    def __init__(self, model_dir: str | Path, *, name: str | None = None, context: int | None = None,
                 host: str = "127.0.0.1", port: int = 0, device: str = "cpu", threads: int | None = None) -> None:
        host = "127.0.0.1" if host == "localhost" else host
        if not _is_loopback(host):
            raise LocalServerError(f"{host} is not a loopback address: the local server listens on loopback only")
        if threads is not None:
            import torch

            # Process-wide: on a busy 2-core machine one thread generated about 17x faster than
            # two (OpenMP's workers spin-wait for each other), so callers may pin it.
            torch.set_num_threads(threads)
        self.model = LocalModel(model_dir, context=context, device=device)
        self.name = name or Path(model_dir).name
        self._httpd = ThreadingHTTPServer((host, port), _handler(self))
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    @property
    def stats(self) -> GenerationStats:
        return self.model.stats

    def start(self) -> LocalModelServer:
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="local-llm-server", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def __enter__(self) -> LocalModelServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ----- what the endpoints answer ------------------------------------------------------
    def models(self) -> dict[str, Any]:
        entry = {"id": self.name, "object": "model", "owned_by": "agentforge-local",
                 "max_model_len": self.model.context}
        return {"object": "list", "data": [entry]}

    def completion(self, body: dict[str, Any], chat: bool) -> dict[str, Any]:
        ids = self.model.chat_ids(body.get("messages")) if chat else self.model.text_ids(body.get("prompt"))
        n = body.get("n", 1)
        if not isinstance(n, int) or not 1 <= n <= 64:
            raise RequestError("`n` must be an integer from 1 to 64")
        temperature = _number(body, "temperature", 1.0)
        top_p = _number(body, "top_p", 1.0)
        stop = body.get("stop") or []
        stop = [stop] if isinstance(stop, str) else [str(s) for s in stop]
        seed = body.get("seed")
        max_tokens = body.get("max_tokens", body.get("max_completion_tokens"))
        choices, generated = [], 0
        for i in range(n):
            text, count, finish = self.model.generate(
                ids, max_tokens=max_tokens, temperature=temperature, top_p=top_p,
                seed=None if seed is None else int(seed) + i, stop=stop)
            generated += count
            payload = {"message": {"role": "assistant", "content": text}} if chat else {"text": text}
            choices.append({"index": i, "finish_reason": finish, **payload})
        return {
            "id": f"local-{uuid.uuid4().hex[:12]}", "object": "chat.completion" if chat else "text_completion",
            "created": int(time.time()), "model": body.get("model") or self.name, "choices": choices,
            "usage": {"prompt_tokens": len(ids), "completion_tokens": generated,
                      "total_tokens": len(ids) + generated},
        }


def _handler(server: LocalModelServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # quiet: no line per request
            pass

        def do_GET(self) -> None:
            path = self.path.split("?")[0].rstrip("/")
            if path in ("/v1/models", "/models"):
                self._send(200, server.models())
            elif path == "/props":
                self._send(200, {"default_generation_settings": {"n_ctx": server.model.context}})
            elif path == "/health":
                self._send(200, {"status": "ok"})
            else:
                self._error(404, f"no such endpoint: GET {path}")

        def do_POST(self) -> None:
            path = self.path.split("?")[0].rstrip("/")
            chat = path in ("/v1/chat/completions", "/chat/completions")
            if not chat and path not in ("/v1/completions", "/completions"):
                self._error(404, f"no such endpoint: POST {path}")
                return
            try:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                if not isinstance(body, dict):
                    raise RequestError("the request body must be a JSON object")
                if body.get("stream"):
                    raise RequestError("streaming is not supported by this server")
                self._send(200, server.completion(body, chat))
            except (RequestError, ValueError) as exc:
                server.stats.refused += 1
                self._error(400, str(exc))
            except Exception as exc:  # the model failed: the client sees why, the server lives on
                self._error(500, f"{type(exc).__name__}: {exc}")

        def _error(self, status: int, message: str) -> None:
            self._send(status, {"error": {"message": message, "type": "invalid_request_error", "code": status}})

        def _send(self, status: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Handler


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _text(content: Any) -> str:
    """A message's content: a string, or OpenAI's list of parts (their text parts joined)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    raise RequestError("each message needs a string `content`")


def _number(body: dict[str, Any], key: str, default: float) -> float:
    value = body.get(key, default)
    if value is None:
        return default
    if not isinstance(value, int | float) or value < 0:
        raise RequestError(f"`{key}` must be a non-negative number")
    return float(value)
