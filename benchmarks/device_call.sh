# Sourced by the one-call device scripts: the output folder (first argument or
# $OUT), the repository root, the environment every GPU process wants, and a
# time budget for the whole call (one device call is at most 600 s).
#   source "$(dirname "$0")/device_call.sh" DEFAULT_BUDGET "$@"
# then `timeout "$(left 120)" cmd` caps a step at 120 s or what is left.
set -uo pipefail
budget=${BUDGET:-$1}
shift
out=${1:-${OUT:?give an output folder}}
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
mkdir -p "$out"
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
left() { local l=$((budget - SECONDS)); [ "$l" -gt "$1" ] && l=$1; [ "$l" -lt 1 ] && l=1; echo "$l"; }
