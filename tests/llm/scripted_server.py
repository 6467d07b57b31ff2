"""A deterministic LLM server on loopback for tests: OpenAI's /v1/chat/completions and Anthropic's
/v1/messages, answering from a script, through the real SDKs over real HTTP.

A script is a function `(api, body) -> Reply` (or a list of replies served in order). Every
request is logged (api, model, messages, status served) so tests can assert what was asked.
`GET /v1/models` lists `models` (what a local server says it serves, with any context-window
field a test gives it) and `GET /props` answers `props` (llama.cpp's server settings) when given.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Reply:
    text: str = ""
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    input_tokens: int | None = None
    output_tokens: int | None = None
    delay_s: float = 0.0  # wait this long before answering (to catch a client mid-call)


def rate_limited(after_s: float = 0.05) -> Reply:
    return Reply(status=429, headers={"retry-after": str(after_s)})


def server_error(status: int = 500) -> Reply:
    return Reply(status=status)


@dataclass
class LoggedRequest:
    api: str
    model: str
    messages: list[dict[str, Any]]
    system: str
    status: int

    @property
    def prompt(self) -> str:
        return "\n".join(str(m.get("content", "")) for m in self.messages)


Script = Callable[[str, dict[str, Any]], Reply]


def from_list(replies: Iterable[Reply]) -> Script:
    """Serve the replies in order; the last one again once they run out."""
    queue = list(replies)
    lock = threading.Lock()

    def script(api: str, body: dict[str, Any]) -> Reply:
        with lock:
            return queue.pop(0) if len(queue) > 1 else queue[0]

    return script


DEFAULT_MODELS = ({"id": "scripted-model", "object": "model", "owned_by": "tests"},)


class ScriptedServer:
    def __init__(self, script: Script | Iterable[Reply], models: Iterable[dict[str, Any]] = DEFAULT_MODELS,
                 props: dict[str, Any] | None = None):
        self.script: Script = script if callable(script) else from_list(script)
        self.models = [dict(m) for m in models]
        self.props = props
        self.max_tokens_asked: list[int | None] = []
        self.log: list[LoggedRequest] = []
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def root(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def openai_base_url(self) -> str:
        return self.root + "/v1"

    def __enter__(self) -> ScriptedServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def _serve(self, api: str, body: dict[str, Any]) -> tuple[int, dict[str, str], dict[str, Any]]:
        with self._lock:
            self.max_tokens_asked.append(body.get("max_tokens", body.get("max_completion_tokens")))
        reply = self.script(api, body)
        if reply.delay_s:
            time.sleep(reply.delay_s)
        messages = list(body.get("messages", []))
        system = body.get("system") or "\n".join(
            str(m.get("content", "")) for m in messages if m.get("role") == "system")
        with self._lock:
            self.log.append(LoggedRequest(api, body.get("model", ""), messages, str(system), reply.status))
        if reply.status != 200:
            return reply.status, reply.headers, _error_body(api, reply.status)
        tokens_in = reply.input_tokens if reply.input_tokens is not None else len(json.dumps(messages)) // 4
        tokens_out = reply.output_tokens if reply.output_tokens is not None else max(1, len(reply.text) // 4)
        model = body.get("model", "scripted")
        if api == "openai":
            payload: dict[str, Any] = {
                "id": f"chatcmpl-{len(self.log)}", "object": "chat.completion", "created": 0, "model": model,
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": reply.text}}],
                "usage": {"prompt_tokens": tokens_in, "completion_tokens": tokens_out,
                          "total_tokens": tokens_in + tokens_out},
            }
        else:
            payload = {
                "id": f"msg_{len(self.log)}", "type": "message", "role": "assistant", "model": model,
                "content": [{"type": "text", "text": reply.text}], "stop_reason": "end_turn",
                "stop_sequence": None, "usage": {"input_tokens": tokens_in, "output_tokens": tokens_out},
            }
        return 200, reply.headers, payload

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.endswith("/v1/models"):
                    self._send(200, {"object": "list", "data": server.models})
                elif self.path.endswith("/props") and server.props is not None:
                    self._send(200, server.props)
                else:
                    self.send_error(404)

            def _send(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", 0))
                body = json.loads(self.rfile.read(length) or b"{}")
                if self.path.endswith("/chat/completions"):
                    api = "openai"
                elif self.path.endswith("/v1/messages"):
                    api = "anthropic"
                else:
                    self.send_error(404)
                    return
                status, headers, payload = server._serve(api, body)
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for key, value in headers.items():
                    self.send_header(key, value)
                self.end_headers()
                try:
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client was killed mid-call (the kill -9 test does that)

            def log_message(self, *args: object) -> None:  # keep test output quiet
                pass

        return Handler


def _error_body(api: str, status: int) -> dict[str, Any]:
    kind = "rate_limit_error" if status == 429 else "api_error"
    if api == "openai":
        return {"error": {"message": f"scripted {status}", "type": kind, "code": None}}
    return {"type": "error", "error": {"type": kind, "message": f"scripted {status}"}}
