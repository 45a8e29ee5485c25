#!/usr/bin/env bash
# Checks docker/Dockerfile.cuda's recipe on a GPU host without an image registry (the lent H200):
# the host's own Python, torch, Triton and nvcc stand in for the base image, and the image's pip steps
# are replayed from a wheel folder (.whl, made by scripts/fetch_wheels.sh) instead of an index.
#
#   bash docker/check_recipe.sh [OUT_DIR]          (about 3-5 minutes on an H200; K=... narrows the GPU tests)
#
# 1. base: CUDA >= 12.8 (12.9 for FlashKDA), nvcc compiles for sm_90a and sm_100a (FLASHKDA_ARCHS)
# 2. "pip install /src[cuda]": the wheels of the cuda extra, at the versions pyproject.toml pins, and
#    evoteam laid out as its wheel is (package + kernels/, hardware/, conf/ under evoteam/_data) in a
#    fresh site folder; everything is imported from there, not from the checkout
# 3. the image's build check (python -c "import evoteam.harness.judge, ..., flashinfer") and the
#    baselines the harness finds there
# 4. one evaluation through the harness with the environment executor=docker gives its judge
#    container (caches redirected as evoteam.harness.container.CACHE_ENV says)
# 5. the GPU tests: pytest -m gpu tests/test_gpu.py, run from outside the checkout
# Not replayed (needs a registry or the network): pulling the base image, cloning and building
# FlashKDA, vLLM; the pure-Python dependencies (tracking, LLM) that the CPU CI covers.
set -uo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
OUT=${1:-}
WORK=$(mktemp -d /tmp/evoteam-recipe.XXXXXX)
SITE=$WORK/site
PY=${PYTHON:-python3}
failures=0
log() { echo "check_recipe: $*"; }
step() { log "== $1"; }
fail() { log "FAILED: $*"; failures=$((failures + 1)); }

step "1. base image stand-in: Python, torch, CUDA, nvcc"
$PY - <<'EOF' || fail "torch/CUDA below the recipe's base (CUDA >= 12.8 with a GPU)"
import sys, torch, triton
cuda = torch.version.cuda or "none"
print(f"python {sys.version.split()[0]}, torch {torch.__version__}, cuda {cuda}, triton {triton.__version__}")
print(f"gpu {torch.cuda.get_device_name(0)} sm_{''.join(map(str, torch.cuda.get_device_capability(0)))}"
      if torch.cuda.is_available() else "gpu none")
major, minor = (int(x) for x in cuda.split(".")[:2]) if cuda != "none" else (0, 0)
sys.exit(0 if (major, minor) >= (12, 8) and torch.cuda.is_available() else 1)
EOF
if command -v nvcc >/dev/null; then
  nvcc --version | tail -n 2
  printf '__global__ void k(float *x) { x[threadIdx.x] *= 2.0f; }\n' > "$WORK/k.cu"
  if nvcc -c -o "$WORK/k.o" -gencode arch=compute_90a,code=sm_90a -gencode arch=compute_100a,code=sm_100a "$WORK/k.cu"; then
    log "nvcc compiles for sm_90a and sm_100a (the FlashKDA build's FLASHKDA_ARCHS=90a,100a)"
  else
    fail "nvcc cannot compile for sm_90a and sm_100a"
  fi
else
  fail "no nvcc (the recipe's base is a devel image: FlashInfer's JIT and FlashKDA need it)"
fi

step "2. the image's pip step, from .whl: the cuda extra's wheels and evoteam as its wheel lays it out"
mkdir -p "$SITE"
if ls "$REPO"/.whl/*.whl >/dev/null 2>&1; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$SITE" "$REPO"/.whl/*.whl \
    || fail "pip install of .whl"
else
  fail "no wheels in .whl (run scripts/fetch_wheels.sh on a machine with a registry and carry .whl)"
fi
cp -r "$REPO/evoteam" "$SITE/evoteam"
mkdir -p "$SITE/evoteam/_data"
cp -r "$REPO/kernels" "$REPO/hardware" "$REPO/conf" "$SITE/evoteam/_data/"
find "$SITE/evoteam" -name __pycache__ -prune -exec rm -rf {} +
export PYTHONPATH=$SITE
cd "$WORK" || exit 1  # imports come from the site folder, not from the checkout
$PY - "$REPO/pyproject.toml" <<'EOF' || fail "installed versions differ from pyproject.toml's cuda extra"
import importlib.metadata as md, re, sys, tomllib
pins = tomllib.load(open(sys.argv[1], "rb"))["project"]["optional-dependencies"]["cuda"]
bad = []
for pin in pins:
    name, version = re.match(r"([A-Za-z0-9_.-]+)==(\S+)", pin).groups()
    try:
        found = md.version(name)
    except md.PackageNotFoundError:
        found = "missing"
    print(f"  {name}: pinned {version}, installed {found}")
    if found != version:
        bad.append(name)
sys.exit(1 if bad else 0)
EOF

step "3. the image's build check, and what the harness finds there"
$PY -c "import evoteam.harness.judge, evoteam.harness.runner, evoteam.harness.container, evoteam.config, torch, triton, flashinfer, fla.ops.kda; print('imports ok; evoteam from', evoteam.harness.judge.__file__)" \
  || fail "imports"
$PY - <<'EOF' || fail "baselines"
from evoteam import hardware, resources
from evoteam.harness import baselines
from evoteam.task import load_task
hw = hardware.resolve("auto")
print(f"  target {hw.name}; data from {resources.data_root()}")
assert "_data" in str(resources.data_root()), "data folders must come from the installed package"
def availability(task):
    """'available' or 'unavailable: <reason>' for every adapter (one that needs options says which)."""
    out = {}
    for name, cls in baselines.ADAPTERS.items():
        try:
            reason = cls().unavailable_reason(task, hw)
        except baselines.BaselineUnavailable as exc:  # solution: needs path=FILE
            reason = str(exc)
        out[name] = "available" if reason is None else f"unavailable: {reason}"
    return out
status = {task: availability(load_task(task)) for task in ("mla_decode", "kda_prefill")}
for task, states in status.items():
    for name, state in states.items():
        print(f"  {task:12s} {name:10s} {state}")
assert status["mla_decode"]["flashinfer"] == "available", status["mla_decode"]["flashinfer"]
assert status["kda_prefill"]["fla"] == "available", status["kda_prefill"]["fla"]
EOF

step "4. one evaluation by the harness with the container's environment (executor=docker)"
$PY - "$WORK" <<'EOF' || fail "evaluation with the container's environment"
import sys, time
from pathlib import Path
from evoteam import hardware
from evoteam.harness import container
from evoteam.harness.executor import LocalExecutor, evaluate
from evoteam.harness.model import EvalRequest
from evoteam.task import load_task
work = Path(sys.argv[1])
env = {k: v.replace(container.CACHE_DIR, str(work / "cache")) for k, v in container.CACHE_ENV.items()}
env["HOME"] = str(work / "home")
(work / "home").mkdir(exist_ok=True)
task = load_task("mla_decode")
request = EvalRequest(task="mla_decode", hardware=hardware.resolve("auto").name, solution=str(task.folder / "seed_triton.py"),
                      workloads=[task.workloads[0].uuid], baseline="flashinfer", warmup=3, reps=10)
start = time.monotonic()
(r,) = evaluate(request, timeout_s=300, executor=LocalExecutor(extra_env=env)).results
print(f"  {r.status} baseline {r.baseline} {r.baseline_ms} ms, candidate {r.candidate_ms} ms "
      f"({time.monotonic() - start:.0f} s); {r.detail[:200]}")
cached = sorted(p.relative_to(work) for p in (work / "cache").glob("*/*"))[:8]
print(f"  kept in the cache folder: {[str(p) for p in cached]}")
assert r.status in ("PASSED", "flagged_cheat"), r.detail
assert (work / "cache" / "evoteam" / "baseline_timings.jsonl").is_file()
EOF

step "5. the GPU tests (pytest -m gpu tests/test_gpu.py${K:+ -k $K})"
$PY -m pytest -q -rs -p no:cacheprovider -m gpu ${K:+-k "$K"} "$REPO/tests/test_gpu.py" 2>&1 | tail -n 15
[ "${PIPESTATUS[0]}" = 0 ] || fail "GPU tests"

if [ "$failures" = 0 ]; then log "recipe check passed"; else log "$failures step(s) failed"; fi
if [ -n "$OUT" ]; then mkdir -p "$OUT" && echo "failures=$failures" > "$OUT/check_recipe.txt"; fi
rm -rf "$WORK"
exit $((failures > 0))
