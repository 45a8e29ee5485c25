#!/usr/bin/env python3
"""Scripted fake of the OpenAI Responses API, enough to drive `codex exec`.

Stdlib only.  Verified against @openai/codex 0.171.0 (see NOTES.md).

What Codex 0.171.0 sends (custom provider, wire_api="responses"):
  POST {base_url}/responses   JSON body with stream=true, answered with SSE.
  No GET /models was observed.  Side requests: when the usage we report crosses
  Codex's auto-compact limit it sends POST /responses with header
  x-codex-turn-metadata.request_kind == "compaction"; such requests (and any
  other non-"turn" kind, GET .../models, /responses/compact) are recorded and
  answered without touching the script.

A script is a list of turns; each POST /responses whose header
`x-codex-turn-metadata` has request_kind == "turn" (or has no such header)
consumes the next turn.  A turn is a dict:

  {"output": [ITEM, ...],          # what the model "says"
   "usage": {...} | None | False,  # usage object; None = generated; False = omit
   "delay_s": 0.0}                 # sleep after response.created (budget tests)

A turn may also be a function of the request's body that returns such a dict: the
model answers what the tools said.  If the dict it returns has "again": True, the
same function also answers the next turn request (a model polling a command).

ITEM shortcuts (see _expand_item):
  {"text": "final answer"}                          -> assistant message
  {"call": "exec_command", "args": {"cmd": "..."}}  -> function_call
  {"custom": "apply_patch", "input": "*** Begin Patch..."} -> custom_tool_call
  or any raw Responses output item dict (has "type").

Run standalone:  python3 fake_openai_responses.py --port 8765 --script s.json
"""
from __future__ import annotations

import argparse
import itertools
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

_ids = itertools.count(1)


def _new_id(prefix: str) -> str:
    return f"{prefix}_{next(_ids):06d}"


def make_usage(input_tokens=1000, cached=0, output_tokens=50, reasoning=0):
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {"cached_tokens": cached},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": reasoning},
        "total_tokens": input_tokens + output_tokens,
    }


def _expand_item(spec: dict) -> dict:
    if "type" in spec:
        return dict(spec)
    if "text" in spec:
        return {
            "type": "message",
            "id": _new_id("msg"),
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": spec["text"], "annotations": []}],
        }
    if "call" in spec:
        args = spec.get("args", {})
        return {
            "type": "function_call",
            "id": _new_id("fc"),
            "call_id": spec.get("call_id") or _new_id("call"),
            "name": spec["call"],
            # Responses API: arguments is a JSON *string*
            "arguments": args if isinstance(args, str) else json.dumps(args),
            "status": "completed",
        }
    if "custom" in spec:  # freeform tools, e.g. apply_patch (tool type "custom")
        return {
            "type": "custom_tool_call",
            "id": _new_id("ctc"),
            "call_id": spec.get("call_id") or _new_id("call"),
            "name": spec["custom"],
            "input": spec["input"],
            "status": "completed",
        }
    raise ValueError(f"bad output item spec: {spec!r}")


class FakeResponsesServer:
    """ThreadingHTTPServer wrapper; use as a context manager or start()/stop()."""

    def __init__(self, script, host="127.0.0.1", port=0, log_path=None,
                 fallback_text="[fake server] script exhausted"):
        self.script = list(script)
        self.fallback_text = fallback_text
        self.requests: list[dict] = []       # every request, in arrival order
        self.sent_usage: list[dict] = []     # usage of each scripted turn that was started
        self.completed_turns: list[int] = [] # turns whose response.completed was fully written
        self.side_usage: list[dict] = []     # usage sent on side (non-"turn") /responses requests
        self.side_text = "Summary: (fake) nothing important."
        self.side_usage_template = make_usage(10, 0, 1, 0)
        self.turn_index = 0
        self.exhausted_hits = 0
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.log_fh = open(log_path, "a") if log_path else None
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, fmt, *a):  # quiet
                pass

            def _read_body(self):
                n = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(n) if n else b""
                try:
                    return json.loads(raw) if raw else None
                except Exception:
                    return raw.decode("latin1")

            def _json(self, code, obj):
                b = json.dumps(obj).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(b)))
                self.end_headers()
                self.wfile.write(b)

            def do_GET(self):
                outer._log(outer._record(self, None, "side"))
                if self.path.rstrip("/").split("?")[0].endswith("/models"):
                    # Both OpenAI ({"data": [...]}) and Codex ({"models": [...]}) shapes.
                    self._json(200, {"object": "list", "data": [], "models": []})
                else:
                    self._json(404, {"error": {"message": f"no route {self.path}"}})

            def do_POST(self):
                body = self._read_body()
                path = self.path.split("?")[0].rstrip("/")
                meta = {}
                try:
                    meta = json.loads(self.headers.get("x-codex-turn-metadata") or "{}")
                except Exception:
                    pass
                is_turn = path.endswith("/responses") and meta.get("request_kind", "turn") == "turn"
                rec = outer._record(self, body, "turn" if is_turn else "side")
                if path.endswith("/responses"):
                    if is_turn:
                        turn = outer._next_turn(rec)
                    else:  # e.g. request_kind "compaction": answer, don't consume the script
                        turn = {"output": [{"text": outer.side_text}], "usage": dict(outer.side_usage_template)}
                        rec["request_kind"] = meta.get("request_kind")
                        with outer.lock:
                            outer.side_usage.append(turn["usage"])
                    outer._log(rec)
                    self._stream(turn)
                elif path.endswith("/responses/compact"):
                    outer._log(rec)
                    self._json(200, {"output": []})  # never observed in 0.171.0; shape is a guess
                else:
                    outer._log(rec)
                    self._json(404, {"error": {"message": f"no route {self.path}"}})

            def _stream(self, turn):
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Connection", "close")
                self.end_headers()
                self.close_connection = True
                resp_id = _new_id("resp")

                def ev(d):
                    self.wfile.write(f"event: {d['type']}\ndata: {json.dumps(d)}\n\n".encode())
                    self.wfile.flush()

                try:
                    ev({"type": "response.created",
                        "response": {"id": resp_id, "object": "response", "status": "in_progress"}})
                    delay = float(turn.get("delay_s") or 0)
                    end = time.time() + delay
                    while time.time() < end and not outer.stopping.is_set():
                        time.sleep(0.05)
                    items = [_expand_item(s) for s in turn.get("output", [])]
                    for idx, item in enumerate(items):
                        if item["type"] == "message":
                            text = "".join(c.get("text", "") for c in item["content"])
                            ev({"type": "response.output_item.added", "output_index": idx,
                                "item": {**item, "status": "in_progress", "content": []}})
                            ev({"type": "response.content_part.added", "output_index": idx,
                                "item_id": item["id"], "content_index": 0,
                                "part": {"type": "output_text", "text": "", "annotations": []}})
                            ev({"type": "response.output_text.delta", "output_index": idx,
                                "item_id": item["id"], "content_index": 0, "delta": text})
                            ev({"type": "response.output_text.done", "output_index": idx,
                                "item_id": item["id"], "content_index": 0, "text": text})
                        elif item["type"] == "function_call":
                            ev({"type": "response.output_item.added", "output_index": idx,
                                "item": {**item, "arguments": "", "status": "in_progress"}})
                            ev({"type": "response.function_call_arguments.delta", "output_index": idx,
                                "item_id": item["id"], "delta": item["arguments"]})
                            ev({"type": "response.function_call_arguments.done", "output_index": idx,
                                "item_id": item["id"], "arguments": item["arguments"]})
                        else:
                            ev({"type": "response.output_item.added", "output_index": idx, "item": item})
                        ev({"type": "response.output_item.done", "output_index": idx, "item": item})
                    ev({"type": "response.completed",
                        "response": {"id": resp_id, "object": "response", "status": "completed",
                                     "output": items,
                                     **({"usage": turn["usage"]} if turn["usage"] else {})}})
                    if "turn" in turn:
                        with outer.lock:
                            outer.completed_turns.append(turn["turn"])
                except (BrokenPipeError, ConnectionResetError):
                    pass  # client went away (e.g. codex was killed mid-turn)

        self.httpd = ThreadingHTTPServer((host, port), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    # -- bookkeeping -------------------------------------------------------
    def _record(self, handler, body, kind):
        rec = {"n": None, "t": time.time(), "method": handler.command, "path": handler.path,
               "headers": dict(handler.headers), "body": body, "kind": kind}
        with self.lock:
            rec["n"] = len(self.requests)
            self.requests.append(rec)
        return rec

    def _log(self, rec):
        if self.log_fh:
            with self.lock:
                self.log_fh.write(json.dumps(rec) + "\n")
                self.log_fh.flush()

    def _next_turn(self, rec):
        with self.lock:
            i = self.turn_index
            self.turn_index += 1
            if i < len(self.script):
                entry = self.script[i]
                turn = dict(entry(rec["body"]) if callable(entry) else entry)
                if turn.pop("again", False):
                    self.script.insert(i + 1, entry)
            else:
                self.exhausted_hits += 1
                turn = {"output": [{"text": self.fallback_text}]}
            turn.setdefault("usage", None)
            if turn["usage"] is None:
                turn["usage"] = make_usage(1000 * (i + 1), 100 * i, 10 * (i + 1), i)
            rec["turn"] = turn["turn"] = i
            self.sent_usage.append(turn["usage"])
        return turn

    # -- lifecycle ---------------------------------------------------------
    @property
    def port(self):
        return self.httpd.server_address[1]

    @property
    def base_url(self):
        return f"http://127.0.0.1:{self.port}/v1"

    def delivered_usage(self):
        """Usage objects that actually reached the client (response.completed written)."""
        with self.lock:
            return [self.sent_usage[i] for i in self.completed_turns]

    def turn_requests(self):
        return [r for r in self.requests if r["kind"] == "turn"]

    def side_requests(self):
        return [r for r in self.requests if r["kind"] != "turn"]

    def start(self):
        self.thread.start()
        return self

    def stop(self):
        self.stopping.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        if self.log_fh:
            self.log_fh.close()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=8765)
    ap.add_argument("--script", help="JSON file with a list of turns")
    ap.add_argument("--log", default="requests.jsonl")
    a = ap.parse_args()
    script = json.load(open(a.script)) if a.script else [{"output": [{"text": "hello"}]}]
    srv = FakeResponsesServer(script, port=a.port, log_path=a.log).start()
    print(f"listening on {srv.base_url}", file=sys.stderr)
    try:
        srv.thread.join()
    except KeyboardInterrupt:
        srv.stop()


if __name__ == "__main__":
    main()
