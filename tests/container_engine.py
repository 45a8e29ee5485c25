"""A container engine for the tests, with no image registry: podman serving the Docker API, and the
CPU worker image (docker/Dockerfile.cpu, target `worker`) built offline.

    python tests/container_engine.py prepare     install podman (as root, Debian's package) and build the images
    python tests/container_engine.py serve       the above, then serve the Docker API until interrupted
    python tests/container_engine.py full        build Dockerfile.cpu's default target (everything) offline
                                                 and run the main job in it (not part of CI: ~3 minutes cold)

The base image is made with debootstrap (Debian bookworm with its Python 3.11, this project's Python)
and imported; the worker image installs its Python packages from a wheel folder that `pip download`
fills on the host. Both are cached, keyed by the content of their inputs: a warm run on the same
machine builds nothing (podman's images persist in /var/lib/containers, the wheels in CACHE_ROOT).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CACHE_ROOT = Path(os.environ.get("EVOTEAM_ENGINE_CACHE", "/var/cache/evoteam"))
SOCKET = Path(os.environ.get("EVOTEAM_ENGINE_SOCKET", "/run/evoteam-podman/podman.sock"))
DEBIAN_SUITE = "bookworm"
DEBIAN_PACKAGES = ("python3", "python3-venv", "bubblewrap")
CONTAINERS_CONF = Path("/etc/containers/containers.conf")
# What this kind of machine needs (measured on it): runc with cgroupfs, no default ulimits.
CONTAINERS_CONF_TEXT = ('[containers]\ndefault_ulimits = []\n[engine]\ncgroup_manager = "cgroupfs"\n'
                        'runtime = "runc"\n')
TORCH = "torch==2.13.0"  # the CPU build (the Makefile's default)
BUILD_BACKEND = "hatchling>=1.25"
# What the image's build reads: a change in any of them makes a new image.
IMAGE_INPUTS = ("docker/Dockerfile.cpu", "docker/requirements-worker.txt", "pyproject.toml", "README.md",
                "evoteam", "kernels", "hardware", "conf")
IMAGE_REPO = "localhost/evoteam/cpu-worker"
BASE_REPO = "localhost/evoteam/bookworm-python"


def log(message: str) -> None:
    print(f"container_engine: {message}", file=sys.stderr, flush=True)


def _run(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(list(args), check=True, text=True, **kw)


def _digest(*parts: str | bytes) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode() if isinstance(part, str) else part)
        h.update(b"\0")
    return h.hexdigest()[:16]


def _tree_digest(paths: tuple[str, ...]) -> str:
    h = hashlib.sha256()
    for name in paths:
        root = REPO / name
        files = sorted(p for p in root.rglob("*") if p.is_file()) if root.is_dir() else [root]
        for f in files:
            if "__pycache__" in f.parts or f.suffix == ".pyc":
                continue
            h.update(str(f.relative_to(REPO)).encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()[:16]


# ----------------------------------------------------------------------------- the engine


def debian_mirror() -> str:
    """The Debian mirror this machine's apt uses (the one it can reach)."""
    sources = Path("/etc/apt/sources.list.d/debian.sources")
    if sources.is_file():
        for line in sources.read_text().splitlines():
            if line.startswith("URIs:") and "security" not in line:
                return line.split()[1]
    return "http://deb.debian.org/debian"


def install_podman() -> None:
    """podman, runc, catatonit (the containers' init) and debootstrap from Debian, where missing."""
    wanted = {"podman": "podman", "runc": "runc", "catatonit": "catatonit", "debootstrap": "debootstrap",
              "newuidmap": "uidmap"}
    missing = [pkg for tool, pkg in wanted.items()
               if not shutil.which(tool) and not Path(f"/usr/libexec/podman/{tool}").exists()]
    if missing:
        if os.geteuid() != 0:
            raise SystemExit(f"container_engine: missing {', '.join(missing)}; run as root or: "
                             f"sudo apt-get install {' '.join(missing)}")
        log(f"installing {', '.join(missing)} (Debian packages)")
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        _run("apt-get", "update", "-qq", env=env, stdout=subprocess.DEVNULL)
        _run("apt-get", "install", "-y", "-qq", *missing, env=env, stdout=subprocess.DEVNULL)
    if not CONTAINERS_CONF.exists() and os.geteuid() == 0:
        CONTAINERS_CONF.parent.mkdir(parents=True, exist_ok=True)
        CONTAINERS_CONF.write_text(CONTAINERS_CONF_TEXT)


def engine_url() -> str:
    return f"unix://{SOCKET}"


def engine_answers(url: str | None = None) -> bool:
    import docker

    try:
        docker.DockerClient(base_url=url or engine_url(), timeout=10).ping()
        return True
    except Exception:  # noqa: BLE001 - any failure means no engine there
        return False


@contextlib.contextmanager
def serving():
    """The Docker API of podman at SOCKET for the duration of the block (an engine already serving
    there is used as it is and left running)."""
    if engine_answers():
        yield engine_url()
        return
    if not shutil.which("podman"):
        raise RuntimeError("podman is not installed (python tests/container_engine.py prepare installs it)")
    SOCKET.parent.mkdir(parents=True, exist_ok=True)
    SOCKET.unlink(missing_ok=True)
    log_file = open(CACHE_ROOT / "podman-service.log", "w") if CACHE_ROOT.is_dir() else subprocess.DEVNULL
    # In a folder of its own: conmon writes a file named `oom` into its working directory when a container is
    # killed for memory (test_container_executor's memory test left one in the checkout's root)
    proc = subprocess.Popen(["podman", "system", "service", "--time=0", engine_url()], stdout=log_file,
                            stderr=subprocess.STDOUT, start_new_session=True, cwd=SOCKET.parent)
    try:
        deadline = time.monotonic() + 30
        while not engine_answers():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"podman system service did not answer at {engine_url()} "
                                   f"(exit {proc.poll()}; see {CACHE_ROOT / 'podman-service.log'})")
            time.sleep(0.2)
        yield engine_url()
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if log_file is not subprocess.DEVNULL:
            log_file.close()


# ----------------------------------------------------------------------------- the images


def _image_exists(name: str) -> bool:
    return subprocess.run(["podman", "image", "exists", name]).returncode == 0


def base_image() -> str:
    """Debian bookworm (minbase) with its Python, made by debootstrap and imported: no pull."""
    mirror = debian_mirror()
    name = f"{BASE_REPO}:{_digest(DEBIAN_SUITE, mirror, *DEBIAN_PACKAGES)}"
    if _image_exists(name):
        return name
    log(f"making the base image {name} with debootstrap ({mirror})")
    CACHE_ROOT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=CACHE_ROOT, prefix="rootfs-") as root:
        _run("debootstrap", "--variant=minbase", f"--include={','.join(DEBIAN_PACKAGES)}", DEBIAN_SUITE, root,
             mirror, stdout=subprocess.DEVNULL)
        tar = subprocess.Popen(["tar", "-C", root, "-c", "."], stdout=subprocess.PIPE)
        _run("podman", "import", "-", name, stdin=tar.stdout, stdout=subprocess.DEVNULL)
        if tar.wait() != 0:
            raise RuntimeError("tar of the debootstrap root failed")
    return name


def wheels() -> Path:
    """A folder with every wheel the worker image installs (CPython 3.11, manylinux x86-64)."""
    requirements = (REPO / "docker" / "requirements-worker.txt").read_text()
    folder = CACHE_ROOT / "wheels" / _digest(requirements, TORCH, BUILD_BACKEND)
    done = folder / ".complete"
    if done.is_file():
        return folder
    log(f"downloading wheels into {folder}")
    folder.mkdir(parents=True, exist_ok=True)
    result = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--dest", str(folder),
                             "--only-binary=:all:", "--python-version", "3.11", "--implementation", "cp",
                             "--abi", "cp311", "--abi", "abi3", "--abi", "none", "--platform", "manylinux_2_28_x86_64",
                             TORCH, BUILD_BACKEND, "-r", str(REPO / "docker" / "requirements-worker.txt")],
                            capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"pip download failed: {(result.stdout + result.stderr).strip()[-2000:]}")
    done.write_text(requirements)
    return folder


def worker_image() -> str:
    """The CPU worker image of this checkout, built offline; reused while its inputs are unchanged."""
    base = base_image()
    folder = wheels()
    name = f"{IMAGE_REPO}:{_digest(base, str(folder), _tree_digest(IMAGE_INPUTS))}"
    if _image_exists(name):
        return name
    log(f"building {name} (docker/Dockerfile.cpu, target worker, offline)")
    started = time.monotonic()
    _run("podman", "build", "--pull=never", "--network=none", "--layers", "-f", "docker/Dockerfile.cpu",
         "--target", "worker", "--build-arg", f"BASE={base}", "--build-arg", "PIP_ARGS=--no-index",
         "--build-context", f"wheels={folder}", "-t", name, ".", cwd=REPO, stdout=subprocess.DEVNULL)
    log(f"built {name} in {time.monotonic() - started:.0f} s")
    _drop_other_tags(IMAGE_REPO, name)
    return name


def _drop_other_tags(repo: str, keep: str) -> None:
    """Earlier builds of this checkout share the layers below the package; their tags can go."""
    listed = subprocess.run(["podman", "images", "--format", "{{.Repository}}:{{.Tag}}", repo],
                            capture_output=True, text=True).stdout.split()
    for old in listed:
        if old != keep:
            subprocess.run(["podman", "rmi", old], capture_output=True)


def full_image() -> str:
    """Dockerfile.cpu's default target (the whole package, its tools and tracking), built offline
    from wheels that `pip wheel` makes on the host (it builds the few dependencies that PyPI has only
    as source), then the main job run inside it, without network."""
    base = base_image()
    pyproject = (REPO / "pyproject.toml").read_text()
    folder = CACHE_ROOT / "wheels-full" / _digest(pyproject, TORCH, BUILD_BACKEND)
    if not (folder / ".complete").is_file():
        log(f"making wheels of evoteam[dev]'s dependencies in {folder}")
        folder.mkdir(parents=True, exist_ok=True)
        result = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--wheel-dir", str(folder), TORCH,
                                 BUILD_BACKEND, f"{REPO}[dev]"], capture_output=True, text=True)
        if result.returncode != 0:
            raise RuntimeError(f"pip wheel failed: {(result.stdout + result.stderr).strip()[-2000:]}")
        for own in folder.glob("evoteam-*.whl"):
            own.unlink()  # the image installs the package from its own copy of the source
        (folder / ".complete").write_text(pyproject)
    name = f"localhost/evoteam/cpu-full:{_digest(base, str(folder), _tree_digest(IMAGE_INPUTS))}"
    if not _image_exists(name):
        log(f"building {name} (docker/Dockerfile.cpu, default target, offline)")
        _run("podman", "build", "--pull=never", "--network=none", "--layers", "-f", "docker/Dockerfile.cpu",
             "--build-arg", f"BASE={base}", "--build-arg", "PIP_ARGS=--no-index", "--build-context",
             f"wheels={folder}", "-t", name, ".", cwd=REPO, stdout=subprocess.DEVNULL)
    _drop_other_tags("localhost/evoteam/cpu-full", name)
    log(f"running the main job in {name}")
    _run("podman", "run", "--rm", "--network=none", name, "python", "-m", "evoteam", "hardware=cpu",
         "task.workloads=[00cb2bc2]", "budget.max_evaluations=2", "seed=2", "team=single")
    return name


def prepare() -> str:
    install_podman()
    CACHE_ROOT.mkdir(parents=True, exist_ok=True)
    return worker_image()


def main(argv: list[str]) -> int:
    command = argv[0] if argv else "prepare"
    if command not in ("prepare", "serve", "full"):
        print(__doc__.strip().splitlines()[0] + "\nusage: python tests/container_engine.py prepare|serve|full",
              file=sys.stderr)
        return 2
    if command == "full":
        install_podman()
        log(f"{full_image()} built and ran the main job")
        return 0
    started = time.monotonic()
    image = prepare()
    log(f"image {image} ready ({time.monotonic() - started:.0f} s)")
    if command == "serve":
        with serving() as url:
            log(f"serving the Docker API at {url} (Ctrl-C stops)")
            with contextlib.suppress(KeyboardInterrupt):
                while True:
                    time.sleep(3600)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
