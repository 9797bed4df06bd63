# Sourced by the ncu profile scripts: the output folder (first argument or
# $OUT), the repository root, jaxdnn built unless SKIP_BUILD is set, and $ncu.
#   source "$(dirname "$0")/profile_setup.sh" "$@"
set -uo pipefail
out=${1:-${OUT:?give an output folder}}
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
mkdir -p "$out"
export XLA_PYTHON_CLIENT_PREALLOCATE=false
[ -n "${SKIP_BUILD:-}" ] || ( cd "$repo" && python3 -m pip install --no-build-isolation --no-deps . ) \
  > "$out/build.log" 2>&1 || exit 1
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
