# Sourced by the scripts/gpu_*.sh scripts: the Python environment on a GPU host.
#   use_wheels [MODULE ...]
# Where .whl exists (wheels the lent machine lacks: scripts/fetch_wheels.sh) and one of the
# modules does not import (or none is named), the wheels are installed into /tmp/site and put first
# on PYTHONPATH; the repository goes on PYTHONPATH in every case.
use_wheels() {
  local probe=""
  [ $# -gt 0 ] && probe="import $(IFS=,; echo "$*")"
  if [ -d .whl ] && { [ -z "$probe" ] || ! python3 -c "$probe" 2>/dev/null; }; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
      .whl/*.whl || return 1
    export PYTHONPATH=/tmp/site:$PWD
  else
    export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
  fi
}
