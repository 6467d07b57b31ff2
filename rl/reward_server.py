"""The reward service over HTTP, for trainers in other processes (or on other machines).

`RewardServer(service)` serves one `RewardService` (so one cache, one concurrency limit, the same
timeouts) to every client, from a thread per connection; the service's coroutines run on one
event loop thread of the server's. Start it with `agentforge rl serve-rewards --config X.toml`
and score from a trainer with `reward_client.RewardClient(url)`, which `ServiceReward` takes in
place of a service. JSON in, JSON out:

    POST /score   {"requests": [{"task_name", "task_source", "completion",
                                 "reference_speedup"?, "meta"?, "timeout_s"?}, ...]}
               -> {"results": [{"record": RewardRecord, "timed_out": bool, "detail": str}, ...]}
    GET  /health  -> {"status": "ok", "service": {...its settings}, "stats": {...}}

A request that is not what this page says gets a 4xx status and `{"error": "..."}` naming the
field at fault; nothing of a rejected batch is evaluated. A candidate never makes a 4xx: a hung
one gets the timeout's reward, with `timed_out: true` and a `detail` that says so.
Bind to loopback (the default) or a private network: the server has no authentication.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
import threading
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from agentforge.rl.records import RewardRecord
from agentforge.rl.service import RewardRequest, RewardService

MAX_BODY_BYTES = 64 * 2**20
MAX_REQUESTS = 4096  # completions per POST
FIELDS = {"task_name": str, "task_source": str, "completion": str}
OPTIONAL = ("reference_speedup", "meta", "timeout_s")


class BadRequest(ValueError):
    """A request the server refuses; `status` is the HTTP status to answer with."""

    def __init__(self, message: str, status: HTTPStatus = HTTPStatus.BAD_REQUEST) -> None:
        super().__init__(message)
        self.status = status


class RewardServer:
    """One RewardService behind an HTTP endpoint; `start()` in the background or `serve_forever()`."""

    def __init__(self, service: RewardService, host: str = "127.0.0.1", port: int = 0) -> None:
        self.service = service
        self.httpd = ThreadingHTTPServer((host, port), _handler(self))  # first: a taken port fails here
        self.httpd.daemon_threads = True
        self._loop = asyncio.new_event_loop()
        self._loop_thread = threading.Thread(target=self._loop.run_forever, daemon=True, name="reward-loop")
        self._loop_thread.start()
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> RewardServer:
        self._thread = threading.Thread(target=self.serve_forever, daemon=True, name="reward-http")
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        self.httpd.serve_forever(poll_interval=0.2)

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self._loop.call_soon_threadsafe(self._loop.stop)

    # ----- what the handler calls ---------------------------------------------------------------
    def score(self, body: Any) -> dict[str, Any]:
        requests = parse_requests(body)
        future = asyncio.run_coroutine_threadsafe(self.service.score(requests), self._loop)
        records = future.result()
        return {"results": [self._result(r, q) for r, q in zip(records, requests, strict=True)]}

    def _result(self, record: RewardRecord, request: RewardRequest) -> dict[str, Any]:
        timed_out = record.status == "timeout"
        detail = ""
        if timed_out:
            limit = self.service.config.request_timeout_s
            if request.timeout_s is not None:
                limit = min(limit, request.timeout_s)
            detail = (f"no verdict within {limit:g} s: the evaluation was abandoned and the completion "
                      f"gets the timeout's reward ({record.reward:g})")
        return {"record": record.to_dict(), "timed_out": timed_out, "detail": detail}

    def health(self) -> dict[str, Any]:
        cfg = self.service.config
        settings = {k: getattr(cfg, k) for k in ("backend", "device", "track", "executor", "concurrency",
                                                 "request_timeout_s")}
        return {"status": "ok", "service": settings, "stats": dataclasses.asdict(self.service.stats)}


def parse_requests(body: Any) -> list[RewardRequest]:
    """A POST /score body as RewardRequests, or BadRequest naming the first field at fault."""
    if not isinstance(body, dict) or not isinstance(body.get("requests"), list):
        raise BadRequest('the body must be a JSON object {"requests": [...]}')
    items = body["requests"]
    if not items:
        raise BadRequest('"requests" is empty: send at least one completion')
    if len(items) > MAX_REQUESTS:
        raise BadRequest(f'"requests" holds {len(items)} completions; at most {MAX_REQUESTS} per call',
                         HTTPStatus.REQUEST_ENTITY_TOO_LARGE)
    return [_request(item, f"requests[{i}]") for i, item in enumerate(items)]


def _request(item: Any, where: str) -> RewardRequest:
    if not isinstance(item, dict):
        raise BadRequest(f"{where} must be an object with {', '.join(FIELDS)}")
    unknown = set(item) - set(FIELDS) - set(OPTIONAL)
    if unknown:
        raise BadRequest(f"{where}: unknown fields {sorted(unknown)}; known: {[*FIELDS, *OPTIONAL]}")
    for name, kind in FIELDS.items():
        if not isinstance(item.get(name), kind):
            raise BadRequest(f"{where}.{name} must be a string" + ("" if name in item else " (missing)"))
    if not item["task_name"].strip():
        raise BadRequest(f"{where}.task_name is empty")
    meta = item.get("meta") or {}
    if not isinstance(meta, dict):
        raise BadRequest(f"{where}.meta must be an object")
    return RewardRequest(task_name=item["task_name"], task_source=item["task_source"],
                         completion=item["completion"], meta=meta,
                         reference_speedup=_positive(item.get("reference_speedup"), f"{where}.reference_speedup"),
                         timeout_s=_positive(item.get("timeout_s"), f"{where}.timeout_s"))


def _positive(value: Any, where: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
        raise BadRequest(f"{where} must be a positive number or null, not {value!r}")
    return float(value)


def _handler(server: RewardServer) -> Callable[..., BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:  # http.server calls do_<METHOD>
            if self.path.rstrip("/") == "/health":
                self._send(HTTPStatus.OK, server.health())
            else:
                self._not_found()

        def do_POST(self) -> None:
            if self.path.rstrip("/") != "/score":
                self._not_found()
                return
            try:
                self._send(HTTPStatus.OK, server.score(self._body()))
            except BadRequest as exc:
                self._send(exc.status, {"error": str(exc)})
            except RuntimeError as exc:  # a task the service cannot turn into a job (the caller's data)
                self._send(HTTPStatus.UNPROCESSABLE_ENTITY, {"error": str(exc)})
            except Exception as exc:  # the server's own fault: say what, keep serving
                self._send(HTTPStatus.INTERNAL_SERVER_ERROR, {"error": f"{type(exc).__name__}: {exc}"})

        def _body(self) -> Any:
            length = self.headers.get("Content-Length")
            if length is None or not length.isdigit():
                raise BadRequest("send the body with a Content-Length header", HTTPStatus.LENGTH_REQUIRED)
            if int(length) > MAX_BODY_BYTES:
                raise BadRequest(f"body of {length} bytes; at most {MAX_BODY_BYTES}",
                                 HTTPStatus.REQUEST_ENTITY_TOO_LARGE)
            raw = self.rfile.read(int(length))
            try:
                return json.loads(raw)
            except (UnicodeDecodeError, json.JSONDecodeError) as exc:
                raise BadRequest(f"the body is not JSON: {exc}") from exc

        def _not_found(self) -> None:
            self._send(HTTPStatus.NOT_FOUND, {"error": f"no endpoint {self.command} {self.path}; "
                                                       "use POST /score or GET /health"})

        def _send(self, status: HTTPStatus, payload: dict[str, Any]) -> None:
            data = json.dumps(payload, default=str).encode()
            if status >= 400:
                self.close_connection = True  # a refused body may not have been read
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:  # quiet: the trainer logs
            pass

    return Handler
