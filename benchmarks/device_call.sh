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
# kt NAME ENV_ASSIGNMENT [kernel_timing.py args...]: one GPU-busy A/B process
# (benchmarks/kernel_timing.py --attention) with the assignment in its
# environment (A=default for none); rows to $out/kt-NAME.txt and .json.
kt() {
  local name=$1 envset=$2; shift 2
  [ $((budget - SECONDS)) -lt 40 ] && { echo "$name: skipped (time)"; return; }
  ( cd /tmp && env $envset timeout "$(left 100)" python3 "$repo/benchmarks/kernel_timing.py" --attention \
      --out "$out/kt-$name.json" "$@" ) 2>&1 | grep -E "^attn" > "$out/kt-$name.txt"
  echo "-- $name"; cut -c1-110 "$out/kt-$name.txt"
}
# st NAME TIMEOUT [VAR=VALUE...] BINARY [ARGS...]: one self-test run (the
# assignments go to its environment, as `env` takes them); its log in
# $out/NAME.log and a line with its exit status, FAIL and ALL PASSED counts.
st() {
  local name=$1 t=$2; shift 2
  timeout "$(left "$t")" env "$@" > "$out/$name.log" 2>&1
  echo "$name: exit $?; $(grep -c FAIL "$out/$name.log") FAIL lines; $(grep -c 'ALL PASSED' "$out/$name.log") ALL PASSED"
}
# grid_tflops REGEX LOG...: per self-test log, the TFLOP/s of its cases matching
# REGEX (case=value).
grid_tflops() {
  local re=$1; shift
  for f in "$@"; do echo "$(basename "$f" .log): $(grep -E "$re" "$f" | awk '{print $1 "=" $7}' | tr '\n' ' ')"; done
}
# ext_timings LOG...: per ext self-test log, its timed cases' milliseconds in
# the default variant (case=ms;...).
ext_timings() {
  local f
  for f in "$@"; do
    echo "$(basename "$f" .log): $(grep -E '^  timing' "$f" | sed -E 's/ +timing T //; s/ +variant +-?[0-9]+: +/=/; s/ ms .*//' | tr '\n' ';')"
  done
}
# build_jaxdnn: install jaxdnn from the checkout as the GPU machine builds it
# (no build isolation, no network); log in $out/build.log and "build exit N"
# in $out/build.rc (run it with & to build beside the self-tests).
build_jaxdnn() {
  ( cd "$repo" && python3 -m pip install --no-build-isolation --no-deps -v . > "$out/build.log" 2>&1
    echo "build exit $?" > "$out/build.rc" )
}
# st_rounds TIMEOUT BINARY DTYPE DIM VARIANT...: ROUNDS (default 2) alternating
# self-test rounds of the variants (logs v<variant>-r<round>.log).
st_rounds() {
  local t=$1 bin=$2 dt=$3 dim=$4 round v
  shift 4
  for round in $(seq 1 "${ROUNDS:-2}"); do
    for v in "$@"; do st "v$v-r$round" "$t" "$bin" "$dt" "$v" "$dim"; done
  done
}
# gpu_tests TIMEOUT K_EXPR [VAR=VALUE...]: the GPU tests pytest's -k selects
# (xdist where installed, 150 s per test), with the assignments in their
# environment; log in $out/tests-gpu.log, then the exit status, failures and
# summary line.
gpu_tests() {
  local t=$1 k=$2 xdist=""
  shift 2
  python3 -c "import xdist" 2> /dev/null && xdist="-n 14"
  ( cd /tmp && env "$@" timeout "$(left "$t")" python3 -m pytest "$repo/tests" -q -p no:cacheprovider $xdist \
      -k "$k" -rfE --timeout 150 -p no:benchmark ) > "$out/tests-gpu.log" 2>&1
  echo "pytest exit $?"; grep -E "^FAILED|^ERROR" "$out/tests-gpu.log" | head -20; tail -1 "$out/tests-gpu.log"
}
# kt_rounds NAME_A ENV_A NAME_B ENV_B [kernel_timing.py args...]: two
# alternating rounds of kt A and kt B (logs kt-NAME-r<round>).
kt_rounds() {
  local na=$1 ea=$2 nb=$3 eb=$4 round
  shift 4
  for round in 1 2; do kt "$na-r$round" "$ea" "$@"; kt "$nb-r$round" "$eb" "$@"; done
}
# packed_ab ENV_A ENV_B: the packed-documents harness (head dim 128,
# GPU-busy) with A, B, A, B in its environment (A=default for none); logs
# packed-<i>-<value>.txt/.json, printing jaxdnn's unmasked-block TFLOP/s.
packed_ab() {
  local i=0 sw name
  for sw in "$1" "$2" "$1" "$2"; do
    [ $((budget - SECONDS)) -lt 40 ] && { echo "packed $sw: skipped (time)"; continue; }
    name=${sw#*=}; i=$((i + 1))
    ( cd /tmp && env "$sw" timeout "$(left 60)" python3 -m jaxdnn.bench attention --dims 128 --no-torch \
        --only packed --gpu-busy --out "$out/packed-$i-$name.json" ) > "$out/packed-$i-$name.txt" 2>&1
    echo "-- packed, $sw"; grep -E "jaxdnn +counting" "$out/packed-$i-$name.txt"
  done
}
