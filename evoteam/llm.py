"""LLM access, through litellm only: one chat-completion call with tools, its usage and cost,
retries with capped exponential backoff on transient failures, a preflight check of the
configuration, and a journal that lets a resumed run replay its conversations for free.

    client = LLMClient(cfg.llm, journal=run_dir / "llm_journal.jsonl")
    client.preflight()                      # before any work: a missing key or unknown model
    reply = client.complete(messages, tools, max_tokens=ledger.allow_call())

Transient failures (429, 5xx, timeouts, connection errors) are retried up to `max_retries` times;
anything else (bad request, authentication, ...) fails at once. Both end in `LLMError`, one line.

The journal holds one JSON line per completed call: {"request_hash", "reply"}. The request hash
covers model, messages, tools and max_tokens; a request whose hash is in the journal is answered
with the recorded reply (`replayed=True`, with its recorded usage) without reaching the server.
Identical requests are replayed in the order they were recorded; once the recorded replies of a
hash are used up, the server is asked again. A run resumed from a checkpoint calls
`resume_after(ledger.total.calls)` so that the calls already counted in the restored ledger are not
replayed a second time (journal entries and recorded calls are one to one, in the same order).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from evoteam.errors import UserError

DEFAULT_CONTEXT_TOKENS = 32_000  # a model whose window litellm does not know

# litellm otherwise fetches its model-price map from the network at import time.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


@dataclass
class Usage:
    """Tokens and cost of LLM calls (one call, or a sum of them)."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    reasoning_tokens: int = 0
    cost_usd: float = 0.0
    calls: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def add(self, other: Usage) -> None:
        self.prompt_tokens += other.prompt_tokens
        self.completion_tokens += other.completion_tokens
        self.cached_tokens += other.cached_tokens
        self.reasoning_tokens += other.reasoning_tokens
        self.cost_usd += other.cost_usd
        self.calls += other.calls

    def to_json(self) -> dict:
        return {**asdict(self), "total_tokens": self.total_tokens}

    @classmethod
    def from_json(cls, obj: dict) -> Usage:
        return cls(**{k: v for k, v in obj.items() if k != "total_tokens"})


class LLMError(RuntimeError):
    """An LLM call failed for good (after its retries, or at once for a non-transient error)."""


class LLMConfigError(UserError):
    """The LLM configuration cannot work (missing key, unknown model); the message says how to fix it."""


def _litellm():
    """litellm, imported on first use (its import takes seconds) and kept quiet."""
    import litellm

    litellm.suppress_debug_info = True
    # litellm logs every call at INFO; it stays at warnings unless the user asks for more (LITELLM_LOG=INFO).
    if not os.environ.get("LITELLM_LOG"):
        for name in ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy"):
            logging.getLogger(name).setLevel(logging.WARNING)
    # litellm's background success logger dumps its own response objects with pydantic, which warns
    # about litellm's types on every call; harmless, and not ours to fix.
    warnings.filterwarnings("ignore", message="Pydantic serializer warnings", category=UserWarning)
    return litellm


@dataclass
class ToolCall:
    id: str
    name: str
    arguments: str  # the JSON text the model sent (not necessarily valid JSON)


@dataclass
class LLMReply:
    content: str
    tool_calls: list[ToolCall]
    usage: Usage
    model: str
    finish_reason: str
    replayed: bool = False  # answered from the journal, no request was sent

    def assistant_message(self) -> dict:
        """The reply as the assistant message to append to the conversation."""
        msg: dict[str, Any] = {"role": "assistant", "content": self.content or (None if self.tool_calls else "")}
        if self.tool_calls:
            msg["tool_calls"] = [{"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                                 for c in self.tool_calls]
        return msg

    def to_json(self) -> dict:
        d = asdict(self)
        d.pop("replayed")
        d["usage"] = self.usage.to_json()
        return d

    @classmethod
    def from_json(cls, obj: dict, replayed: bool = False) -> LLMReply:
        return cls(content=obj.get("content") or "", tool_calls=[ToolCall(**c) for c in obj.get("tool_calls", [])],
                   usage=Usage.from_json(obj["usage"]), model=obj.get("model", ""),
                   finish_reason=obj.get("finish_reason") or "", replayed=replayed)


def request_hash(model: str, messages: list[dict], tools: list[dict] | None, max_tokens: int) -> str:
    blob = json.dumps({"model": model, "messages": messages, "tools": tools or [], "max_tokens": max_tokens},
                      sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def is_local_url(url: str | None) -> bool:
    """Whether `url` points at this machine (a local vLLM/SGLang server needs no key)."""
    if not url:
        return False
    host = (urlparse(url if "//" in url else f"//{url}").hostname or "").lower()
    return host in ("localhost", "::1", "0.0.0.0") or host.startswith("127.") or host.endswith(".localhost")


def _one_line(text: str, limit: int = 300) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _get(obj: Any, name: str, default: Any = None) -> Any:
    """Attribute or key access: litellm objects are pydantic models that sometimes hold dicts."""
    if obj is None:
        return default
    if isinstance(obj, dict):
        return obj.get(name, default)
    return getattr(obj, name, default)


def _int(value: Any) -> int:
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0


@dataclass
class _Journal:
    """Append-only JSON lines {request_hash, reply}; a line cut by a killed process is dropped."""

    path: Path
    recorded: dict[str, list[dict]] = field(default_factory=dict)
    used: dict[str, int] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)  # request hashes in file order
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.path = Path(self.path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if not self.path.is_file():
            return
        data = self.path.read_bytes()
        good = 0  # bytes of intact, newline-terminated lines
        for line in data.splitlines(keepends=True):
            if not line.endswith(b"\n"):
                break
            if line.strip():
                try:
                    entry = json.loads(line)
                    self.recorded.setdefault(entry["request_hash"], []).append(entry["reply"])
                    self.order.append(entry["request_hash"])
                except (json.JSONDecodeError, KeyError, TypeError, UnicodeDecodeError):
                    break
            good += len(line)
        if good < len(data):  # drop the cut line (and anything after it) so appends stay readable
            with open(self.path, "r+b") as fh:
                fh.truncate(good)

    def skip(self, n: int) -> None:
        """Mark the first `n` entries (in file order) as used."""
        with self.lock:
            self.used = {}
            for key in self.order[:n]:
                self.used[key] = self.used.get(key, 0) + 1

    def take(self, key: str) -> dict | None:
        with self.lock:
            replies = self.recorded.get(key, [])
            n = self.used.get(key, 0)
            if n >= len(replies):
                return None
            self.used[key] = n + 1
            return replies[n]

    def append(self, key: str, reply: dict) -> None:
        with self.lock:
            with open(self.path, "a") as fh:
                fh.write(json.dumps({"request_hash": key, "reply": reply}) + "\n")
            self.recorded.setdefault(key, []).append(reply)
            self.order.append(key)
            self.used[key] = self.used.get(key, 0) + 1


class LLMClient:
    """Chat completions with tools through litellm, for one configured model."""

    def __init__(self, config: Any, journal: Path | None = None, *, backoff_base_s: float = 1.0,
                 backoff_cap_s: float = 30.0, sleep: Callable[[float], None] = time.sleep, seed: int | None = None):
        self.config = config
        self.seed = seed  # the run's seed, sent as the sampling seed where the provider takes one (else dropped)
        self.model: str = config.model
        self.api_base: str | None = config.api_base or None
        self.api_key_env: str | None = config.api_key_env or None
        self.temperature: float = config.temperature
        self.max_output_tokens: int = config.max_output_tokens
        self._context_tokens: int = int(getattr(config, "context_tokens", 0) or 0)
        self.timeout_s: float = float(config.timeout_s)
        self.max_retries: int = max(0, int(config.max_retries))
        self.backoff_base_s = backoff_base_s
        self.backoff_cap_s = backoff_cap_s
        self._sleep = sleep
        self.journal = _Journal(Path(journal)) if journal is not None else None
        self.requests_sent = 0  # HTTP attempts made by this client (retries included)

    @property
    def context_tokens(self) -> int:
        """The conversation's token limit: configured, else the model's as litellm knows it, else 32k."""
        if self._context_tokens > 0:
            return self._context_tokens
        try:
            info = _litellm().get_model_info(self.model)
            return int(info.get("max_input_tokens") or info.get("max_tokens") or DEFAULT_CONTEXT_TOKENS)
        except Exception:  # a model litellm does not know (a local server's)
            return DEFAULT_CONTEXT_TOKENS

    def count_tokens(self, messages: list[dict]) -> int:
        """The prompt tokens of a conversation, by litellm's tokenizer for the model (offline)."""
        return int(_litellm().token_counter(model=self.model, text=json.dumps(messages)))

    def resume_after(self, calls: int) -> None:
        """On resume from a checkpoint whose ledger had recorded `calls` LLM calls: those calls are the
        first `calls` journal entries and are not replayed again; only the calls made after the
        checkpoint are (they were spent but are not in the restored ledger). Without it every
        journal entry is a replay candidate."""
        if self.journal is not None:
            self.journal.skip(max(0, int(calls)))

    # ------------------------------------------------------------------ configuration
    def _api_key(self) -> str | None:
        key = os.environ.get(self.api_key_env) if self.api_key_env else None
        if not key and is_local_url(self.api_base):
            return "EMPTY"  # local OpenAI-compatible servers take any key; don't send a real one there
        return key or None

    def preflight(self) -> None:
        """Raise LLMConfigError (one line) if the model cannot be reached as configured."""
        if not self.model or self.model == "offline":
            raise LLMConfigError("llm.model is empty; set a litellm model name, e.g. llm.model=openai/gpt-4o-mini "
                                 "(or llm=offline for the built-in policy)")
        litellm = _litellm()
        try:
            litellm.get_llm_provider(self.model, api_base=self.api_base)
        except Exception as exc:  # litellm raises BadRequestError; anything else is just as fatal here
            raise LLMConfigError(
                f"llm.model={self.model!r}: litellm cannot tell which provider serves it ({type(exc).__name__}); "
                f"prefix the provider, e.g. llm.model=openai/{self.model} or anthropic/<model>, or "
                f"hosted_vllm/<model> with llm.api_base=<url>") from None
        local = is_local_url(self.api_base)
        if self.api_key_env:
            if not os.environ.get(self.api_key_env) and not local:
                raise LLMConfigError(
                    f"llm.api_key_env={self.api_key_env} but ${self.api_key_env} is empty or not set; "
                    f"export {self.api_key_env}=<your key> for model {self.model}, "
                    f"or point llm.api_base at a local server")
            return
        if local or self.api_base:
            return  # a custom endpoint: its key needs are unknown, the first call tells
        # An empty variable is no key; litellm counts it as set, so it checks without the empty ones.
        empty = {k: v for k, v in os.environ.items() if k.endswith("_KEY") and not v.strip()}
        try:
            for k in empty:
                del os.environ[k]
            env = litellm.validate_environment(model=self.model)
        except Exception:  # validation is advice only
            return
        finally:
            os.environ.update(empty)
        missing = [k for k in env.get("missing_keys", []) if k]
        if missing:
            raise LLMConfigError(
                f"model {self.model} needs {', '.join('$' + k for k in missing)}, which is not set; export it, "
                f"or set llm.api_key_env=<VARIABLE> naming the variable that holds the key")

    # ------------------------------------------------------------------ calls
    def complete(self, messages: list[dict], tools: list[dict] | None = None, *, max_tokens: int) -> LLMReply:
        """One chat completion; replayed from the journal where the same request was answered before.
        `max_tokens` (from `Ledger.allow_call`) is also capped by the config's max_output_tokens."""
        if self.max_output_tokens > 0:
            max_tokens = min(max_tokens, self.max_output_tokens)
        key = request_hash(self.model, messages, tools, max_tokens)
        if self.journal is not None:
            recorded = self.journal.take(key)
            if recorded is not None:
                return LLMReply.from_json(recorded, replayed=True)
        reply = self._call(messages, tools, max_tokens)
        if self.journal is not None:
            self.journal.append(key, reply.to_json())
        return reply

    def _call(self, messages: list[dict], tools: list[dict] | None, max_tokens: int) -> LLMReply:
        litellm = _litellm()
        kwargs: dict[str, Any] = dict(model=self.model, messages=messages, api_base=self.api_base,
                                      api_key=self._api_key(), temperature=self.temperature, max_tokens=max_tokens,
                                      timeout=self.timeout_s, max_retries=0, drop_params=True)
        if tools:
            kwargs["tools"] = tools
        if self.seed is not None:
            kwargs["seed"] = self.seed  # drop_params drops it where the provider has no such parameter
        attempts = self.max_retries + 1
        for attempt in range(attempts):
            self.requests_sent += 1
            try:
                response = litellm.completion(**kwargs)
            except Exception as exc:
                retryable = _retryable(litellm, exc)
                if not retryable or attempt == attempts - 1:
                    why = f"after {attempt + 1} attempts" if retryable else "(not retried)"
                    raise LLMError(f"LLM call to {self.model} failed {why}: {type(exc).__name__}: "
                                   f"{_one_line(_strip_prefix(str(exc)))}{_hint(litellm, exc, self)}") from exc
                self._sleep(self._backoff(attempt, exc))
                continue
            return self._parse(litellm, response)
        raise AssertionError("unreachable")

    def _backoff(self, attempt: int, exc: Exception) -> float:
        """base * 2^attempt with full jitter in [50%, 100%], capped; a server's Retry-After is honoured
        up to the cap."""
        wait = min(self.backoff_cap_s, self.backoff_base_s * 2 ** attempt) * random.uniform(0.5, 1.0)
        retry_after = _retry_after(exc)
        if retry_after is not None:
            wait = max(wait, min(retry_after, self.backoff_cap_s))
        return wait

    def _parse(self, litellm: Any, response: Any) -> LLMReply:
        choices = _get(response, "choices") or []
        if not choices:
            raise LLMError(f"LLM call to {self.model} returned no choices")
        choice = choices[0]
        message = _get(choice, "message")
        calls = []
        for i, tc in enumerate(_get(message, "tool_calls") or []):
            fn = _get(tc, "function")
            args = _get(fn, "arguments")
            if not isinstance(args, str):
                args = "" if args is None else json.dumps(args)
            calls.append(ToolCall(id=_get(tc, "id") or f"call_{i}", name=_get(fn, "name") or "", arguments=args))
        return LLMReply(content=_get(message, "content") or "", tool_calls=calls, usage=_usage(litellm, response),
                        model=_get(response, "model") or self.model,
                        finish_reason=_get(choice, "finish_reason") or "")


def _usage(litellm: Any, response: Any) -> Usage:
    u = _get(response, "usage")
    cost = 0.0
    try:
        cost = float(litellm.completion_cost(completion_response=response) or 0.0)
    except Exception:  # a model litellm has no price for costs 0.0, never a crash
        cost = 0.0
    return Usage(prompt_tokens=_int(_get(u, "prompt_tokens")), completion_tokens=_int(_get(u, "completion_tokens")),
                 cached_tokens=_int(_get(_get(u, "prompt_tokens_details"), "cached_tokens")),
                 reasoning_tokens=_int(_get(_get(u, "completion_tokens_details"), "reasoning_tokens")),
                 cost_usd=cost, calls=1)


def _retryable(litellm: Any, exc: Exception) -> bool:
    transient = (litellm.RateLimitError, litellm.InternalServerError, litellm.ServiceUnavailableError,
                 litellm.BadGatewayError, litellm.Timeout, litellm.APIConnectionError)
    permanent = (litellm.BadRequestError, litellm.AuthenticationError, litellm.PermissionDeniedError,
                 litellm.NotFoundError, litellm.UnprocessableEntityError)
    if isinstance(exc, transient):
        return True
    if isinstance(exc, permanent):
        return False
    status = getattr(exc, "status_code", None)
    return isinstance(status, int) and (status in (408, 409, 429) or status >= 500)


def _retry_after(exc: Exception) -> float | None:
    headers = getattr(exc, "headers", None) or getattr(getattr(exc, "response", None), "headers", None)
    try:
        value = headers.get("retry-after") if headers is not None else None
        return float(value) if value is not None else None
    except (TypeError, ValueError, AttributeError):
        return None


def _strip_prefix(text: str) -> str:
    """litellm's messages repeat the class name ("litellm.RateLimitError: RateLimitError: ...")."""
    for _ in range(3):
        head, sep, rest = text.partition(": ")
        if sep and " " not in head.strip() and head.strip().replace(".", "").isalnum():
            text = rest
        else:
            break
    return text


def _hint(litellm: Any, exc: Exception, client: LLMClient) -> str:
    if isinstance(exc, (litellm.AuthenticationError, litellm.PermissionDeniedError)):
        where = f"${client.api_key_env}" if client.api_key_env else "the provider's key variable (llm.api_key_env)"
        return f" (check the key in {where})"
    if isinstance(exc, litellm.NotFoundError):
        return f" (check llm.model={client.model} and llm.api_base)"
    return ""


__all__ = ["LLMClient", "LLMReply", "ToolCall", "LLMError", "LLMConfigError", "request_hash", "is_local_url"]
