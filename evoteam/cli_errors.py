"""Bad command-line input -> one line naming the key, the bad value and what is allowed.

`preflight(overrides)` composes the configuration the way Hydra will, before Hydra runs the job,
and raises ConfigInputError with such a line; `validate(cfg)` checks what the schema's types
cannot (names of spec sheets and task folders, keys added with '+'). `resources.python_command` writes a
command the run prints so that it runs as printed.
"""

from __future__ import annotations

import dataclasses
import os
import re
import typing
from enum import Enum
from pathlib import Path
from typing import Any

from hydra import compose, initialize_config_dir
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import ConfigCompositionException, MissingConfigException, OverrideParseException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ConfigAttributeError, ConfigKeyError, ValidationError

from evoteam import config, resources
from evoteam.errors import UserError
from evoteam.outputs import unwritable_folder
from evoteam.tracking.store import check_store_writable


class ConfigInputError(UserError):
    """A one-line, user-facing message about bad configuration input."""


def _schema_at(path: list[str]) -> type | None:
    node: Any = config.EvoteamConfig
    for part in path:
        if not dataclasses.is_dataclass(node):
            return None
        match = {f.name: f for f in dataclasses.fields(node)}.get(part)
        if match is None:
            return None
        node = match.type if not isinstance(match.type, str) else _resolve_type(node, part)
    return node


def _resolve_type(cls: type, name: str) -> Any:
    return typing.get_type_hints(cls)[name]


# What the items of a list-valued key are, for its one-line error.
LIST_ITEMS = {"task.workloads": "uuid prefixes"}

# The model the packaged llm=litellm option names (conf/llm/litellm.yaml) is nobody's choice: a run must name one.
NEEDS_MODEL = ("llm=litellm needs a model: add llm.model=<provider/model>, e.g. "
               "llm.model=anthropic/claude-sonnet-4-5")


def _allowed_keys(full_key: str) -> str:
    parent = full_key.split(".")[:-1]
    schema = _schema_at(parent)
    if schema is None or not dataclasses.is_dataclass(schema):
        return ""
    fields = dataclasses.fields(schema)

    def is_node(f) -> bool:  # a nested section (a config group, or one like workspace): shown as name.<key>
        return f.name in config.GROUPS or dataclasses.is_dataclass(f.default_factory)
    keys = [f.name for f in fields if not is_node(f)] + [f"{f.name}.<key>" for f in fields if is_node(f)]
    return ", ".join(keys)


def _allowed_values(full_key: str) -> str:
    parts = full_key.split(".")
    schema = _schema_at(parts[:-1])
    if schema is None:
        return ""
    hint = _resolve_type(schema, parts[-1])
    enum = next((t for t in getattr(hint, "__args__", (hint,)) if isinstance(t, type) and issubclass(t, Enum)), None)
    if enum is not None:
        return "one of " + ", ".join(m.value for m in enum)
    names = {int: "an integer", float: "a number", str: "a string", bool: "true or false"}
    base = next((t for t in getattr(hint, "__args__", (hint,)) if t in names), None)
    return names.get(base, str(hint))


def _is_list(full_key: str) -> bool:
    parts = full_key.split(".")
    schema = _schema_at(parts[:-1])
    if schema is None or not dataclasses.is_dataclass(schema):
        return False
    try:
        hint = _resolve_type(schema, parts[-1])
    except KeyError:
        return False
    return typing.get_origin(hint) is list or any(typing.get_origin(t) is list for t in typing.get_args(hint))


def group_options(group: str) -> list[str]:
    from hydra.core.config_store import ConfigStore

    options = {p.stem for p in (resources.conf_dir() / group).glob("*.yaml")}
    repo = ConfigStore.instance().repo.get(group, {})
    options |= {name.removesuffix(".yaml") for name in repo}
    return sorted(options)


def explain(exc: BaseException) -> str:
    """Turn a Hydra/OmegaConf composition error into one line."""
    cause = exc.__cause__ or exc
    if isinstance(exc, MissingConfigException):
        m = re.search(r"Could not find '([^/']+)/([^']+)'", str(exc))
        if m:
            group, option = m.groups()
            return (f"{group}={option} is not a known option; allowed: {', '.join(group_options(group))} "
                    f"(set {group}=<one of these>)")
        return str(exc).splitlines()[0]
    if isinstance(exc, OverrideParseException):
        return f"cannot parse the override: {str(exc).splitlines()[0]} (write KEY=VALUE or GROUP=OPTION)"
    if isinstance(cause, ValidationError):
        key = getattr(cause, "full_key", "?")
        value = getattr(cause, "value", "?")
        if _is_list(key):  # a bare value where a list belongs
            return f"{key}={value!s}: give a list of {LIST_ITEMS.get(key, 'values')}, e.g. {key}=[{value!s}]"
        return f"{key}={value!s} is not valid; expected {_allowed_values(key)}"
    if isinstance(cause, (ConfigAttributeError, ConfigKeyError)):
        key = getattr(cause, "full_key", None) or "?"
        allowed = _allowed_keys(key)
        return f"unknown key '{key}'; allowed keys here: {allowed}" if allowed else f"unknown key '{key}'"
    if isinstance(exc, ConfigCompositionException):
        return str(exc).splitlines()[0]
    return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"


def _extra_keys(node: DictConfig, schema: type, prefix: str) -> list[str]:
    known = {f.name: f for f in dataclasses.fields(schema)}
    extra = []
    for key in node.keys():
        if key == "hydra":
            continue
        full = f"{prefix}{key}"
        if key not in known:
            extra.append(full)
            continue
        sub_schema = _resolve_type(schema, key)
        value = node._get_node(key)
        if dataclasses.is_dataclass(sub_schema) and isinstance(value, DictConfig):
            extra += _extra_keys(value, sub_schema, full + ".")
    return extra


def validate(cfg: DictConfig) -> None:
    """Checks the schema's types cannot express. Raises ConfigInputError. (Whether a container engine
    answers is the executor's to say, when a run starts.)"""
    from evoteam import hardware, task

    extra = _extra_keys(cfg, config.EvoteamConfig, "")
    if extra:
        key = extra[0]
        raise ConfigInputError(f"unknown key '{key}'; allowed keys here: {_allowed_keys(key)}")
    if cfg.llm.provider == config.LLMProvider.litellm and not cfg.llm.model:
        raise ConfigInputError(NEEDS_MODEL)
    hw = cfg.hardware.name
    if hw != "auto" and hw not in hardware.available():
        raise ConfigInputError(f"hardware.name={hw} is not a known target; allowed: auto, "
                               f"{', '.join(hardware.available())} (or add hardware/{hw}.yaml)")
    if cfg.task.name not in task.available_tasks():
        raise ConfigInputError(f"task.name={cfg.task.name} is not a known task; allowed: "
                               f"{', '.join(task.available_tasks())} (or add kernels/{cfg.task.name}/)")
    if cfg.task.scale is not None and cfg.task.scale not in task.SCALES:
        raise ConfigInputError(f"task.scale={cfg.task.scale} is not valid; expected one of "
                               f"{', '.join(task.SCALES)} or null")
    for key in ("task.check_trials", "task.timed_rounds", "budget.tokens", "budget.max_evaluations", "executor.timeout_s",
                "executor.memory_gib", "executor.pids_limit"):
        value = OmegaConf.select(cfg, key)
        if value is not None and value < 1:
            raise ConfigInputError(f"{key}={value} is not valid; expected a positive integer")


def _expand(overrides: list[str]) -> list[list[str]]:
    """The override lists to check: the line itself, or for a multirun sweep one list per swept
    value (the other sweeps at their first value), so that every value is checked once."""
    parsed = OverridesParser.create().parse_overrides(overrides)

    def plain(o: Any, value: Any) -> str:
        return f"{o.get_key_element()}={value}"

    sweeps = [i for i, o in enumerate(parsed) if o.is_sweep_override()]
    if not sweeps:
        return [[o.input_line for o in parsed]]
    values = {i: list(parsed[i].sweep_string_iterator()) for i in sweeps}
    first = [plain(o, values[i][0]) if i in values else o.input_line for i, o in enumerate(parsed)]
    variants = []
    for i in sweeps:
        for value in values[i]:
            variant = list(first)
            variant[i] = plain(parsed[i], value)
            variants.append(variant)
    return variants


def preflight(overrides: list[str], run_dir: bool = False, writes: bool = False) -> None:
    """Compose every configuration the command line asks for; raise ConfigInputError on the first bad one.
    run_dir: the command runs one job in the folder `run_dir` names (Hydra creates it before the job), so
    check that it can be created and written. writes: the command runs its job(s), which log to the tracking
    store (a command that only prints, --cfg or --help, writes nothing)."""
    try:
        variants = _expand(overrides)
    except OverrideParseException as exc:
        raise ConfigInputError(explain(exc)) from None
    for variant in variants:
        try:
            with initialize_config_dir(config_dir=str(resources.conf_dir()), version_base=None):
                cfg = compose("config", overrides=variant)
        except Exception as exc:  # noqa: BLE001 - every composition failure becomes one line
            raise ConfigInputError(explain(exc)) from None
        validate(cfg)
        given = dict(o.split("=", 1) for o in variant if "=" in o)
        given = {key.lstrip("+~"): value for key, value in given.items()}
        if cfg.resume:
            check_resumable(str(cfg.resume))  # the run's own folder, which a resumed run writes to
        elif cfg.llm.provider == config.LLMProvider.litellm and given.get("llm") == "litellm" \
                and "llm.model" not in given:
            raise ConfigInputError(NEEDS_MODEL)
        elif run_dir:
            check_writable(str(cfg.run_dir), "run_dir")
        if writes and not cfg.resume and cfg.tracking.backend == config.TrackingBackend.mlflow:
            # a local store that cannot be written: one line now, not minutes of MLflow's retries inside the job (a
            # resumed run logs to the store it started in: the job checks that one)
            try:
                check_store_writable(str(cfg.tracking.tracking_uri))
            except UserError as exc:
                raise ConfigInputError(str(exc)) from None


def check_resumable(folder: str) -> None:
    """`resume=<folder>` names an earlier run's folder, and the resumed run can write there."""
    if not (Path(folder) / "config.yaml").is_file():
        raise ConfigInputError(f"resume={folder} is not an evoteam run directory (no config.yaml); give the folder "
                               f"of an earlier run")
    check_writable(folder, "resume")


def check_writable(folder: str, key: str) -> None:
    """The folder `key` names can be created (with its parents) and written; else one line."""
    why = unwritable_folder(Path(os.path.abspath(folder)))
    if why:
        raise ConfigInputError(f"{key}={folder}: {why}; give a writable folder ({key}=<path>)")
