"""Scripted fake of the Anthropic Messages API, stdlib only.

Usage:
    srv = FakeAnthropic([
        Turn(tool_uses=[ToolUse("Write", {"file_path": "/abs/x.py", "content": "..."})],
             usage=Usage(100, 20, 50, 10)),
        Turn(text="done", usage=Usage(120, 5)),
    ])
    srv.start()            # binds 127.0.0.1:<free port>; srv.base_url
    ... run the client with ANTHROPIC_BASE_URL=srv.base_url ...
    srv.stop()
    srv.requests           # every request: path, method, headers, body, kind, turn
    srv.main_requests()    # only those that consumed a scripted turn

Classification of POST /v1/messages (see NOTES.md for what Claude Code sends):
  * "main": the request carries a non-empty `tools` list AND its model is not in
    `side_models` -> consumes the next scripted Turn.
  * "side": anything else (no tools, e.g. title / topic / summary calls made with
    the small/fast model) -> answered by `side_reply` (default: short text), does
    NOT consume the script.
  * POST /v1/messages/count_tokens -> {"input_tokens": N}, kind "count_tokens".
  * any other path -> 404 JSON error, kind "other" (still logged).
A custom classifier can be passed as `classify=fn(path, body) -> "main"|"side"`.

Turn options: text, tool_uses, usage, sleep_before (before any byte), sleep_mid (after message_start),
error=(status, type) (API error reply; the CLI retries 5xx/529 itself and each retry takes a turn),
break_stream (drop the connection after message_start). Server options: side_models, side_reply,
delta_usage ("output" | "full": what message_delta.usage carries), unix_path (also listen on a unix
socket, for ANTHROPIC_UNIX_SOCKET). `srv.sent` lists the usage of every message answered.
"""
from __future__ import annotations

import json
import os
import socketserver
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0

    def as_dict(self) -> dict:
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cache_creation_input_tokens": self.cache_creation_input_tokens,
            "cache_read_input_tokens": self.cache_read_input_tokens,
        }


@dataclass
class ToolUse:
    name: str
    input: dict
    id: str = field(default_factory=lambda: "toolu_" + uuid.uuid4().hex[:24])


@dataclass
class Turn:
    text: str | None = None                 # a text block (may precede tool_uses)
    tool_uses: list = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    sleep_before: float = 0.0                  # seconds to wait before answering
    sleep_mid: float = 0.0                     # seconds to wait after message_start (stream only)
    stop_reason: str | None = None          # default: tool_use if tool_uses else end_turn
    error: tuple | None = None              # (http_status, error_type) -> answer with an API error
    break_stream: bool = False                 # stream only: drop the connection after message_start

    def blocks(self) -> list:
        out = []
        if self.text is not None:
            out.append({"type": "text", "text": self.text})
        for tu in self.tool_uses:
            out.append({"type": "tool_use", "id": tu.id, "name": tu.name, "input": tu.input})
        return out

    def final_stop_reason(self) -> str:
        return self.stop_reason or ("tool_use" if self.tool_uses else "end_turn")


DEFAULT_SIDE_USAGE = Usage(7, 3, 0, 0)


class _UnixHTTPServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


class FakeAnthropic:
    def __init__(self, script: list, host: str = "127.0.0.1", port: int = 0,
                 side_models: tuple = (), side_reply: Callable[[dict], str] | None = None,
                 side_usage: Usage = DEFAULT_SIDE_USAGE,
                 classify: Callable[[str, dict], str] | None = None,
                 final_fallback_text: str = "(fake server: script exhausted)",
                 delta_usage: str = "output", unix_path: str | None = None):
        self.script = list(script)
        self.side_models = set(side_models)
        self.side_reply = side_reply or (lambda body: '{"title": "Fake title", "isNewTopic": false}')
        self.side_usage = side_usage
        self.classify_fn = classify
        self.final_fallback_text = final_fallback_text
        # "output": message_delta.usage = {output_tokens} (classic API);
        # "full": message_delta.usage repeats all four fields (newer API does this; cumulative)
        self.delta_usage = delta_usage
        self.requests: list = []           # every request, in arrival order
        self.sent: list = []               # (kind, turn_index|None, usage dict) for every message answered
        self.next_turn = 0
        self.lock = threading.Lock()
        self.turn_started = threading.Event()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, fmt, *args):  # quiet
                pass

            def _read_body(self):
                n = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(n) if n else b""
                try:
                    return raw, json.loads(raw) if raw else None
                except ValueError:
                    return raw, None

            def _record(self, body, raw, kind, turn=None):
                rec = {
                    "t": time.time(), "method": self.command, "path": self.path,
                    "headers": dict(self.headers.items()), "body": body,
                    "raw_len": len(raw), "kind": kind, "turn": turn,
                }
                with fake.lock:
                    fake.requests.append(rec)
                return rec

            def _json(self, code, obj, extra_headers=None):
                data = json.dumps(obj).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.send_header("request-id", "req_" + uuid.uuid4().hex[:24])
                for k, v in (extra_headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                self._record(None, b"", "other")
                self._json(404, {"type": "error", "error": {"type": "not_found_error", "message": "fake: not found"}})

            do_DELETE = do_GET
            do_PUT = do_GET

            def do_HEAD(self):
                self._record(None, b"", "other")
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_POST(self):
                raw, body = self._read_body()
                path = self.path.split("?", 1)[0]
                if path.endswith("/v1/messages/count_tokens"):
                    self._record(body, raw, "count_tokens")
                    n = max(1, len(raw) // 4)
                    return self._json(200, {"input_tokens": n})
                if not path.endswith("/v1/messages") or not isinstance(body, dict):
                    self._record(body, raw, "other")
                    return self._json(404, {"type": "error", "error": {"type": "not_found_error", "message": "fake: not found"}})
                kind = fake.classify(path, body)
                if kind == "main":
                    with fake.lock:
                        idx = fake.next_turn
                        fake.next_turn += 1
                    turn = fake.script[idx] if idx < len(fake.script) else Turn(text=fake.final_fallback_text)
                    self._record(body, raw, "main", idx)
                    fake.turn_started.set()
                else:
                    idx = None
                    turn = Turn(text=fake.side_reply(body), usage=fake.side_usage)
                    self._record(body, raw, "side")
                with fake.lock:
                    fake.sent.append((kind, idx, turn.usage.as_dict()))
                if turn.sleep_before:
                    time.sleep(turn.sleep_before)
                if turn.error:
                    st, et = turn.error
                    return self._json(st, {"type": "error", "error": {"type": et, "message": f"fake {et}"}},
                                      {"x-should-retry": "true"} if st >= 500 or st == 429 else None)
                model = body.get("model", "claude-fake")
                if body.get("stream"):
                    self._stream(turn, model)
                else:
                    self._json(200, fake.message_json(turn, model))

            # --- SSE -------------------------------------------------------
            def _chunk(self, data: bytes):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()

            def _event(self, name, obj):
                self._chunk(f"event: {name}\ndata: {json.dumps(obj)}\n\n".encode())

            def _stream(self, turn: Turn, model: str):
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream; charset=utf-8")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Transfer-Encoding", "chunked")
                self.send_header("request-id", "req_" + uuid.uuid4().hex[:24])
                self.end_headers()
                u = turn.usage
                msg = {
                    "id": "msg_" + uuid.uuid4().hex[:24], "type": "message", "role": "assistant",
                    "model": model, "content": [], "stop_reason": None, "stop_sequence": None,
                    # As the real API: message_start carries the input-side counts and a
                    # provisional output count; message_delta carries the final output count.
                    "usage": {"input_tokens": u.input_tokens,
                              "cache_creation_input_tokens": u.cache_creation_input_tokens,
                              "cache_read_input_tokens": u.cache_read_input_tokens,
                              "output_tokens": min(1, u.output_tokens)},
                }
                try:
                    self._event("message_start", {"type": "message_start", "message": msg})
                    self._event("ping", {"type": "ping"})
                    if turn.sleep_mid:
                        time.sleep(turn.sleep_mid)
                    if turn.break_stream:
                        self.close_connection = True
                        self.connection.shutdown(2)
                        return
                    for i, b in enumerate(turn.blocks()):
                        if b["type"] == "text":
                            self._event("content_block_start", {"type": "content_block_start", "index": i,
                                                                "content_block": {"type": "text", "text": ""}})
                            txt = b["text"]
                            for j in range(0, max(len(txt), 1), 40):
                                self._event("content_block_delta", {"type": "content_block_delta", "index": i,
                                                                    "delta": {"type": "text_delta", "text": txt[j:j + 40]}})
                        else:
                            self._event("content_block_start", {"type": "content_block_start", "index": i,
                                                                "content_block": {"type": "tool_use", "id": b["id"],
                                                                                  "name": b["name"], "input": {}}})
                            js = json.dumps(b["input"])
                            for j in range(0, len(js), 60):
                                self._event("content_block_delta", {"type": "content_block_delta", "index": i,
                                                                    "delta": {"type": "input_json_delta",
                                                                              "partial_json": js[j:j + 60]}})
                        self._event("content_block_stop", {"type": "content_block_stop", "index": i})
                    self._event("message_delta", {"type": "message_delta",
                                                  "delta": {"stop_reason": turn.final_stop_reason(), "stop_sequence": None},
                                                  "usage": (u.as_dict() if fake.delta_usage == "full"
                                                            else {"output_tokens": u.output_tokens})})
                    self._event("message_stop", {"type": "message_stop"})
                    self._chunk(b"")  # terminating zero-length chunk
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self._handler = Handler
        self.httpd = ThreadingHTTPServer((host, port), Handler)
        self.httpd.daemon_threads = True
        self.host, self.port = self.httpd.server_address[:2]
        self.base_url = f"http://{self.host}:{self.port}"
        # Optional second listener on a unix socket (for ANTHROPIC_UNIX_SOCKET, see NOTES.md).
        self.unix_path = unix_path
        self.unix_httpd = None
        if unix_path:
            if os.path.exists(unix_path):
                os.unlink(unix_path)
            self.unix_httpd = _UnixHTTPServer(unix_path, Handler)
            os.chmod(unix_path, 0o777)
        self._thread: threading.Thread | None = None

    # --- helpers -------------------------------------------------------------
    def classify(self, path: str, body: dict) -> str:
        if self.classify_fn:
            return self.classify_fn(path, body)
        if body.get("model") in self.side_models:
            return "side"
        return "main" if body.get("tools") else "side"

    @staticmethod
    def message_json(turn: Turn, model: str) -> dict:
        return {
            "id": "msg_" + uuid.uuid4().hex[:24], "type": "message", "role": "assistant",
            "model": model, "content": turn.blocks(), "stop_reason": turn.final_stop_reason(),
            "stop_sequence": None, "usage": turn.usage.as_dict(),
        }

    def start(self):
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self._thread.start()
        if self.unix_httpd:
            threading.Thread(target=self.unix_httpd.serve_forever, daemon=True).start()
        return self

    def stop(self):
        for h in (self.httpd, self.unix_httpd):
            if h:
                h.shutdown()
                h.server_close()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def main_requests(self) -> list:
        return [r for r in self.requests if r["kind"] == "main"]

    def usage_sums(self, kinds=("main",)) -> dict:
        tot = Usage().as_dict()
        for kind, _idx, u in self.sent:
            if kind in kinds:
                for k in tot:
                    tot[k] += u[k]
        return tot

    def dump(self, path: str):
        with open(path, "w") as f:
            json.dump(self.requests, f, indent=1, default=str)

    def summary(self) -> list:
        out = []
        for r in self.requests:
            b = r["body"] if isinstance(r["body"], dict) else {}
            out.append({"kind": r["kind"], "turn": r["turn"], "method": r["method"], "path": r["path"],
                        "model": b.get("model"), "stream": b.get("stream"),
                        "n_tools": len(b.get("tools") or []), "n_messages": len(b.get("messages") or []),
                        "max_tokens": b.get("max_tokens")})
        return out


if __name__ == "__main__":  # manual: python3 fake_anthropic.py  -> serves a 1-turn text script
    import sys
    srv = FakeAnthropic([Turn(text="Hello from the fake server.", usage=Usage(10, 5, 0, 0))],
                        port=int(sys.argv[1]) if len(sys.argv) > 1 else 8765).start()
    print("listening on", srv.base_url, flush=True)
    try:
        while True:
            time.sleep(1)
    except KeyboardInterrupt:
        srv.dump("requests.json")
