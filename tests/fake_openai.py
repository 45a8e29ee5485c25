"""A real local HTTP server speaking the OpenAI chat-completions protocol, answering from a script.

Each request to `POST /v1/chat/completions` takes the next scripted step: a reply (content and/or
tool calls, with the usage numbers the test chose), an HTTP error status, or a delay longer than the
client's timeout followed by a step. Once the script is used up every request gets a 500. Every
request body (and its headers) is recorded, so tests can assert what the client sent.

    with FakeOpenAI([reply("hi", prompt_tokens=10, completion_tokens=2)]) as server:
        litellm.completion(model="openai/fake", api_base=server.url, api_key="dummy", ...)
        server.requests[0]["messages"]

The server binds 127.0.0.1 on a free port; `stop()` (or leaving the `with` block) shuts it down and
wakes any delayed handler. A reply's completion tokens are clamped to the request's max_tokens, as
a real server's would be.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Reply:
    content: str | None = None
    tool_calls: list[dict] = field(default_factory=list)  # [{"id", "name", "arguments": str}]
    prompt_tokens: int = 10
    completion_tokens: int = 5
    cached_tokens: int = 0
    reasoning_tokens: int = 0
    finish_reason: str | None = None  # default: "tool_calls" when there are tool calls, else "stop"


@dataclass
class HttpError:
    status: int
    message: str = "scripted error"
    retry_after: float | None = None


@dataclass
class Delay:
    seconds: float
    then: Reply | HttpError | None = None  # answered after the delay (the client is gone by then)


Step = Reply | HttpError | Delay

_ids = itertools.count(1)


def tool_call(name: str, arguments: dict | str, call_id: str | None = None) -> dict:
    """A tool call of a scripted reply; `arguments` as a string is sent as it is (malformed JSON too)."""
    args = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {"id": call_id or f"call_{next(_ids)}", "name": name, "arguments": args}


def reply(content: str | None = None, *tool_calls: dict, **usage) -> Reply:
    return Reply(content=content, tool_calls=list(tool_calls), **usage)


def error(status: int, message: str = "scripted error", retry_after: float | None = None) -> HttpError:
    return HttpError(status, message, retry_after)


def delay(seconds: float, then: Reply | HttpError | None = None) -> Delay:
    return Delay(seconds, then)


class FakeOpenAI:
    def __init__(self, script: list[Step] | None = None):
        self.script: list[Step] = list(script or [])
        self.requests: list[dict] = []  # request bodies, in order of arrival
        self.headers: list[dict] = []  # request headers (lower-case names), same order
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ lifecycle
    @property
    def port(self) -> int:
        assert self._server is not None, "server not started"
        return self._server.server_address[1]

    @property
    def url(self) -> str:
        """The api_base to give litellm / the OpenAI client."""
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> FakeOpenAI:
        server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        server.daemon_threads = True
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._server = self._thread = None

    def __enter__(self) -> FakeOpenAI:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # ------------------------------------------------------------------ the script
    def add(self, *steps: Step) -> None:
        with self._lock:
            self.script.extend(steps)

    def _next(self, body: dict, headers: dict) -> Step | None:
        with self._lock:
            self.requests.append(body)
            self.headers.append(headers)
            return self.script.pop(0) if self.script else None

    @property
    def steps_left(self) -> int:
        with self._lock:
            return len(self.script)


def _completion(step: Reply, body: dict) -> dict:
    limit = body.get("max_completion_tokens") or body.get("max_tokens")
    completion = min(step.completion_tokens, limit) if limit else step.completion_tokens
    tool_calls = [{"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
                  for c in step.tool_calls]
    message: dict = {"role": "assistant", "content": step.content}
    if tool_calls:
        message["tool_calls"] = tool_calls
    finish = step.finish_reason or ("tool_calls" if tool_calls else "stop")
    return {
        "id": f"chatcmpl-{next(_ids)}", "object": "chat.completion", "created": int(time.time()),
        "model": body.get("model", "fake"),
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": step.prompt_tokens, "completion_tokens": completion,
                  "total_tokens": step.prompt_tokens + completion,
                  "prompt_tokens_details": {"cached_tokens": step.cached_tokens},
                  "completion_tokens_details": {"reasoning_tokens": step.reasoning_tokens}},
    }


def _handler_for(fake: FakeOpenAI) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:  # keep test output clean
            pass

        def _send(self, status: int, obj: dict, extra_headers: dict | None = None) -> None:
            data = json.dumps(obj).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in (extra_headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (a timeout step)

        def do_GET(self) -> None:
            self._send(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            if self.path.rstrip("/") not in ("/v1/chat/completions", "/chat/completions"):
                self._send(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
                return
            try:
                body = json.loads(raw or b"{}")
            except json.JSONDecodeError:
                self._send(400, {"error": {"message": "request body is not JSON", "type": "invalid_request_error"}})
                return
            step = fake._next(body, {k.lower(): v for k, v in self.headers.items()})
            self._answer(step, body)

        def _answer(self, step: Step | None, body: dict) -> None:
            if step is None:
                self._send(500, {"error": {"message": "fake server: script exhausted", "type": "server_error"}})
            elif isinstance(step, Delay):
                fake._stopping.wait(step.seconds)
                self._answer(step.then, body) if step.then is not None else self._send(
                    500, {"error": {"message": "fake server: delayed answer", "type": "server_error"}})
            elif isinstance(step, HttpError):
                headers = {} if step.retry_after is None else {"Retry-After": str(step.retry_after)}
                kind = {400: "invalid_request_error", 401: "authentication_error", 429: "rate_limit_error"}.get(
                    step.status, "server_error")
                self._send(step.status, {"error": {"message": step.message, "type": kind, "code": None}}, headers)
            else:
                self._send(200, _completion(step, body))

    return Handler


__all__ = ["FakeOpenAI", "Reply", "HttpError", "Delay", "reply", "tool_call", "error", "delay"]
