"""A local server speaking the OpenAI chat-completions protocol, answering from a fixed script of replies.

It stands in for a model server on the device (vLLM, SGLang) so that an LLM team (`llm=litellm`) runs end to end
with turns written beforehand: scripts/llm_turns/<name>/turns.json lists the model's replies in order (content
and tool calls; a tool call's argument {"file": NAME} is the text of that file of the folder, e.g. a kernel's
source; "{tool_result}" in a reply's content is the first line of the latest tool result of the request it
answers). Each `POST /v1/chat/completions` takes the next reply; once the script is used up every request gets
a 500 (a client's retries included). `GET /v1/models` names the one model, `GET /health` answers 200.

The usage of a reply is what a real server would count, roughly: prompt tokens from the request's size (its
messages and tools as JSON), completion tokens from the reply's (content, tool names and arguments), at
CHARS_PER_TOKEN characters a token; completion tokens are clamped to the request's max_tokens. Every request and
its answer is one JSON line of the transcript (--transcript).

    python scripts/scripted_llm.py --port 8011 --turns mla_decode --transcript /tmp/transcript.jsonl
    python -m evoteam ... llm=litellm llm.model=openai/scripted llm.api_base=http://127.0.0.1:8011/v1 \
        llm.api_key_env=SCRIPTED_LLM_KEY

`--port 0` takes a free port; `--port-file F` writes the port taken to F once the server listens. After a run,
`python scripts/scripted_llm.py --log-run RUN_DIR --transcript T` compares the run's token ledger with the usage
the server reported, and where the run was tracked in MLflow (RUN_DIR/mlflow_run.json) logs the transcript, the
ledger and the run's LLM journal as artifacts of its MLflow run (folder llm/) and counts the run's LLM traces.

Standalone on purpose (the standard library only; mlflow for --log-run): it runs on a lent machine beside evoteam.
"""

from __future__ import annotations

import argparse
import json
import math
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

TURNS_DIR = Path(__file__).resolve().parent / "llm_turns"
CHARS_PER_TOKEN = 4  # OpenAI's rule of thumb for English and code
MODEL = "scripted"


@dataclass
class Reply:
    content: str | None
    tool_calls: list[dict] = field(default_factory=list)  # [{"name", "arguments": JSON text}]


def turns_folder(turns: str) -> Path:
    """`turns` as a folder: a path, else a name under scripts/llm_turns/."""
    path = Path(turns)
    folder = path if path.is_dir() else TURNS_DIR / turns
    if not (folder / "turns.json").is_file():
        known = sorted(p.name for p in TURNS_DIR.iterdir() if (p / "turns.json").is_file())
        raise SystemExit(f"no turns.json in {folder}; known turns: {', '.join(known)}")
    return folder


def load_script(turns: str) -> list[Reply]:
    """The replies of a turns folder, the files its tool calls name read in."""
    folder = turns_folder(turns)
    spec = json.loads((folder / "turns.json").read_text())
    replies = []
    for entry in spec["replies"]:
        calls = []
        for call in entry.get("tool_calls", []):
            args = {k: (folder / v["file"]).read_text() if isinstance(v, dict) and set(v) == {"file"} else v
                    for k, v in call.get("arguments", {}).items()}
            calls.append({"name": call["name"], "arguments": json.dumps(args)})
        replies.append(Reply(entry.get("content"), calls))
    return replies


def count_tokens(text: str) -> int:
    return max(1, math.ceil(len(text) / CHARS_PER_TOKEN))


def prompt_tokens(body: dict) -> int:
    return count_tokens(json.dumps(body.get("messages", [])) + json.dumps(body.get("tools") or []))


def completion_tokens(reply: Reply) -> int:
    return count_tokens((reply.content or "") + "".join(c["name"] + c["arguments"] for c in reply.tool_calls))


def latest_tool_result(body: dict) -> str:
    for message in reversed(body.get("messages", [])):
        if message.get("role") == "tool":
            lines = str(message.get("content") or "").strip().splitlines()
            return lines[0] if lines else "(empty)"
    return "(no tool result yet)"


class ScriptedLLM:
    """The server: `start()` binds host:port (0: a free one), `stop()` shuts it down; also a context manager."""

    def __init__(self, script: list[Reply], transcript: Path | None = None, host: str = "127.0.0.1", port: int = 0):
        self.script = list(script)
        self.transcript = Path(transcript) if transcript else None
        self.host, self.requested_port = host, port
        self.requests = 0
        self.used = 0  # replies of the script answered
        self.usage = {"prompt_tokens": 0, "completion_tokens": 0}  # summed over the 200 answers
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        assert self._server is not None, "server not started"
        return self._server.server_address[1]

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def start(self) -> ScriptedLLM:
        if self.transcript is not None:
            self.transcript.parent.mkdir(parents=True, exist_ok=True)
            self.transcript.write_text("")
        self._server = ThreadingHTTPServer((self.host, self.requested_port), _handler_for(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._server = self._thread = None

    def __enter__(self) -> ScriptedLLM:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def summary(self) -> str:
        return (f"{self.requests} requests, {self.used} of {len(self.script)} scripted replies used; usage: prompt "
                f"{self.usage['prompt_tokens']}, completion {self.usage['completion_tokens']}")

    # ------------------------------------------------------------------ one request
    def answer(self, body: dict) -> tuple[int, dict]:
        with self._lock:
            self.requests += 1
            number = self.requests
            if self.used >= len(self.script):
                status, obj, step = 500, {"error": {"message": "scripted LLM: the script is used up",
                                                    "type": "server_error", "code": None}}, None
            else:
                step = self.used + 1
                reply = self.script[self.used]
                self.used += 1
                status, obj = 200, self._completion(number, reply, body)
                for k in self.usage:
                    self.usage[k] += obj["usage"][k]
            if self.transcript is not None:
                line = {"request": number, "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "reply": step,
                        "status": status, "body": body, "response": obj}
                with open(self.transcript, "a") as fh:
                    fh.write(json.dumps(line) + "\n")
            return status, obj

    def _completion(self, number: int, reply: Reply, body: dict) -> dict:
        content = reply.content
        if content and "{tool_result}" in content:
            content = content.replace("{tool_result}", latest_tool_result(body))
        reply = Reply(content, reply.tool_calls)
        limit = body.get("max_completion_tokens") or body.get("max_tokens")
        completion = completion_tokens(reply)
        completion = min(completion, int(limit)) if limit else completion
        prompt = prompt_tokens(body)
        message: dict = {"role": "assistant", "content": content}
        if reply.tool_calls:
            message["tool_calls"] = [{"id": f"call_{number}_{i}", "type": "function",
                                      "function": {"name": c["name"], "arguments": c["arguments"]}}
                                     for i, c in enumerate(reply.tool_calls, 1)]
        return {"id": f"chatcmpl-scripted-{number}", "object": "chat.completion", "created": int(time.time()),
                "model": body.get("model") or MODEL,
                "choices": [{"index": 0, "message": message,
                             "finish_reason": "tool_calls" if reply.tool_calls else "stop"}],
                "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                          "total_tokens": prompt + completion,
                          "prompt_tokens_details": {"cached_tokens": 0},
                          "completion_tokens_details": {"reasoning_tokens": 0}}}


def _handler_for(server: ScriptedLLM) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:  # the transcript is the log
            pass

        def _send(self, status: int, obj: dict) -> None:
            data = json.dumps(obj).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass

        def do_GET(self) -> None:
            path = self.path.rstrip("/")
            if path in ("/v1/models", "/models"):
                self._send(200, {"object": "list", "data": [{"id": MODEL, "object": "model", "created": 0,
                                                              "owned_by": "evoteam-scripted"}]})
            elif path == "/health":
                self._send(200, {"status": "ok", "requests": server.requests, "used": server.used,
                                 "replies": len(server.script)})
            else:
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
            self._send(*server.answer(body))

    return Handler


# ---------------------------------------------------------------------- after a run


def transcript_usage(transcript: Path) -> dict:
    """Requests, answers and the usage the server reported, from a transcript."""
    lines = [json.loads(line) for line in Path(transcript).read_text().splitlines() if line.strip()]
    ok = [line for line in lines if line["status"] == 200]
    return {"requests": len(lines), "answered": len(ok),
            "prompt_tokens": sum(line["response"]["usage"]["prompt_tokens"] for line in ok),
            "completion_tokens": sum(line["response"]["usage"]["completion_tokens"] for line in ok)}


def log_run(run_dir: Path, transcript: Path) -> int:
    """Compare the run's token ledger (state.json) with the server's usage; log the transcript, the ledger and the
    LLM journal to the run's MLflow run if it has one. 0 when the ledger matches the server's usage."""
    run_dir = Path(run_dir)
    if not (run_dir / "state.json").is_file() or not Path(transcript).is_file():
        print(f"no {run_dir / 'state.json'} or no {transcript}: the run did not start; nothing to compare")
        return 1
    served = transcript_usage(transcript)
    state = json.loads((run_dir / "state.json").read_text())
    total = state.get("tokens_total") or {}
    ledger = {"total": total, "by_team": state.get("tokens_by_team", {}), "by_role": state.get("tokens_by_role", {}),
              "served": served}
    matches = (total.get("prompt_tokens") == served["prompt_tokens"]
               and total.get("completion_tokens") == served["completion_tokens"]
               and total.get("calls") == served["answered"])
    print(f"server: {served['requests']} requests, {served['answered']} answered; usage prompt "
          f"{served['prompt_tokens']}, completion {served['completion_tokens']}")
    print(f"ledger: {total.get('calls')} calls; prompt {total.get('prompt_tokens')}, completion "
          f"{total.get('completion_tokens')}; {'matches' if matches else 'DIFFERS FROM'} the server's usage")
    (run_dir / "token_ledger.json").write_text(json.dumps(ledger, indent=1))
    run_file = run_dir / "mlflow_run.json"
    if not run_file.is_file():
        print("mlflow: the run was not tracked (no mlflow_run.json); nothing logged")
        return 0 if matches else 1
    saved = json.loads(run_file.read_text())
    import mlflow
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=saved["tracking_uri"])
    for path in (Path(transcript), run_dir / "token_ledger.json", run_dir / "llm_journal.jsonl",
                 run_dir / "brief.md", run_dir / "run.log"):
        if path.is_file():
            client.log_artifact(saved["run_id"], str(path), "llm")
    artifacts = sorted(a.path for a in client.list_artifacts(saved["run_id"], "llm"))
    print(f"mlflow: run {saved['run_id']} in {saved['tracking_uri']}: artifacts {', '.join(artifacts)}")
    try:
        mlflow.set_tracking_uri(saved["tracking_uri"])
        run = client.get_run(saved["run_id"])
        where = [run.info.experiment_id]
        try:
            traces = mlflow.search_traces(locations=where, run_id=saved["run_id"], return_type="list")
        except TypeError:  # an MLflow before `locations`
            traces = mlflow.search_traces(experiment_ids=where, run_id=saved["run_id"], return_type="list")
        print(f"mlflow: {len(traces)} LLM trace(s) linked to the run")
    except Exception as exc:  # the count is a report, not a condition
        print(f"mlflow: could not count the run's traces ({type(exc).__name__}: {exc})")
    return 0 if matches else 1


# ---------------------------------------------------------------------- command line


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python scripts/scripted_llm.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=0, help="port to listen on (0: a free one)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--turns", default="mla_decode", help="a folder of scripts/llm_turns/, or a path")
    parser.add_argument("--transcript", type=Path, help="JSONL file of every request and its answer")
    parser.add_argument("--port-file", type=Path, help="write the port taken here once listening")
    parser.add_argument("--log-run", type=Path, metavar="RUN_DIR",
                        help="instead of serving: compare RUN_DIR's token ledger with --transcript's usage and log "
                             "the transcript to the run's MLflow run")
    args = parser.parse_args(argv)
    if args.log_run is not None:
        if args.transcript is None:
            parser.error("--log-run needs --transcript")
        return log_run(args.log_run, args.transcript)
    server = ScriptedLLM(load_script(args.turns), args.transcript, args.host, args.port).start()
    if args.port_file is not None:
        args.port_file.write_text(f"{server.port}\n")
    print(f"scripted LLM: {len(server.script)} replies of {turns_folder(args.turns).name} at {server.url}"
          f"{'; transcript ' + str(args.transcript) if args.transcript else ''}", flush=True)
    stopped = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stopped.set())
    while not stopped.wait(0.5):
        pass
    server.stop()
    print(f"scripted LLM: stopped; {server.summary()}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
