"""Structured configs (the schema behind `conf/`), registered with Hydra's ConfigStore.

Every group (hardware, task, budget, team, llm, executor, tracking) is a dataclass, so a wrong key,
a wrong type or a value outside an Enum fails at composition time; `evoteam.cli_errors` turns
that failure into one line that names the key, the bad value and what is allowed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

from evoteam.harness.model import TimingMode
from evoteam.team.shared_measurements import DEFAULT_MAX_AGE_HOURS
from evoteam.tracking.store import DEFAULT_EXPERIMENT, DEFAULT_URI

GROUPS = ("hardware", "task", "budget", "team", "llm", "agent", "executor", "tracking")


class BudgetMode(str, Enum):
    equal = "equal"  # every team preset gets the same token budget
    extra = "extra"  # the paper's extra-budget mode: the equal budget times extra_multiplier


class TeamPreset(str, Enum):
    single = "single"  # one agent with all tools
    fixed4 = "fixed4"  # four fixed roles that never change
    evolving = "evolving"  # the supervisor may redesign the team
    claude_code = "claude_code"  # one Claude Code CLI (the paper's single-agent baseline)
    codex = "codex"  # one Codex CLI (the paper's Codex baseline)


class Topology(str, Enum):
    sequential = "sequential"
    parallel = "parallel"
    review_loop = "review_loop"


class LLMProvider(str, Enum):
    offline = "offline"  # no LLM: the built-in search policy
    litellm = "litellm"  # any provider through litellm


class AgentKind(str, Enum):
    llm = "llm"  # the function-calling loop through litellm (the offline policy with llm=offline)
    claude_code = "claude_code"  # the Claude Code CLI (evoteam.team.cli_agent)
    codex = "codex"  # the Codex CLI
    command = "command"  # any CLI, from a command template


class ExecutorKind(str, Enum):
    auto = "auto"  # docker where an engine answers and has the target's image, else local (evoteam.harness.executor_registry)
    local = "local"  # the judge on this machine, the candidate's runner under bubblewrap
    docker = "docker"  # the judge and the runner in the target's container through the Docker API
    ray = "ray"  # each evaluation a Ray task on a node that offers the target (evoteam.harness.ray_executor)


class SandboxMode(str, Enum):
    strict = "strict"  # refuse to evaluate where a layer of the runner's sandbox is missing
    weak = "weak"  # evaluate anyway; every result records what was missing


class TrackingBackend(str, Enum):
    mlflow = "mlflow"
    none = "none"


@dataclass
class HardwareConfig:
    # A spec sheet in hardware/<name>.yaml, or "auto" to detect the local device.
    name: str = "auto"


@dataclass
class TaskConfig:
    name: str = MISSING  # a folder in kernels/
    # Workload uuids (or unique uuid prefixes) to run; empty means every workload at the scale.
    workloads: list[str] = field(default_factory=list)
    # "full" or "small"; null takes the hardware target's problem_scale.
    scale: str | None = None
    check_trials: int = 3
    # timed rounds asked of the harness per workload; null: the target's (toolbox.GPU_ROUNDS in a GPU's search,
    # model.CPU_ROUNDS on a CPU). How many a workload then takes is the clock's rule (evoteam.harness.timing). Fewer: a
    # quicker run with wider intervals (each result records its own).
    timed_rounds: int | None = None
    # judge every output by flashinfer-bench's rule (atol = rtol = 1e-2, no relative-norm bound, any NaN or Inf fails)
    # instead of evoteam's; either way the final traces record flashinfer-bench's verdict too
    fib_rule: bool = False
    baseline: str = "auto"  # which baseline adapter; "auto" picks the best available


@dataclass
class BudgetConfig:
    mode: BudgetMode = BudgetMode.equal
    # Per run, the same for every team preset in equal mode; `extra` multiplies all three limits.
    tokens: int = 2_000_000  # prompt + completion tokens
    extra_multiplier: float = 4.0
    max_evaluations: int = 16  # harness evaluations (check or benchmark) during the search
    max_wall_time_s: int = 3600


@dataclass
class TeamConfig:
    preset: TeamPreset = TeamPreset.evolving
    # evaluations without improvement beyond noise before a redesign: 4 lets a 16-evaluation run (the default budget)
    # redesign its first team once it stalls, also after a late improvement
    stall_evaluations: int = 4
    max_redesigns: int = 10  # the supervisor redesigns an evolving team at most this many times
    # null: the preset's; parallel: the starting team's roles take each round's turns at once (their
    # evaluations in flight together), sequential or review_loop
    topology: Topology | None = None


@dataclass
class LLMConfig:
    provider: LLMProvider = LLMProvider.offline
    model: str = ""  # litellm model name, e.g. "openai/gpt-4o-mini"
    api_base: str | None = None  # a local OpenAI-compatible server (vLLM, SGLang)
    api_key_env: str | None = None  # name of the environment variable holding the key
    temperature: float = 0.2
    max_output_tokens: int = 4096
    context_tokens: int = 0  # a conversation's limit (prompt + output); 0: the model's, as litellm knows it
    timeout_s: float = 120.0
    max_retries: int = 4


@dataclass
class AgentConfig:
    kind: AgentKind = AgentKind.llm  # who plays the preset's roles (the supervisor may give a role another)
    binary: str = ""  # the CLI's executable; "": claude / codex on PATH
    model: str = ""  # the CLI's model name; "": the CLI's default
    base_url: str | None = None  # the provider's endpoint (a local server, a proxy); null: the CLI's default
    api_key_env: str | None = None  # the variable holding the key; null: ANTHROPIC_API_KEY / OPENAI_API_KEY
    command: str = ""  # kind=command: e.g. "mycli --prompt-file {prompt_file} --cwd {workdir} --model {model}"
    max_turns: int = 40  # Claude Code's --max-turns per evoteam turn
    timeout_s: float = 1800.0  # one turn of the CLI, at most (and never past the run's wall-time budget)


@dataclass
class RayConfig:
    address: str | None = None  # the head's address (host:port or ray://...); null: RAY_ADDRESS, else a local instance
    wait_s: float = 30.0  # how long to wait for a node that offers the target before a one-line error
    auth_token_env: str | None = None  # a cluster with token authentication (RAY_AUTH_MODE=token): its token's variable
    gpus_per_evaluation: float | None = None  # null: 1 on a GPU target, 0 on a CPU


@dataclass
class ExecutorConfig:
    kind: ExecutorKind = ExecutorKind.auto
    timeout_s: int = 600  # per workload of a candidate evaluation (compilation included)
    sandbox: SandboxMode = SandboxMode.strict
    docker_host: str | None = None  # falls back to DOCKER_HOST
    image: str | None = None  # falls back to the hardware target's container image
    memory_gib: int = 16  # the candidate's runner (cgroup; no swap in a container)
    pids_limit: int = 4096  # processes and threads of the candidate's runner
    cache_dir: str | None = None  # kept between containers (Triton, FlashInfer JIT); null: ~/.cache/evoteam/container
    ray: RayConfig = field(default_factory=RayConfig)  # executor=ray


@dataclass
class WorkspaceConfig:
    # what a new run's shared workspace starts from: auto (the target's verified champion, else none),
    # champion, none, a champion .json, or an earlier run's directory (evoteam.team.inherit)
    inherit: str = "auto"
    # hours an inherited champion's measurement is shared with later runs of the same settings (the presets of a
    # comparison measure it once; evoteam.team.shared_measurements); 0: every run measures it itself
    share_hours: float = DEFAULT_MAX_AGE_HOURS


@dataclass
class TrackingConfig:
    backend: TrackingBackend = TrackingBackend.mlflow
    tracking_uri: str = DEFAULT_URI
    experiment: str = DEFAULT_EXPERIMENT


@dataclass
class EvoteamConfig:
    hardware: HardwareConfig = field(default_factory=HardwareConfig)
    task: TaskConfig = field(default_factory=TaskConfig)
    budget: BudgetConfig = field(default_factory=BudgetConfig)
    team: TeamConfig = field(default_factory=TeamConfig)
    llm: LLMConfig = field(default_factory=LLMConfig)
    agent: AgentConfig = field(default_factory=AgentConfig)
    executor: ExecutorConfig = field(default_factory=ExecutorConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    workspace: WorkspaceConfig = field(default_factory=WorkspaceConfig)
    # graph (device time; the default), events (per call, host launch included); CPUs use cputime
    timing_mode: TimingMode = TimingMode.graph
    seed: int | None = None  # the search policy's seed; null draws one (recorded). Inputs use a secret per evaluation
    run_dir: str = "runs/${now:%Y-%m-%d_%H-%M-%S}"
    resume: str | None = None  # a run directory to continue (its configuration; only safe overrides apply)
    remeasure: bool = False  # with resume= of a finished run: measure its final kernels again


def register() -> None:
    ConfigStore.instance().store(name="evoteam_schema", node=EvoteamConfig)
    register_options()


def register_options() -> None:
    """Config-group options that come from the data folders, so that a spec sheet or a task
    folder is the one place to add a target or a task."""
    from evoteam import hardware, task

    store = ConfigStore.instance()
    store.store(group="hardware", name="auto", node=HardwareConfig(name="auto"))
    for name in hardware.available():
        store.store(group="hardware", name=name, node=HardwareConfig(name=name))
    for name in task.available_tasks():
        store.store(group="task", name=name, node=TaskConfig(name=name))
