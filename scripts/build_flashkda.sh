#!/usr/bin/env bash
# Builds FlashKDA (MoonshotAI/FlashKDA: CUTLASS kernels for sm_90a/sm_100a, not on PyPI) from its public
# source into a site folder, so that `import flash_kda` works there and the `flashkda` baseline calls it.
#   bash scripts/build_flashkda.sh SRC [SITE]
# SRC   a checkout of https://github.com/MoonshotAI/FlashKDA, or a .tar.gz of one (git archive), at the pinned
#       commit below: the newest of its master branch (1ce47ea, committed 2026-07-28; still master's head in the
#       snapshot read on 2026-12-06), built and run on the lent H200 on 2026-12-02. A source at another commit is
#       refused unless FLASHKDA_COMMIT names it (e.g. vLLM's fork https://github.com/vllm-project/FlashKDA with the
#       V-split, UNVERIFIED here: kernels/kda_prefill/DESIGN.md, "FlashKDA vs fla"). Its `cutlass` submodule is used where initialised;
#       otherwise the CUTLASS headers that the nvidia-cutlass wheel ships under cutlass_library/source/
#       (pip install nvidia-cutlass==4.2.0.0; for a host without an index, scripts/fetch_wheels.sh
#       nvidia-cutlass==4.2.0.0 puts the wheel in .whl/ and scripts/device_env.sh installs it).
# SITE  where it is installed (default /tmp/site): put it on PYTHONPATH.
# FLASH_KDA_CUDA_ARCHS  90a (default: H100, H200), 100a (B200; unverified here), or a comma-separated list.
# FLASHKDA_SAVE=FILE.tgz  also packs what was installed, for a later `tar xzf FILE.tgz -C SITE` on a host of
#       the same image (scripts/device_env.sh's use_flashkda does that), instead of building again.
# Needs torch with CUDA and nvcc >= 12.9 (FlashKDA's README). About 2 minutes on the H200 host's 16 cores.
set -euo pipefail
# The pinned commit: the one place it is written. docker/Dockerfile.cuda's FLASHKDA_COMMIT default must equal it
# (tests/test_build_flashkda.py checks that).
pinned=1ce47ea3bb22c84eb9cc665028399cf35e8ffb0b
want=${FLASHKDA_COMMIT:-$pinned}
src=${1:?usage: build_flashkda.sh SRC [SITE]: SRC is a checkout (or .tar.gz) of https://github.com/MoonshotAI/FlashKDA}
site=${2:-/tmp/site}
fail() { echo "build_flashkda: $*" >&2; exit 2; }
[ -e "$src" ] || fail "$src does not exist; give a checkout (or .tar.gz) of https://github.com/MoonshotAI/FlashKDA"
work=$(mktemp -d /tmp/flashkda-build.XXXXXX)
trap 'rm -rf "$work"' EXIT
if [ -f "$src" ]; then
  tar xzf "$src" -C "$work" 2>/dev/null || fail "$src is not a .tar.gz of FlashKDA's source"
  setup=$(find "$work" -maxdepth 2 -name setup.py | head -1)
  tree=${setup%/setup.py}
else
  cp -a "$src" "$work/flash-kda" && tree=$work/flash-kda
fi
[ -n "$tree" ] && [ -f "$tree/setup.py" ] && [ -f "$tree/csrc/flash_kda.cpp" ] || fail "$src holds no FlashKDA source (setup.py, csrc/flash_kda.cpp)"
# The source's commit: a checkout's HEAD, or the id that `git archive` writes into its tarball. It is the version's
# local label (setup.py would ask git, below) and must be the pinned one.
commit=""
if command -v git >/dev/null; then
  if [ -f "$src" ]; then commit=$(gzip -dc "$src" | git get-tar-commit-id 2>/dev/null || true)
  else commit=$(git -C "$src" rev-parse HEAD 2>/dev/null || true); fi
fi
if [ -n "$commit" ] && [ "$commit" != "$want" ]; then
  fail "$src is FlashKDA at ${commit:0:12}, not the pinned ${want:0:12}; set FLASHKDA_COMMIT=$commit to build it anyway"
fi
[ -n "$commit" ] || echo "build_flashkda: $src names no commit (not a git checkout or git archive): not checked against the pinned ${want:0:12}" >&2
export FLASH_KDA_VERSION_SUFFIX="+${commit:0:7}"
[ -n "$commit" ] || FLASH_KDA_VERSION_SUFFIX="+unknown"
echo "FlashKDA source: $src (commit ${commit:-unknown})"
if [ ! -f "$tree/cutlass/include/cutlass/cutlass.h" ]; then
  headers=$(python3 -c 'import pathlib, cutlass_library; print(pathlib.Path(cutlass_library.__file__).parent / "source")' \
    2>/dev/null || true)
  [ -f "$headers/include/cutlass/cutlass.h" ] || fail "no CUTLASS: the source's cutlass submodule is not initialised \
and cutlass_library (pip install nvidia-cutlass==4.2.0.0) does not import"
  rm -rf "$tree/cutlass" && ln -s "$headers" "$tree/cutlass"
  echo "CUTLASS headers: $headers"
fi
command -v nvcc >/dev/null || fail "no nvcc on PATH (FlashKDA needs CUDA >= 12.9's nvcc)"
# setup.py runs `git submodule update --init cutlass`, which would fetch from the network: the cutlass folder is
# settled above, so a no-op git stands in for that one command.
mkdir -p "$work/bin" && printf '#!/bin/sh\nexit 0\n' > "$work/bin/git" && chmod +x "$work/bin/git"
mkdir -p "$site"
start=$(date +%s)
(cd "$tree" && PATH=$work/bin:$PATH FLASH_KDA_CUDA_ARCHS=${FLASH_KDA_CUDA_ARCHS:-90a} NVCC_THREADS=${NVCC_THREADS:-4} \
  MAX_JOBS=${MAX_JOBS:-$(nproc)} python3 -m pip install -q --no-build-isolation --no-deps --no-index --no-cache-dir \
  --upgrade --target "$site" .) || fail "the build failed (its output is above)"
PYTHONPATH=$site${PYTHONPATH:+:$PYTHONPATH} python3 -c 'import flash_kda' || fail "built, but flash_kda does not import"
echo "FlashKDA built for ${FLASH_KDA_CUDA_ARCHS:-90a} into $site in $(( $(date +%s) - start )) s"
if [ -n "${FLASHKDA_SAVE:-}" ]; then
  # MoonshotAI's extension is flash_kda_C*.so beside the package; vLLM's fork builds it inside it (flash_kda/_C*.so)
  (cd "$site" && tar czf "$FLASHKDA_SAVE" flash_kda $(ls -d flash_kda_C*.so 2>/dev/null) flash_kda*.dist-info) \
    && echo "saved: $FLASHKDA_SAVE"
fi
