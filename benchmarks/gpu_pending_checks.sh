#!/usr/bin/env bash
# The GPU checks of attention kernels written without a GPU run
# (docs/perf/attention.md): the paged decode's table staging and MLA's value
# at its own 128 columns on the 192 forward (JAXDNN_ATTENTION_SM90_NATIVE_VALUE_DIM).
#   PART=check: build, the suites that reach them (8 shards), memcheck
#               modes dims (MLA among them) and paged;
#   PART=bench: on the warm machine: the MLA table against PyTorch's SDPA,
#               the paged table, and benchmarks/attention_kernel_split.py
#               (the paged decode's kernels against the contiguous one's).
#   bash benchmarks/gpu_pending_checks.sh OUT
set -uo pipefail
out=${1:?give an output folder}
repo=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
export XLA_PYTHON_CLIENT_PREALLOCATE=false PACK=0

case "${PART:-check}" in
  check)
    STEPS=build bash "$repo/benchmarks/gpu_run.sh" "$out/b" > "$out/build.txt" 2>&1
    tail -1 "$out/build.txt"
    t="$repo/tests/attention"
    STEPS=tests SHARDS=8 BUDGET=200 \
      TESTS="$t/test_mla.py $t/test_head_dims_sm90.py $t/test_paged.py $t/test_paged_in_place.py $t/test_attention.py" \
      bash "$repo/benchmarks/gpu_run.sh" "$out/t" --tb=short -q > "$out/tests.txt" 2>&1
    grep -E "^shard|FAILED|Error" "$out"/tests.txt | head -40
    cd /tmp || exit 1
    for mode in dims paged; do
      timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 python3 "$repo/tests/cuda/memcheck_smoke.py" \
        cuda "$mode" > "$out/memcheck-$mode.txt" 2>&1
      echo "memcheck $mode exit $?"
    done
    ;;
  bench)
    cd /tmp || exit 1
    timeout 200 python3 -m jaxdnn.bench attention --only mla --seqs 2048,4096,8192,16384 --gpu-busy \
      --out "$out/mla.json" > "$out/mla.txt" 2>&1
    timeout 150 python3 -m jaxdnn.bench paged --gpu-busy --out "$out/paged.json" > "$out/paged.txt" 2>&1
    timeout 120 python3 "$repo/benchmarks/attention_kernel_split.py" "$out/split.txt" > /dev/null 2>&1
    grep -E "jaxdnn|torch|cudnn" "$out/mla.txt" | head -40
    grep -E "paged|contiguous" "$out/paged.txt" | head -40
    grep -A3 "^decode" "$out/split.txt" | head -30
    ;;
esac
