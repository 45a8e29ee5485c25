"""The runner's sandbox: bubblewrap namespaces, cgroup limits and a clean environment.

A candidate's runner sees, read-only, only what it needs to run Python, PyTorch and Triton (the
system and Python installations, the evoteam package without its data folders), its own source at
/candidate, and one writable scratch folder (/scratch; /cache for its compiled kernels). It runs
as an unprivileged user (65534) in its own user, PID, mount, network (loopback only), IPC and UTS
namespaces, cannot create new user namespaces, has no capabilities, sees only the GPU it was given,
and lives in its own cgroup (memory and process limits). The baseline libraries' folders are hidden
under empty mounts. Ending the sandbox kills every process in it, detached children included (its
PID namespace dies with it, and the cgroup is killed as well).

Where a machine cannot provide a layer (no bubblewrap, no user namespaces, no writable cgroups), a
strict evaluation refuses to run; `sandbox="weak"` runs anyway, and the result records what was
missing.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import resource
import shlex
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from evoteam.errors import UserError
from evoteam.harness import fork
from evoteam.harness.guard import ResourceGuard, descendants, resident_bytes, threads
from evoteam.harness.scan import BASELINE_MODULES  # hidden from candidates

PACKAGE_DIR = Path(__file__).resolve().parent.parent  # evoteam/
UNPRIVILEGED_UID = 65534
CGROUP_ROOT = Path("/sys/fs/cgroup")
TMP_BYTES = 1 << 30  # the runner's /tmp (in memory)
# Set by the container executor to the limits of the judge's container (no cgroup can be made inside it).
CONTAINER_LIMITS_ENV = "EVOTEAM_CONTAINER_LIMITS"
FILE_SIZE_LIMIT = 4 << 30  # largest file a runner may write
# A freeze that has not stopped every process of a runner by then fails its workload: a runner that goes on while
# the judge believes it stopped would work unseen (on inputs being written, on another side's clock)
FREEZE_TIMEOUT_S = 2.0
# The CPU share of one runner's processes together (cgroup v2 cpu.weight; v1 cpu.shares is this scaled by 10.24):
# the default one task gets, so that the processes and sessions a candidate creates share it and never outweigh
# the judge (per-session autogroups gave eight helper sessions eight times the judge's share)
CPU_WEIGHT = 100
# What a sandbox shows of the host's scheduling, masked: the cgroup tree (a runner's own cpu.stat is the judge's
# clock on a CPU, its freezer state says when it is watched) and system-wide scheduler and interrupt counters (the
# judge's activity, visible from inside, says when the clock is about to start)
MASKED_PROC = ("/proc/stat", "/proc/schedstat", "/proc/loadavg", "/proc/interrupts", "/proc/softirqs")
MASKED_DIRS = ("/sys/fs/cgroup", "/proc/pressure")


class SandboxUnavailable(UserError):
    """A strict evaluation cannot get a layer of its sandbox here."""


class FreezeFailed(RuntimeError):
    """A runner's processes did not all stop within FREEZE_TIMEOUT_S."""


@dataclass(frozen=True)
class Capabilities:
    bwrap: str | None  # path of a working bubblewrap, or None
    bwrap_problem: str  # why not, when None
    cgroup: str | None  # "v2" or "v1", or None
    cgroup_problem: str

    def missing(self) -> list[str]:
        out = []
        if not self.bwrap:
            out.append(f"namespaces ({self.bwrap_problem})")
        if not self.cgroup:
            out.append(f"cgroup limits ({self.cgroup_problem})")
        return out


def _bwrap_base(bwrap: str) -> list[str]:
    return [bwrap, "--unshare-all", "--unshare-user", "--disable-userns", "--uid", str(UNPRIVILEGED_UID),
            "--gid", str(UNPRIVILEGED_UID), "--die-with-parent", "--new-session", "--cap-drop", "ALL"]


@functools.cache
def capabilities() -> Capabilities:
    """What this machine offers (tried once per process)."""
    bwrap = os.environ.get("EVOTEAM_BWRAP") or shutil.which("bwrap")
    problem = ""
    if not bwrap:
        problem = "bubblewrap is not installed (Debian/Ubuntu: apt-get install bubblewrap)"
    else:
        try:
            probe = subprocess.run([*_bwrap_base(bwrap), "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev",
                                    "true"], capture_output=True, text=True, timeout=30)
            if probe.returncode != 0:
                problem = f"bubblewrap cannot create its namespaces here: {probe.stderr.strip()[:200]}"
                bwrap = None
        except (OSError, subprocess.TimeoutExpired) as exc:
            problem, bwrap = f"bubblewrap does not run: {exc}", None
    cgroup, cg_problem = _cgroup_support()
    if cgroup is None and os.environ.get(CONTAINER_LIMITS_ENV):
        cgroup, cg_problem = "container", ""  # the judge's container: its limits hold the runner too
    return Capabilities(bwrap, problem, cgroup, cg_problem)


def _cgroup_support() -> tuple[str | None, str]:
    if (CGROUP_ROOT / "cgroup.controllers").is_file():
        controllers = (CGROUP_ROOT / "cgroup.controllers").read_text().split()
        if not {"memory", "pids"} <= set(controllers):
            return None, f"cgroup v2 lacks the memory or pids controller ({' '.join(controllers)})"
        try:
            _v2_parent()
            return "v2", ""
        except OSError as exc:
            return None, f"cgroup v2 is not writable here ({exc.strerror or exc})"
    try:
        for ctl in ("memory", "pids"):
            (CGROUP_ROOT / ctl / "evoteam").mkdir(exist_ok=True)
        return "v1", ""
    except OSError as exc:
        return None, f"no writable cgroup v1 memory and pids hierarchies ({exc.strerror or exc})"


def _v2_parent() -> Path:
    parent = CGROUP_ROOT / "evoteam"
    parent.mkdir(exist_ok=True)
    root_control = (CGROUP_ROOT / "cgroup.subtree_control").read_text().split()
    for ctl in ("memory", "pids"):
        if ctl not in root_control:
            (CGROUP_ROOT / "cgroup.subtree_control").write_text(f"+{ctl}")
    parent_control = (parent / "cgroup.subtree_control").read_text().split()
    for ctl in ("memory", "pids"):
        if ctl not in parent_control:
            (parent / "cgroup.subtree_control").write_text(f"+{ctl}")
    return parent


def _enable_v2(controller: str) -> None:
    """Enable a cgroup v2 controller for the runners' cgroups (in the root's and evoteam's subtree_control)."""
    for control in (CGROUP_ROOT / "cgroup.subtree_control", _v2_parent() / "cgroup.subtree_control"):
        if controller not in control.read_text().split():
            control.write_text(f"+{controller}")


class Cgroup:
    """One runner's cgroup (v2, or the memory, pids and freezer hierarchies of v1)."""

    def __init__(self, version: str, name: str, memory_bytes: int, max_pids: int, cpus: frozenset[int] | None = None):
        self.version = version
        if version == "v2":
            self.dirs = [_v2_parent() / name]
        else:
            self.dirs = [CGROUP_ROOT / ctl / "evoteam" / name for ctl in ("memory", "pids", "freezer", "cpuacct", "cpu")
                         if (CGROUP_ROOT / ctl).is_dir()]
        for d in self.dirs:
            d.mkdir(parents=True, exist_ok=True)
        self.cpu_weight_problem = ""
        try:
            self._weigh()
        except OSError as exc:
            self.cpu_weight_problem = f"no cpu controller to hold it ({exc.strerror or exc})"
        self.cpuset_problem = "" if cpus else "not asked"
        if cpus:
            try:
                self._confine_cpus(name, ",".join(str(c) for c in sorted(cpus)))
            except OSError as exc:
                self.cpuset_problem = f"no cpuset controller to hold it ({exc.strerror or exc})"
        if version == "v2":
            (self.dirs[0] / "memory.max").write_text(str(memory_bytes) if memory_bytes else "max")
            (self.dirs[0] / "memory.swap.max").write_text("0") if (self.dirs[0] / "memory.swap.max").exists() else None
            (self.dirs[0] / "pids.max").write_text(str(max_pids))
        else:
            for d in self.dirs:
                if d.parts[-3] == "memory" and memory_bytes:
                    (d / "memory.limit_in_bytes").write_text(str(memory_bytes))
                elif d.parts[-3] == "pids":
                    (d / "pids.max").write_text(str(max_pids))

    def _weigh(self) -> None:
        """One CPU weight for all the runner's processes together (see CPU_WEIGHT)."""
        if self.version == "v2":
            _enable_v2("cpu")
            (self.dirs[0] / "cpu.weight").write_text(str(CPU_WEIGHT))
            return
        own = next((d for d in self.dirs if d.parts[-3] == "cpu"), None)
        if own is None:
            raise OSError("no cpu hierarchy")
        (own / "cpu.shares").write_text(str(round(CPU_WEIGHT * 10.24)))

    def _confine_cpus(self, name: str, cpus: str) -> None:
        """A cpuset: the runner's processes cannot move to another CPU (sched_setaffinity is masked by
        it), so the judge's cache flush on that CPU reaches every call."""
        if self.version == "v2":
            _enable_v2("cpuset")
            (self.dirs[0] / "cpuset.cpus").write_text(cpus)
            return
        root = CGROUP_ROOT / "cpuset"
        if not root.is_dir():
            raise OSError("no cpuset hierarchy")
        parent, own = root / "evoteam", root / "evoteam" / name
        parent.mkdir(exist_ok=True)
        for key in ("cpuset.cpus", "cpuset.mems"):  # a v1 cpuset starts empty: a child needs its parent's
            if not (parent / key).read_text().strip():
                (parent / key).write_text((root / key).read_text().strip())
        own.mkdir(exist_ok=True)
        self.dirs.append(own)
        (own / "cpuset.mems").write_text((parent / "cpuset.mems").read_text().strip())
        (own / "cpuset.cpus").write_text(cpus)

    def set_cpus(self, cpus: frozenset[int]) -> None:
        """Move the cpuset (and every process in it) to `cpus`."""
        own = self.dirs[0] if self.version == "v2" else next(d for d in self.dirs if d.parts[-3] == "cpuset")
        (own / "cpuset.cpus").write_text(",".join(str(c) for c in sorted(cpus)))

    def procs_files(self) -> list[str]:
        return [str(d / "cgroup.procs") for d in self.dirs]

    def pids(self) -> set[int]:
        out: set[int] = set()
        for d in self.dirs:
            try:
                out |= {int(p) for p in (d / "cgroup.procs").read_text().split()}
            except OSError:
                pass
        return out

    def memory_events(self) -> str:
        """Whether the kernel killed something here for memory (v2: memory.events oom_kill)."""
        for d in self.dirs:
            for name in ("memory.events", "memory.oom_control"):
                f = d / name
                if f.is_file():
                    try:
                        return f.read_text()
                    except OSError:
                        pass
        return ""

    def cpu_usec(self) -> int | None:
        """CPU time used by every process that ever ran here (the kernel's count: v2's cpu.stat, v1's
        cpuacct.usage), or None where neither is kept."""
        try:
            if self.version == "v2":
                for line in (self.dirs[0] / "cpu.stat").read_text().splitlines():
                    if line.startswith("usage_usec "):
                        return int(line.split()[1])
                return None
            acct = next((d for d in self.dirs if d.parts[-3] == "cpuacct"), None)
            return None if acct is None else int((acct / "cpuacct.usage").read_text()) // 1000
        except (OSError, ValueError, IndexError):
            return None

    def queued_usec(self) -> int:
        """The time the cgroup's threads have spent runnable but waiting for a CPU that another process held (the
        kernel's run-queue delay, /proc/<pid>/task/<tid>/schedstat), summed over the threads alive now: the part of
        the host clock that is the machine's load, not the runner's waiting. A thread that ended takes its count
        with it, which only leaves more of the host clock unexplained (never less)."""
        total = 0
        for tid in threads(self.pids()):
            try:
                total += int(Path(f"/proc/{tid}/schedstat").read_text().split()[1]) // 1000
            except (OSError, ValueError, IndexError):
                pass
        return total

    def freeze(self, frozen: bool) -> None:
        """Stop every process in the cgroup and wait until they are stopped (FreezeFailed after FREEZE_TIMEOUT_S); or
        let them go on (no wait: the runner answers nothing before it runs again)."""
        if self.version == "v2":
            (self.dirs[0] / "cgroup.freeze").write_text("1" if frozen else "0")
            check, want = self.dirs[0] / "cgroup.events", "frozen 1"
        else:
            freezer = next((d for d in self.dirs if d.parts[-3] == "freezer"), None)
            if freezer is None:
                raise OSError("no freezer hierarchy")
            (freezer / "freezer.state").write_text("FROZEN" if frozen else "THAWED")
            check, want = freezer / "freezer.state", "FROZEN"
        if not frozen:
            return
        deadline = time.monotonic() + FREEZE_TIMEOUT_S
        while want not in check.read_text():
            if time.monotonic() > deadline:
                raise FreezeFailed(f"the runner's processes were not all frozen within {FREEZE_TIMEOUT_S:g} s "
                                   f"({check.name}: {check.read_text().strip()[:80]!r})")
            time.sleep(0.0001)

    def kill(self) -> None:
        if self.version == "v2" and (self.dirs[0] / "cgroup.kill").exists():
            (self.dirs[0] / "cgroup.kill").write_text("1")
        freezer = next((d for d in self.dirs if d.parts[-3] == "freezer"), None)
        if freezer is not None:
            (freezer / "freezer.state").write_text("FROZEN")  # nothing forks while it is emptied
        for _ in range(100):
            pids = self.pids()
            if not pids:
                break
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            if freezer is not None:
                (freezer / "freezer.state").write_text("THAWED")  # a frozen process cannot die
            time.sleep(0.02)

    def remove(self) -> None:
        for d in self.dirs:
            for _ in range(50):
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.05)


def reap_orphans() -> int:
    """Runners whose judge is gone (killed before it could end them: a frozen runner cannot die on its own, its
    sandbox's parent-death signal waits for a thaw that never comes): their processes killed, their cgroups removed.
    A runner's cgroup is named after its judge's pid (runner-<pid>-<n>). Returns how many runners were reaped."""
    groups: dict[str, list[Path]] = {}
    for parent in [CGROUP_ROOT / "evoteam"] + [CGROUP_ROOT / ctl / "evoteam" for ctl in
                                               ("memory", "pids", "freezer", "cpuacct", "cpu", "cpuset")]:
        try:
            for d in parent.glob("runner-*"):
                groups.setdefault(d.name, []).append(d)
        except OSError:
            continue
    reaped = 0
    for name, dirs in groups.items():
        try:
            judge = int(name.split("-")[1])
            os.kill(judge, 0)
            continue  # its judge is alive: its runner is its to end
        except (ValueError, IndexError, PermissionError):  # not a runner's name, or another user's live judge
            continue
        except ProcessLookupError:
            pass
        group = Cgroup.__new__(Cgroup)
        group.version = "v2" if dirs[0].parent == CGROUP_ROOT / "evoteam" else "v1"
        group.dirs = sorted(dirs, key=lambda d: d.parts[-3] != "freezer")  # v1: the freezer first
        try:
            group.kill()
            group.remove()
            reaped += 1
        except OSError:
            pass
    return reaped


@dataclass
class SandboxSpec:
    """What one runner gets."""

    scratch: Path  # host folder, mounted writable at /scratch
    cache: Path | None  # host folder, mounted writable at /cache (compiled kernels of this source)
    candidate: Path | None  # host folder of the candidate's sources, mounted read-only at /candidate
    device: str  # "cpu" or "cuda:N"
    memory_bytes: int
    max_pids: int
    env: dict[str, str] = field(default_factory=dict)
    trusted: bool = False  # the baseline runner: the libraries and the package's data stay visible
    mode: str = "strict"  # strict or weak
    cpus: frozenset[int] | None = None  # CPU targets: the one CPU the judge flushes and times on
    # the CPUs its start (interpreter, imports: trusted code alone) may use until `pin` holds it to `cpus`; None: held
    # there from the start
    start_cpus: frozenset[int] | None = None
    disk_bytes: int = 0  # what the runner may hold in its scratch and cache folders (0: no limit)
    # trusted only: forked from this process (evoteam.harness.fork), which has imported what the runner imports, instead
    # of started afresh; ignored for a candidate, and where this process holds a GPU context
    fork: bool = False


def _gpu_devices(device: str) -> list[str]:
    if not device.startswith("cuda"):
        return []
    nvidia = [str(p) for p in ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools") if Path(p).exists()]
    if nvidia:
        index = int(device.split(":")[1]) if ":" in device else 0
        minor = _nvidia_minor(index)
        return nvidia + [f"/dev/nvidia{minor}"]
    # ROCm (UNVERIFIED: no AMD GPU was available): the compute driver and the GPU's render node.
    index = int(device.split(":")[1]) if ":" in device else 0
    return [p for p in ("/dev/kfd", f"/dev/dri/renderD{128 + index}") if Path(p).exists()]


def _nvidia_minor(index: int) -> int:
    """The /dev/nvidiaN minor of CUDA device `index` (by PCI bus id; the index itself as a fallback)."""
    try:
        import torch

        bus = torch.cuda.get_device_properties(index).pci_bus_id.lower()
        for info in Path("/proc/driver/nvidia/gpus").glob("*/information"):
            if info.parent.name.lower().endswith(bus[-7:]):
                for line in info.read_text().splitlines():
                    if line.startswith("Device Minor"):
                        return int(line.split(":")[1])
    except Exception:  # noqa: BLE001 - the fallback is right on single-GPU machines
        pass
    return index


def _module_dirs(names) -> list[str]:
    out = []
    for name in names:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            continue
        if spec is None:
            continue
        for loc in spec.submodule_search_locations or ([os.path.dirname(spec.origin)] if spec.origin else []):
            if os.path.isdir(loc) and loc not in out:
                out.append(os.path.realpath(loc))
    return out


def _checkout() -> str | None:
    """The repository checkout evoteam runs from (an editable install), or None (an installed wheel)."""
    parent = PACKAGE_DIR.parent
    return str(parent) if (parent / "kernels").is_dir() else None


def python_paths() -> list[str]:
    """Folders a runner's Python needs, read-only (the repository checkout itself is not one of them)."""
    checkout = _checkout()
    out: list[str] = []
    for p in [*sys.path, sys.prefix, sys.base_prefix, os.path.dirname(os.path.realpath(sys.executable))]:
        p = os.path.realpath(p) if p else ""
        if not p or not os.path.isdir(p) or p == os.path.realpath(os.getcwd()):
            continue
        if checkout and (p == checkout or (p.startswith(checkout + "/")
                                           and not p.startswith(os.path.join(checkout, ".venv")))):
            continue  # nothing of the checkout but its virtual environment
        out.append(p)
    return out


def _covered(path: str, roots: list[str]) -> bool:
    return any(path == r or path.startswith(r + "/") for r in roots)


@functools.cache
def _empty_file() -> str:
    """An empty, world-readable file of this process's, bound over what a sandbox must not read."""
    import atexit
    import tempfile

    fd, path = tempfile.mkstemp(prefix="evoteam-empty-")
    os.close(fd)
    os.chmod(path, 0o444)
    atexit.register(lambda: os.path.exists(path) and os.unlink(path))
    return path


def bwrap_command(bwrap: str, spec: SandboxSpec) -> list[str]:
    args = _bwrap_base(bwrap)
    roots: list[str] = []

    def ro(path: str) -> None:
        if os.path.exists(path) and not _covered(path, roots):
            args.extend(["--ro-bind", path, path])
            roots.append(path)

    for p in ("/usr", "/etc", "/lib", "/lib32", "/lib64", "/bin", "/sbin", "/opt"):
        ro(p)
    args += ["--ro-bind", "/sys", "/sys", "--proc", "/proc", "--dev", "/dev",
             "--size", str(TMP_BYTES), "--tmpfs", "/tmp", "--tmpfs", "/run"]
    for path in MASKED_DIRS:
        if os.path.isdir(path):
            args += ["--tmpfs", path]
    for path in MASKED_PROC:
        if os.path.exists(path):
            args += ["--ro-bind", _empty_file(), path]  # reads as empty (a device node there would refuse reads)
    for p in python_paths():
        ro(p)
    ro(str(PACKAGE_DIR))  # the evoteam package (for the runner itself)
    if spec.trusted and _checkout():
        ro(os.path.join(_checkout(), "kernels"))  # the baseline runner builds its adapters from the task
    else:
        for path in _module_dirs(BASELINE_MODULES):
            args += ["--tmpfs", path]  # hidden: an empty folder in its place
        data = PACKAGE_DIR / "_data"
        if data.is_dir():
            args += ["--tmpfs", str(data)]  # an installed wheel's kernels/ (the references) and hardware/
    for dev in _gpu_devices(spec.device):
        args += ["--dev-bind", dev, dev]
    args += ["--bind", str(spec.scratch), "/scratch"]
    if spec.cache is not None:
        args += ["--bind", str(spec.cache), "/cache"]
    if spec.candidate is not None:
        args += ["--ro-bind", str(spec.candidate), "/candidate"]
    # The sandbox's own root (where bubblewrap made the mount points) read-only too: what is writable is
    # exactly /scratch, /cache, /tmp (in memory) and /dev/shm.
    args += ["--remount-ro", "/", "--chdir", "/scratch", "--clearenv"]
    for key, value in spec.env.items():
        args += ["--setenv", key, value]
    return args


BUILD_TOOLS = ("ninja", "nvcc", "c++", "hipcc")  # what torch's extension loader runs to build C++/CUDA solutions


def _tool_dirs() -> list[str]:
    """The runner's PATH: the system's folders, and wherever the judge finds the build tools and its Python's
    console scripts (a pip-installed ninja lives beside the interpreter, not in /usr/bin)."""
    dirs = ["/usr/local/bin", "/usr/bin", "/bin"]
    found = [os.path.dirname(sys.executable)] + [os.path.dirname(p) for p in map(shutil.which, BUILD_TOOLS) if p]
    return dirs + [d for d in dict.fromkeys(found) if d not in dirs]


# How the device runs work: allocator, module loading, device order. The baseline's trusted runner inherits the judge's
# whole environment, so a candidate's runner gets these too: a setting one side alone had would time the two under
# different conditions (or, for the device order, name another GPU by the same index).
DEVICE_SETTINGS = ("CUDA_DEVICE_ORDER", "CUDA_MODULE_LOADING", "CUDA_DEVICE_MAX_CONNECTIONS", "PYTORCH_CUDA_ALLOC_CONF",
                   "PYTORCH_HIP_ALLOC_CONF", "PYTORCH_ALLOC_CONF")


def runner_env(spec_env: dict[str, str], device: str, inside: bool) -> dict[str, str]:
    """A clean environment: nothing of the judge's but what Python, CUDA and Triton need, and the device settings
    both sides share (DEVICE_SETTINGS)."""
    scratch = "/scratch" if inside else None
    env = {"PATH": ":".join(_tool_dirs()), "PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1",
           "PYTHONPATH": str(PACKAGE_DIR.parent), "LANG": "C.UTF-8"}
    for key in ("LD_LIBRARY_PATH", "CUDA_HOME", "TRITON_PTXAS_PATH", "TRITON_LIBCUDA_PATH", *DEVICE_SETTINGS):
        if os.environ.get(key):
            env[key] = os.environ[key]
    extra_paths = [p for p in os.environ.get("PYTHONPATH", "").split(":") if p and os.path.realpath(p) !=
                   str(PACKAGE_DIR.parent)]
    if extra_paths:
        env["PYTHONPATH"] = ":".join([env["PYTHONPATH"], *extra_paths])
    if scratch:
        env.update({"HOME": f"{scratch}/home", "TMPDIR": "/tmp", "XDG_CACHE_HOME": "/cache",
                    "TRITON_CACHE_DIR": "/cache/triton", "TRITON_HOME": "/cache"})
    env.update(spec_env)
    return env


class SandboxedProcess:
    """A runner process in its sandbox; `kill()` ends it with everything it started. A trusted
    runner (the baseline's) is a plain process with the judge's environment, in a cgroup where
    there is one, so that it is timed under the same conditions and ended the same way."""

    def __init__(self, argv: list[str], spec: SandboxSpec, pass_fds: list[int], log_path: Path):
        caps = capabilities()
        missing = [] if spec.trusted else caps.missing()
        if missing and spec.mode != "weak":
            raise SandboxUnavailable(
                f"the evaluation sandbox is incomplete on this machine: {'; '.join(missing)}; fix that, or accept "
                f"a weaker sandbox explicitly (executor.sandbox=weak, bench --sandbox weak)")
        self.record = {"tool": None, "namespaces": [], "uid": os.getuid(), "network": "host", "cgroup": None,
                       "mode": "strict" if not missing else "weak: no " + "; no ".join(missing)}
        self.cgroup: Cgroup | None = None
        self._oom_kills_before = _own_oom_kills()
        if caps.cgroup == "container":
            self.record["cgroup"] = f"the container's ({os.environ[CONTAINER_LIMITS_ENV]}), shared with the judge"
        elif caps.cgroup:
            try:
                name = f"runner-{os.getpid()}-{time.monotonic_ns()}"
                self.cgroup = Cgroup(caps.cgroup, name, spec.memory_bytes, spec.max_pids, spec.start_cpus or spec.cpus)
                memory = f"{spec.memory_bytes >> 20} MiB" if spec.memory_bytes else "no limit"
                weight = (f"cpu weight {CPU_WEIGHT} for all its processes" if not self.cgroup.cpu_weight_problem
                          else f"no cpu weight: {self.cgroup.cpu_weight_problem}")
                self.record["cgroup"] = f"{caps.cgroup}: memory {memory}, {spec.max_pids} pids, {weight}"
            except OSError as exc:
                if spec.mode != "weak" and not spec.trusted:
                    raise SandboxUnavailable(f"cannot create the runner's cgroup: {exc}; accept a weaker sandbox "
                                             f"with executor.sandbox=weak, bench --sandbox weak") from None
                self.record["mode"] = f"weak: no cgroup ({exc})"
        (spec.scratch / "home").mkdir(parents=True, exist_ok=True)
        if spec.trusted:
            cmd = argv
            env = {**os.environ, **spec.env, "PYTHONUNBUFFERED": "1"}
            if spec.cache is not None:
                env.update(EVOTEAM_CACHE_DIR=str(spec.cache / "evoteam"), FLASHINFER_WORKSPACE_BASE=str(spec.cache))
        elif caps.bwrap is not None:
            env = runner_env(spec.env, spec.device, inside=True)
            cmd = bwrap_command(caps.bwrap, SandboxSpec(**{**spec.__dict__, "env": env})) + argv
            self.record.update(tool="bubblewrap", uid=UNPRIVILEGED_UID, network="none (loopback only)",
                               namespaces=["user", "pid", "mount", "net", "ipc", "uts", "cgroup"])
        else:
            cmd = argv
            env = {**runner_env(spec.env, spec.device, inside=False), "HOME": str(spec.scratch / "home")}
            if spec.cache is not None:
                env.update(TRITON_CACHE_DIR=str(spec.cache / "triton"), XDG_CACHE_HOME=str(spec.cache))
        # A shell puts itself into the cgroup, sets the limits and makes itself the out-of-memory killer's
        # first choice, then becomes the sandbox: every process of the runner starts inside all of them.
        prologue = (f"echo 1000 > /proc/self/oom_score_adj 2>/dev/null; ulimit -c 0; "
                    f"ulimit -f {FILE_SIZE_LIMIT // 512} 2>/dev/null; ulimit -n 4096 2>/dev/null; ")
        if self.cgroup is not None:
            prologue += "".join(f"echo $$ > {shlex.quote(f)} && " for f in self.cgroup.procs_files())
        shell = [shutil.which("sh") or "/bin/sh", "-c", prologue + 'exec "$@"', "sh", *cmd]
        self.log_path = log_path
        pin = None
        if spec.cpus:
            held = self.cgroup is not None and not self.cgroup.cpuset_problem
            self.record["cpus"] = ",".join(map(str, sorted(spec.cpus))) + (
                " (cpuset)" if held else f" (affinity only: {self.cgroup.cpuset_problem if self.cgroup else 'no cgroup'})")
            pin = functools.partial(os.sched_setaffinity, 0, spec.start_cpus or spec.cpus)
        self.cpus, self.pinned = spec.cpus, not spec.start_cpus or spec.start_cpus == spec.cpus
        self.forked = spec.trusted and spec.fork and fork.can_fork()
        if self.forked:  # the same prologue, in the forked child
            limits = {resource.RLIMIT_CORE: 0, resource.RLIMIT_FSIZE: FILE_SIZE_LIMIT, resource.RLIMIT_NOFILE: 4096}
            self.proc = fork.spawn(argv, env=env, cwd=str(spec.scratch), log_path=log_path, pass_fds=pass_fds,
                                   procs_files=self.cgroup.procs_files() if self.cgroup is not None else [],
                                   cpus=spec.start_cpus or spec.cpus, limits=limits)
            self.record["started"] = "forked from the judge"
        else:
            with open(log_path, "wb") as log:
                self.proc = subprocess.Popen(shell, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                             env=env, pass_fds=pass_fds, start_new_session=True,
                                             cwd=str(spec.scratch), preexec_fn=pin)
        # The cgroup's limits hold only where the kernel enforces them (gVisor accepts and ignores them):
        # the judge holds the candidate's runner to the same limits itself.
        self.guard: ResourceGuard | None = None
        if not spec.trusted:
            folders = [f for f in (spec.scratch, spec.cache) if f is not None]
            self.guard = ResourceGuard(self._pids, self._end_all, spec.memory_bytes, spec.max_pids,
                                       folders=folders, disk_bytes=spec.disk_bytes, avoid_cpus=spec.cpus)
            self.record["guard"] = (f"the judge polls the runner's resident memory and processes every "
                                    f"{self.guard.poll_s * 1e3:.0f} ms, its folders' size "
                                    f"({spec.disk_bytes >> 20} MiB at most), and ends it over a limit")

    def poll(self) -> int | None:
        return self.proc.poll()

    def freeze(self, frozen: bool) -> None:
        """Stop every process of the runner (waiting until they are; FreezeFailed when they are not in time), or let
        them go on. Without a cgroup (a weak sandbox) by signals to the process tree, unconfirmed."""
        if self.cgroup is not None:  # helpers outlive the runner's first process in its cgroup
            try:
                self.cgroup.freeze(frozen)
                return
            except OSError:
                pass
        if self.proc.poll() is not None:
            return
        for pid in descendants(self.proc.pid):
            try:
                os.kill(pid, signal.SIGSTOP if frozen else signal.SIGCONT)
            except ProcessLookupError:
                pass

    def _pids(self) -> list[int]:
        """The runner's processes: its cgroup's (detached children too), else the tree under its first."""
        pids = self.cgroup.pids() if self.cgroup is not None else set()
        if pids:
            return list(pids)
        return descendants(self.proc.pid) if self.proc.poll() is None else []

    def _end_all(self) -> None:
        """Kill every process of the runner without reaping it (the guard's thread calls this)."""
        if self.cgroup is not None:
            try:
                self.cgroup.kill()
            except OSError:
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def python_pids(self) -> list[int]:
        """The runner's own Python processes (the sandbox's init and shells left out: a signal they do not expect
        would end them)."""
        from evoteam.harness.guard import descendants

        found = []
        for pid in [self.proc.pid, *descendants(self.proc.pid)]:
            if self.forked and pid == self.proc.pid:  # its command line is still the judge's
                found.append(pid)
                continue
            try:
                if b"evoteam.harness.runner" in Path(f"/proc/{pid}/cmdline").read_bytes():
                    found.append(pid)
            except OSError:
                pass
        return found

    def kill(self) -> None:
        """End the runner and everything it started, then reap it."""
        if self.guard is not None:
            self.guard.stop()
        self._end_all()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass

    def pin(self) -> None:
        """Hold the runner to `spec.cpus` from here on (it started on `spec.start_cpus`): its cpuset where it has one,
        and every thread's affinity (all there is without a cpuset; with one, the kernel already narrowed them)."""
        if self.pinned or not self.cpus:
            return
        if self.cgroup is not None and not self.cgroup.cpuset_problem:
            self.cgroup.set_cpus(self.cpus)
        for tid in threads(self._pids()):
            try:
                os.sched_setaffinity(tid, self.cpus)
            except OSError:  # ended meanwhile
                pass
        self.pinned = True

    def cpu_usec(self) -> int | None:
        """The runner's CPU time so far (its cgroup's), or None where it has no cgroup of its own."""
        return self.cgroup.cpu_usec() if self.cgroup is not None else None

    def queued_usec(self) -> int:
        """The runner's threads' time waiting for a CPU held by another process (see Cgroup.queued_usec); 0 where it
        has no cgroup of its own."""
        return self.cgroup.queued_usec() if self.cgroup is not None else 0

    def memory_bytes(self) -> int:
        """Resident memory of every process of the runner."""
        return resident_bytes(descendants(self.proc.pid))

    def out_of_memory(self) -> bool:
        if self.guard is not None and self.guard.out_of_memory:
            return True
        if self.cgroup is None:  # in a container: its cgroup (ours too) counts the kills
            return _own_oom_kills() > self._oom_kills_before
        for line in self.cgroup.memory_events().splitlines():
            key, _, value = line.partition(" ")
            if (key == "oom_kill" and value.strip() not in ("", "0")) or (key == "under_oom" and value.strip() == "1"):
                return True
        return False

    def logs(self, chars: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def close(self) -> None:
        if self.guard is not None:
            self.guard.stop()
        if self.proc.poll() is None:
            self.kill()
        else:
            if self.cgroup is not None:
                self.cgroup.kill()  # a detached child may have outlived the runner's first process
        if self.cgroup is not None:
            self.cgroup.remove()


def _own_oom_kills() -> int:
    """How many processes the kernel killed for memory in this process's own cgroup (v2 or v1)."""
    for path in (CGROUP_ROOT / "memory.events", CGROUP_ROOT / "memory" / "memory.oom_control"):
        try:
            for line in path.read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
        except (OSError, ValueError):
            continue
    return 0
