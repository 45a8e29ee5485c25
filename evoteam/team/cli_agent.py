"""Coding-agent CLIs as team members: Claude Code, Codex, or any CLI given as a command template.

A turn runs the CLI once, non-interactively, in the member's own folder of the shared workspace
(`workspace/members/<team>-<role>/`). The folder holds BRIEF.md (the task brief and the state of the
search) and `evoteam-tool`, the command through which the CLI checks, benchmarks and submits its kernel
files: each call goes over a unix socket to this process, which runs it through the team's toolbox
(the isolated harness, the ledger, the journal), so a CLI's evaluations are the same as any member's.
Earlier attempts, failure logs and notes are files of the workspace, which the CLI may read.

The CLI runs under bubblewrap: the root read-only, writable only its member folder and a private home,
its own PID namespace, its whole process tree ended with the turn. The network is shared: a CLI must
reach its model provider. Tokens are read from the CLI's machine-readable output as it streams and
charged to the ledger; when the team's tokens, evaluations or time run out the CLI is stopped (its
files stay) and the run ends as it would with any member.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

from evoteam.errors import UserError
from evoteam.llm import Usage
from evoteam.team.agent import TurnContext
from evoteam.team.budget import BudgetExceeded
from evoteam.team.spec import RoleSpec
from evoteam.team.toolbox import Toolbox

CLI_KINDS = ("claude_code", "codex", "command")
DEFAULT_BINARY = {"claude_code": "claude", "codex": "codex"}
DEFAULT_KEY_ENV = {"claude_code": "ANTHROPIC_API_KEY", "codex": "OPENAI_API_KEY"}
STOP_GRACE_S = 2.0
SANDBOX_HOME = Path("/run/evoteam-home")

TOOL_CLIENT = '''#!/usr/bin/env python3
"""evoteam's tools for this member: check, bench and submit a kernel file of this folder."""
import json, os, socket, sys

USAGE = ("usage: ./evoteam-tool check FILE [WORKLOAD ...] | bench FILE [WORKLOAD ...] | submit FILE [NOTE]\\n"
         "  check: correctness against the reference (no timing); bench: check and time against the baseline;\\n"
         "  submit: your result for this turn (it is benchmarked). WORKLOAD: uuid prefixes (default: a probe set).")
if len(sys.argv) < 3 or sys.argv[1] not in ("check", "bench", "submit"):
    print(USAGE, file=sys.stderr)
    sys.exit(2)
request = {"tool": sys.argv[1], "file": sys.argv[2], "rest": sys.argv[3:]}
with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
    s.connect(os.environ.get("EVOTEAM_TOOL_SOCKET", "SOCKET_PATH"))
    s.sendall(json.dumps(request).encode() + b"\\n")
    reply = b"".join(iter(lambda: s.recv(65536), b""))
print(reply.decode())
sys.exit(0 if not reply.startswith(b"error") else 1)
'''

INSTRUCTIONS = """You are {name}, the {kind} of a team of agents optimising a GPU kernel; you work as a coding
agent in this folder. BRIEF.md holds the task (the entry point, workloads, rules, hardware, reference)
and the state of the search (budget left, the best kernel so far or the seed kernel). Write kernel files
here, then use `./evoteam-tool check FILE`, `./evoteam-tool bench FILE` and, when you have your best verified
kernel, `./evoteam-tool submit FILE NOTE` (it ends your turn's work). Every check and benchmark counts
against the team's evaluation budget. The team's shared workspace (earlier attempts in attempts/, their
results, failure logs, notes) is readable at {workspace}.{instructions}"""


class ToolServer:
    """Runs the CLI's `evoteam-tool` calls through the member's toolbox, one at a time."""

    def __init__(self, toolbox: Toolbox, folder: Path, socket_path: Path):
        self.toolbox, self.folder, self.socket_path = toolbox, folder, socket_path
        self.calls: Counter = Counter()
        self.submitted: list[str] = []
        self.budget_spent: BudgetExceeded | None = None
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.bind(str(socket_path))
        self._sock.listen(4)
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return  # closed
            with conn:
                try:
                    data = b""
                    while not data.endswith(b"\n"):
                        chunk = conn.recv(65536)
                        if not chunk:
                            break
                        data += chunk
                    conn.sendall(self.handle(json.loads(data or b"{}")).encode())
                except (OSError, ValueError):
                    continue

    def handle(self, request: dict) -> str:
        tool, name, rest = request.get("tool"), str(request.get("file", "")), list(request.get("rest") or [])
        if tool not in ("check", "bench", "submit"):
            return "error: the tool is check, bench or submit"
        path = (self.folder / name).resolve()
        if path.parent != self.folder.resolve() or not path.is_file():
            return f"error: {name!r} is not a file of this folder; give a plain file name, e.g. v1.py"
        if self.budget_spent is not None:
            return f"error: {self.budget_spent}; stop now"
        self.calls[tool] += 1
        self.toolbox.drafts[name] = path.read_text()
        try:
            if tool == "submit":
                before = len(self.toolbox.submitted)
                reply = self.toolbox.submit(name, " ".join(rest))
                self.submitted += self.toolbox.submitted[before:]
                return reply
            method = self.toolbox.run_check if tool == "check" else self.toolbox.run_benchmark
            return method(name, rest or None)
        except BudgetExceeded as exc:
            self.budget_spent = exc
            return f"error: {exc}; stop now"

    def close(self) -> None:
        self._sock.close()


class UsageMeter:
    """The CLI's token usage as its output streams: Claude Code's stream-json events (message_start and
    message_delta of each model call, then the final result) or Codex's JSON events (token counts,
    turn.completed); what is new is charged to the ledger as it arrives."""

    def __init__(self, kind: str, charge):
        self.kind, self.charge = kind, charge
        self.total = Usage()
        self.calls = 0
        self.cost_usd: float | None = None
        self.text = ""  # the CLI's last words
        self._pending_input: dict | None = None

    def line(self, raw: str) -> None:
        try:
            event = json.loads(raw)
        except ValueError:
            return
        if not isinstance(event, dict):
            return
        if self.kind == "claude_code":
            self._claude(event)
        elif self.kind == "codex":
            self._codex(event)

    def _add(self, usage: Usage) -> None:
        if usage.total_tokens or usage.calls or usage.cost_usd:
            self.total.add(usage)
            self.charge(usage)

    def _claude(self, event: dict) -> None:
        kind = event.get("type")
        if kind == "stream_event":
            inner = event.get("event") or {}
            if inner.get("type") == "message_start":
                u = (inner.get("message") or {}).get("usage") or {}
                cached = int(u.get("cache_read_input_tokens") or 0)
                prompt = int(u.get("input_tokens") or 0) + int(u.get("cache_creation_input_tokens") or 0) + cached
                self.calls += 1
                self._add(Usage(prompt_tokens=prompt, cached_tokens=cached, calls=1))
            elif inner.get("type") == "message_delta":
                self._add(Usage(completion_tokens=int((inner.get("usage") or {}).get("output_tokens") or 0)))
        elif kind == "result":
            u = event.get("usage") or {}
            cached = int(u.get("cache_read_input_tokens") or 0)
            final = Usage(prompt_tokens=int(u.get("input_tokens") or 0) + int(u.get("cache_creation_input_tokens") or 0)
                          + cached, completion_tokens=int(u.get("output_tokens") or 0), cached_tokens=cached)
            self.cost_usd = event.get("total_cost_usd")
            final.cost_usd = float(self.cost_usd or 0.0)  # the CLI's list price, as litellm's is for the LLM layer
            self._true_up(final)
            self.text = str(event.get("result") or self.text)

    def _codex(self, event: dict) -> None:
        if event.get("type") == "turn.completed":
            u = event.get("usage") or {}
            self._true_up(Usage(prompt_tokens=int(u.get("input_tokens") or 0),
                                cached_tokens=int(u.get("cached_input_tokens") or 0),
                                completion_tokens=int(u.get("output_tokens") or 0),
                                reasoning_tokens=int(u.get("reasoning_output_tokens") or 0)))
        item = event.get("item") or {}
        if event.get("type") == "item.completed" and item.get("type") == "agent_message":
            self.text = str(item.get("text") or self.text)

    def _true_up(self, final: Usage) -> None:
        """The CLI's own total for the run: charge what the stream had not shown yet."""
        extra = Usage(prompt_tokens=max(0, final.prompt_tokens - self.total.prompt_tokens),
                      completion_tokens=max(0, final.completion_tokens - self.total.completion_tokens),
                      cached_tokens=max(0, final.cached_tokens - self.total.cached_tokens),
                      reasoning_tokens=max(0, final.reasoning_tokens - self.total.reasoning_tokens),
                      cost_usd=max(0.0, final.cost_usd - self.total.cost_usd))
        self._add(extra)


def _cli_root(binary: str) -> Path:
    """The folder a CLI's files live in (its npm tree), bound read-only into the sandbox."""
    real = Path(binary).resolve()
    for parent in real.parents:
        if parent.name == "node_modules":
            return parent.parent
    return real.parent


class CLIAgent:
    def __init__(self, role: RoleSpec, settings, task_brief: str, sandbox: str = "strict"):
        if role.agent not in CLI_KINDS:
            raise ValueError(f"role {role.name}: agent {role.agent!r} is not a CLI ({', '.join(CLI_KINDS)})")
        self.role, self.settings, self.task_brief, self.sandbox = role, settings, task_brief, sandbox
        self.kind = role.agent

    # ------------------------------------------------------------------ the command line
    def binary(self) -> str:
        """The CLI's executable, absolute; one line saying how to get it if it is not there."""
        if self.kind == "command":
            words = (self.settings.command or "").split()
            if not words:
                raise UserError("agent=command needs 'agent.command=\"<cli> ... {prompt_file} ...\"' ({prompt_file}, "
                                "{workdir} and {model} are filled in)")
            found = shutil.which(words[0])
            if not found:
                raise UserError(f"agent.command: the program {words[0]!r} is not found; give its path")
            return os.path.abspath(found)
        given = getattr(self.settings, "binary", "") or DEFAULT_BINARY.get(self.kind, "")
        found = shutil.which(given) if given else None
        if not found:
            raise UserError(f"agent={self.kind}: the CLI {given!r} is not found; install it (npm install -g "
                            f"{'@anthropic-ai/claude-code' if self.kind == 'claude_code' else '@openai/codex'}) "
                            f"or set agent.binary=<path>")
        return os.path.abspath(found)

    def command(self, folder: Path, home: Path, prompt: str) -> tuple[list[str], dict[str, str]]:
        s = self.settings
        key_env = s.api_key_env or DEFAULT_KEY_ENV.get(self.kind, "")
        key = os.environ.get(key_env, "") if key_env else ""
        env = {"HOME": str(home), "TMPDIR": "/tmp", "PATH": f"{folder}:/usr/local/bin:/usr/bin:/bin",
               "LANG": "C.UTF-8"}
        if self.kind == "claude_code":
            cmd = [self.binary(), "-p", prompt, "--output-format", "stream-json", "--verbose",
                   "--include-partial-messages", "--dangerously-skip-permissions", "--no-session-persistence",
                   "--max-turns", str(s.max_turns)]
            if s.model:
                cmd += ["--model", s.model]
            env.update({"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_AUTOUPDATER": "1",
                        "DISABLE_TELEMETRY": "1", "DISABLE_ERROR_REPORTING": "1",
                        "IS_SANDBOX": "1",  # it runs under bubblewrap; as root it refuses to skip permissions otherwise
                        "ANTHROPIC_API_KEY": key})
            if s.base_url:
                env["ANTHROPIC_BASE_URL"] = s.base_url
            return cmd, env
        if self.kind == "codex":
            cmd = [self.binary(), "exec", "--json", "--skip-git-repo-check", "-C", str(folder),
                   "--dangerously-bypass-approvals-and-sandbox",  # bubblewrap confines it instead
                   "-c", "features.plugins=false", "-c", "analytics.enabled=false",
                   "-c", f'shell_environment_policy.exclude=["{key_env}"]']
            if s.model:
                cmd += ["-m", s.model]
            if s.base_url:
                cmd += ["-c", 'model_provider="evoteam"', "-c", 'model_providers.evoteam.name="evoteam"',
                        "-c", f'model_providers.evoteam.base_url="{s.base_url}"',
                        "-c", f'model_providers.evoteam.env_key="{key_env}"',
                        "-c", 'model_providers.evoteam.wire_api="responses"']
            env.update({"CODEX_HOME": str(home / ".codex"), key_env: key})
            return cmd + [prompt], env
        (folder / "PROMPT.md").write_text(prompt)
        words = [self.binary()] + [w.format(prompt_file=folder / "PROMPT.md", workdir=folder, model=s.model)
                                   for w in s.command.split()[1:]]
        env[key_env or "EVOTEAM_NO_KEY"] = key
        return words, env

    def sandboxed(self, cmd: list[str], env: dict[str, str], folder: Path, workspace: Path,
                  socket_dir: Path) -> list[str]:
        bwrap = shutil.which("bwrap")
        if bwrap is None:
            if self.sandbox == "weak":
                return cmd
            raise UserError("agent CLIs run under bubblewrap, which is not installed: make sandbox (or "
                            "executor.sandbox=weak to run the CLI unconfined)")
        args = [bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp",
                "--tmpfs", "/run", "--dir", str(SANDBOX_HOME), "--dir", str(SANDBOX_HOME / ".codex"),
                "--ro-bind", str(workspace), str(workspace), "--bind", str(folder), str(folder),
                "--bind", str(socket_dir), str(socket_dir),
                "--unshare-user", "--uid", "1000", "--gid", "1000", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--die-with-parent", "--new-session",
                "--chdir", str(folder), "--clearenv"]
        if cmd and Path(cmd[0]).is_absolute():
            root = _cli_root(cmd[0])
            args += ["--ro-bind", str(root), str(root)]
        for k, v in env.items():
            args += ["--setenv", k, v]
        return args + ["--"] + cmd

    # ------------------------------------------------------------------ a turn
    def turn(self, toolbox: Toolbox, context: TurnContext) -> str:
        ledger, role = toolbox.ledger, self.role
        workspace = toolbox.workspace.root
        folder = workspace / "members" / f"{toolbox.team_id}-{role.name}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "BRIEF.md").write_text(f"{self.task_brief}\n\n# The state of the search\n\n{context.brief}\n")
        scratch = Path(tempfile.mkdtemp(prefix="evoteam-cli-"))  # short: a unix socket path has 108 bytes
        confined = shutil.which("bwrap") is not None
        # The CLI's home: a tmpfs of its own under bubblewrap (Codex refuses a home under /tmp), else scratch.
        home = SANDBOX_HOME if confined else scratch / "home"
        if not confined:
            (home / ".codex").mkdir(parents=True)
        sock = scratch / "tools.sock"
        tool = folder / "evoteam-tool"
        tool.write_text(TOOL_CLIENT.replace("SOCKET_PATH", str(sock)))
        tool.chmod(0o755)
        instructions = f"\nInstructions from the supervisor: {role.instructions}" if role.instructions else ""
        prompt = INSTRUCTIONS.format(name=role.name, kind=role.kind, workspace=workspace, instructions=instructions)
        server = ToolServer(toolbox, folder, sock)

        def charge(usage: Usage) -> None:
            ledger.record_llm(toolbox.team_id, role.name, usage)

        meter = UsageMeter(self.kind, charge)
        stop, started = "finished", time.monotonic()
        try:
            ledger.allow_call()  # no CLI starts with the token budget spent
            cmd, env = self.command(folder, home, prompt)
            env["EVOTEAM_TOOL_SOCKET"] = str(sock)
            full = self.sandboxed(cmd, env, folder, workspace, scratch)
            plain_env = None if full is not cmd else {**env}
            proc = subprocess.Popen(full, cwd=folder, env=plain_env, stdin=subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                    start_new_session=True)
            stderr: list[str] = []
            err_thread = threading.Thread(target=lambda: stderr.extend(proc.stderr), daemon=True)
            err_thread.start()
            deadline = started + min(float(self.settings.timeout_s), max(0.0, ledger.max_wall_time_s
                                                                        - ledger.elapsed_s()))
            timer = threading.Timer(max(0.0, deadline - time.monotonic()), _end, args=(proc,))
            timer.start()
            try:
                with open(folder / f"cli-{self.kind}.jsonl", "a") as log:
                    for raw in proc.stdout:
                        log.write(raw)
                        meter.line(raw)
                        if ledger.tokens_left() <= 0 and stop == "finished":
                            stop = f"token budget spent: {ledger.total.total_tokens} of {ledger.token_budget}"
                            _end(proc)
                        elif server.budget_spent is not None and stop == "finished":
                            stop = str(server.budget_spent)
                            _end(proc)
                proc.wait()
            finally:
                timer.cancel()
                _end(proc)
                err_thread.join(timeout=5)
            if stop == "finished" and time.monotonic() >= deadline:
                stop = f"time limit ({deadline - started:.0f} s) reached"
            elif stop == "finished" and proc.returncode != 0:
                stop = f"exit {proc.returncode}: {' '.join(''.join(stderr).split())[-300:]}"
        finally:
            server.close()
            shutil.rmtree(scratch, ignore_errors=True)
        account = (f"{role.name} ({role.kind}, {self.kind} CLI): {meter.calls} model call(s), "
                   f"{meter.total.total_tokens} tokens; tools: "
                   f"{', '.join(f'{k} x{n}' for k, n in server.calls.items()) or 'none'}; stopped: {stop}")
        if server.submitted:
            account += f"; submitted {', '.join(server.submitted)}"
        text = " ".join(meter.text.split())
        if text:
            account += f"; said: {text[:300]}{'...' if len(text) > 300 else ''}"
        if server.budget_spent is not None:
            raise BudgetExceeded(str(server.budget_spent))
        if meter.calls == 0 and stop.startswith("exit"):
            # It did nothing a budget counts: the next turn would fail the same way, for ever.
            raise UserError(f"the {self.kind} CLI ({cmd[0]}) failed before any model call, {stop}")
        if ledger.tokens_left() <= 0:
            raise BudgetExceeded(f"token budget spent: {ledger.total.total_tokens} of {ledger.token_budget} "
                                 f"(the {self.kind} CLI was stopped; {account})")
        if stop.startswith("time limit") and ledger.elapsed_s() > ledger.max_wall_time_s:
            ledger.check_time()
        return account


def _end(proc: subprocess.Popen) -> None:
    """End the CLI's whole process group: SIGTERM, then SIGKILL after a grace period."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=STOP_GRACE_S)
    except (ProcessLookupError, PermissionError):
        return
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
