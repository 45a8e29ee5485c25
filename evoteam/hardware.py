"""Hardware targets: one spec sheet per target in `hardware/<name>.yaml`, the single source of its facts.

`resolve(name)` turns a configured target (or "auto") into a validated HardwareSpec and checks it
against the local device, unless the work is sent to a container or host that has it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

import yaml

from evoteam import resources
from evoteam.errors import UserError

VENDORS = ("nvidia", "amd", "cpu")
BACKENDS = ("cuda", "rocm", "cpu")
PROBLEM_SCALES = ("full", "small")
LANGUAGES = ("python", "triton", "cpp", "cuda")  # solution languages the runner can build (FlashInfer-Trace names)


class HardwareError(UserError):
    """A spec sheet is malformed, unknown, or does not match the local device."""


@dataclass(frozen=True)
class ContainerSettings:
    image: str
    dockerfile: str
    device_requests: list[dict] = field(default_factory=list)  # NVIDIA: Docker API DeviceRequest dicts
    devices: list[str] = field(default_factory=list)  # AMD: /dev/kfd, /dev/dri
    group_add: list[str] = field(default_factory=list)  # AMD: video, render


@dataclass(frozen=True)
class HardwareSpec:
    name: str
    vendor: str
    backend: str
    architecture: str
    arch_target: str
    device_name_patterns: list[str]
    multiprocessors: int | None
    memory_gib: float | None
    l2_mib: float | None
    peak_memory_bandwidth_tbs: float | None  # datasheet
    peak_bf16_dense_tflops: float | None  # datasheet
    measured_copy_bandwidth_tbs: float | None  # measured on a lent device, or None
    problem_scale: str
    verified: bool
    container: ContainerSettings
    profiler: str | None
    env: dict[str, str]
    languages: list[str]  # the solution languages this target builds and runs

    @property
    def is_gpu(self) -> bool:
        return self.backend != "cpu"

    @property
    def interprets_triton(self) -> bool:
        """Triton kernels run under Triton's interpreter here (a CPU): correct, but about 100x slow."""
        return self.env.get("TRITON_INTERPRET") == "1"

    @property
    def bandwidth_ceiling_tbs(self) -> float | None:
        """The bandwidth a kernel is judged against: measured where we have it, else datasheet."""
        return self.measured_copy_bandwidth_tbs or self.peak_memory_bandwidth_tbs

    @property
    def torch_device(self) -> str:
        return "cpu" if self.backend == "cpu" else "cuda"  # ROCm builds of torch also say "cuda"


_NUMBER_FIELDS = ("memory_gib", "l2_mib", "peak_memory_bandwidth_tbs", "peak_bf16_dense_tflops",
                  "measured_copy_bandwidth_tbs")


def available() -> list[str]:
    return sorted(p.stem for p in resources.hardware_dir().glob("*.yaml"))


def parse_spec(data: dict[str, Any], source: str) -> HardwareSpec:
    """Validate a spec sheet's fields and types; every problem names the file and the field."""
    expected = {f.name for f in fields(HardwareSpec)}
    missing = sorted(expected - data.keys())
    unknown = sorted(data.keys() - expected)
    if missing:
        raise HardwareError(f"{source}: missing field(s) {', '.join(missing)}")
    if unknown:
        raise HardwareError(f"{source}: unknown field(s) {', '.join(unknown)}; allowed: {', '.join(sorted(expected))}")
    for key, allowed in (("vendor", VENDORS), ("backend", BACKENDS), ("problem_scale", PROBLEM_SCALES)):
        if data[key] not in allowed:
            raise HardwareError(f"{source}: {key}={data[key]!r} is not one of {', '.join(allowed)}")
    for key in _NUMBER_FIELDS:
        value = data[key]
        if value is not None and (not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0):
            raise HardwareError(f"{source}: {key} must be a positive number or null, got {value!r}")
    odd = [lang for lang in data["languages"] or [] if lang not in LANGUAGES]
    if odd or not data["languages"]:
        raise HardwareError(f"{source}: languages must list some of {', '.join(LANGUAGES)}, got {data['languages']!r}")
    mp = data["multiprocessors"]
    if mp is not None and (not isinstance(mp, int) or mp <= 0):
        raise HardwareError(f"{source}: multiprocessors must be a positive integer or null, got {mp!r}")
    if data["backend"] != "cpu" and not data["device_name_patterns"]:
        raise HardwareError(f"{source}: a GPU target needs device_name_patterns to be detected")
    container = data["container"]
    if not isinstance(container, dict) or not container.get("image") or not container.get("dockerfile"):
        raise HardwareError(f"{source}: container needs at least 'image' and 'dockerfile'")
    try:
        container_settings = ContainerSettings(**container)
    except TypeError as exc:
        raise HardwareError(f"{source}: container: {exc}") from None
    return HardwareSpec(**{**data, "container": container_settings,
                           "env": {str(k): str(v) for k, v in (data["env"] or {}).items()}})


def load_spec(name: str) -> HardwareSpec:
    path = resources.hardware_dir() / f"{name}.yaml"
    if not path.is_file():
        raise HardwareError(f"unknown hardware target {name!r}; available: auto, {', '.join(available())}")
    data = yaml.safe_load(path.read_text())
    if not isinstance(data, dict):
        raise HardwareError(f"{path}: a spec sheet must be a YAML mapping")
    spec = parse_spec(data, str(path))
    if spec.name != name:
        raise HardwareError(f"{path}: name {spec.name!r} does not match the file name {name!r}")
    return spec


def local_device_name() -> str | None:
    """The local accelerator's name as the driver reports it, or None when there is none."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    name = torch.cuda.get_device_name(0)
    arch = getattr(torch.cuda.get_device_properties(0), "gcnArchName", "")  # ROCm only
    return f"{name} {arch}".strip()


def detect(device_name: str | None) -> str:
    """The target whose device_name_patterns match `device_name`; "cpu" when there is no device."""
    if device_name is None:
        return "cpu"
    for name in available():
        spec = load_spec(name)
        if any(p.lower() in device_name.lower() for p in spec.device_name_patterns):
            return name
    raise HardwareError(f"local device {device_name!r} matches no spec sheet: add hardware/<name>.yaml "
                        f"with a device_name_patterns entry for it")


def resolve(requested: str, *, remote: bool = False, device_name: str | None | bool = False) -> HardwareSpec:
    """The spec for `requested` ("auto" detects the local device). Unless the run goes to a
    container or host that has the target (`remote`), the local device must match it."""
    local_name = local_device_name() if device_name is False else device_name
    if requested == "auto":
        return load_spec(detect(local_name))  # type: ignore[arg-type]
    spec = load_spec(requested)
    if remote:
        return spec
    local_target = detect(local_name)  # type: ignore[arg-type]
    if spec.name == "cpu" or local_target == spec.name:
        return spec
    here = local_name or "no GPU"
    raise HardwareError(f"hardware={requested} does not match this machine ({here}, target {local_target}): "
                        f"use hardware=auto, or executor=docker with a host that has a {requested}")
