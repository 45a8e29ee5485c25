# Sourced by the scripts/gpu_*.sh scripts: the Python environment on a GPU host.
#   use_wheels [MODULE ...]
# Where .whl exists (wheels the lent machine lacks: scripts/fetch_wheels.sh) and one of the
# modules does not import (or none is named), the wheels are installed into /tmp/site and put first
# on PYTHONPATH (their commands last on PATH); the repository goes on PYTHONPATH in every case. FlashInfer there is
# one version: the slim 0.7.4 (default) or 0.5.3, as scripts/fetch_wheels.sh made .whl/ (FLASHINFER=...).
use_wheels() {
  local probe=""
  [ $# -gt 0 ] && probe="import $(IFS=,; echo "$*")"
  if [ -d .whl ] && { [ -z "$probe" ] || ! python3 -c "$probe" 2>/dev/null; }; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
      .whl/*.whl || return 1
    export PYTHONPATH=/tmp/site:$PWD
    # the wheels' commands (ninja, which FlashInfer's JIT runs), after the host's own
    [ -d /tmp/site/bin ] && export PATH=$PATH:/tmp/site/bin
  else
    export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
  fi
}

# use_bwrap: bubblewrap, the candidates' sandbox, where the host lacks it: unpacked from its Debian packages in
# .devtools/ (apt-get download bubblewrap libcap2 libselinux1 libpcre2-8-0) into /tmp/bw, put first on PATH.
use_bwrap() {
  command -v bwrap >/dev/null && return 0
  ls .devtools/*.deb >/dev/null 2>&1 || { echo "no bwrap and no .devtools/*.deb to unpack it from" >&2; return 1; }
  for f in .devtools/*.deb; do dpkg -x "$f" /tmp/bw; done
  printf '#!/bin/sh\nLD_LIBRARY_PATH=/tmp/bw/lib/x86_64-linux-gnu:/tmp/bw/usr/lib/x86_64-linux-gnu exec /tmp/bw/usr/bin/bwrap "$@"\n' \
    > /tmp/bw/bwrap && chmod +x /tmp/bw/bwrap
  export PATH=/tmp/bw:$PATH
}

# use_flashkda [SAVE.tgz]: FlashKDA for the flashkda baseline, where flash_kda does not import: a build saved by an
# earlier call (.flashkda/built.tgz) unpacked into /tmp/site, else built from the source archive in .flashkda/
# (git archive of https://github.com/MoonshotAI/FlashKDA) by scripts/build_flashkda.sh, saved to SAVE.tgz if given.
# Call use_wheels first (the nvidia-cutlass wheel in .whl/ gives the CUTLASS headers).
use_flashkda() {
  python3 -c 'import flash_kda' 2>/dev/null && return 0
  if [ -f .flashkda/built.tgz ]; then
    mkdir -p /tmp/site && tar xzf .flashkda/built.tgz -C /tmp/site
  else
    local src
    src=$(ls .flashkda/FlashKDA*.tar.gz 2>/dev/null | head -1)
    [ -n "$src" ] || { echo "no flash_kda, no .flashkda/built.tgz and no .flashkda/FlashKDA*.tar.gz to build it from" >&2; return 1; }
    FLASHKDA_SAVE=${1:-} bash scripts/build_flashkda.sh "$src" /tmp/site || return 1
  fi
  case ":${PYTHONPATH:-}:" in *:/tmp/site:*) ;; *) export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH} ;; esac
  python3 -c 'import flash_kda'
}

# use_autotune_cache OUT_DIR DEFAULT_CACHE_DIR: Triton's kernel cache in $TRITON_CACHE_DIR (else DEFAULT_CACHE_DIR), with
# the autotuners' results cached there too (TRITON_CACHE_AUTOTUNING=1). AUTOTUNE_IN=FILE.tgz (an earlier call's
# OUT_DIR/autotune.tgz, carried e.g. in the ignored .device-cache/) is restored first, and the results are saved to
# OUT_DIR/autotune.tgz when the script exits: fla tunes each shape key once, not once per machine start (390 s for
# the first 12 KDA workloads on 2026-11-30).
use_autotune_cache() {
  export TRITON_CACHE_AUTOTUNING=1 TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-$2}
  mkdir -p "$TRITON_CACHE_DIR" "$1"
  if [ -n "${AUTOTUNE_IN:-}" ] && [ -f "$AUTOTUNE_IN" ]; then
    tar xzf "$AUTOTUNE_IN" -C "$TRITON_CACHE_DIR" && echo "autotuning restored from $AUTOTUNE_IN"
  fi
  _autotune_out=$1
  trap _save_autotune EXIT
}
_save_autotune() {  # only when there is something to save (an empty archive would take one of the 8 files back)
  local found
  found=$(cd "$TRITON_CACHE_DIR" && find . -name '*.autotune.json')
  [ -n "$found" ] && (cd "$TRITON_CACHE_DIR" && echo "$found" | tar czf "$_autotune_out/autotune.tgz" -T -)
  return 0
}

# pack_runs ARCHIVE ROOT ITEM...: what a resumed run needs (its folder, the baseline cache, the shared measurements)
# from ROOT into ARCHIVE, without the candidates' compiled kernels (cache/candidates: about 8 MB per candidate, rebuilt
# on demand), which pushed the archive past the 16 MiB a file may have to come back from the lent machine (2026-12-04:
# a team run's state was lost that way). Says so if the archive is still too large.
pack_runs() {
  local archive=$1 root=$2; shift 2
  tar czf "$archive" -C "$root" --exclude=cache/candidates "$@" || return 1
  local bytes
  bytes=$(stat -c %s "$archive")
  [ "$bytes" -lt $((16 * 1024 * 1024)) ] \
    || echo "warning: $archive is $((bytes / 1048576)) MiB, more than a file may have to come back (16 MiB)" >&2
}
