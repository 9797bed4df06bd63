#!/usr/bin/env bash
# A/B of one change in one device call, on one machine: B (the working tree,
# already installed or built here) is measured, then PATCH (the change, as
# `git diff A B -- cpp jaxdnn`) is reverse-applied, A is built and measured
# with the same command, and the tree is restored. Same command, same card.
#   bash benchmarks/ab_run.sh OUT PATCH COMMAND...
#   e.g. ... OUT build/ab/change.patch python3 -m jaxdnn.bench attention --out OUT/run.json
# A command's OUT/run.json is kept as OUT/A.json and OUT/B.json.
set -uo pipefail
out=${1:?give an output folder}
patch=$(realpath "${2:?give the change as a patch}")
shift 2
repo=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
install() { (cd "$repo" && python3 -m pip install --no-build-isolation --no-deps .) > "$out/build-$1.log" 2>&1; }
(cd /tmp && python3 -c "import jaxdnn") 2> /dev/null || install B || { tail -30 "$out/build-B.log"; exit 1; }
(cd /tmp && "$@" > "$out/B.txt" 2>&1)
[ -f "$out/run.json" ] && mv "$out/run.json" "$out/B.json"
(cd "$repo" && patch -R -p1 < "$patch") > "$out/patch.log" || { cat "$out/patch.log"; exit 1; }
install A || tail -30 "$out/build-A.log"
(cd /tmp && "$@" > "$out/A.txt" 2>&1)
[ -f "$out/run.json" ] && mv "$out/run.json" "$out/A.json"
(cd "$repo" && patch -p1 < "$patch") >> "$out/patch.log"
echo "A (before): $out/A.txt   B (after): $out/B.txt"
