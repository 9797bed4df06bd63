#!/usr/bin/env bash
# Benchmarks with tokamax as an extra anchor. tokamax and its Python-only
# dependencies travel as wheels in .whl/ (carry it); a stand-in for the xprof
# module it imports for its own profiling lets it load without xprof.
set -uo pipefail
out=${1:-${OUT:?give an output folder}}
repo=$(cd "$(dirname "$0")/.." && pwd)
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$repo"/.whl/*.whl || exit 1
mkdir -p /tmp/site/xprof/cli/tools
touch /tmp/site/xprof/__init__.py /tmp/site/xprof/cli/__init__.py
echo "get_kernel_stats_tool = None" > /tmp/site/xprof/cli/tools/__init__.py
export PYTHONPATH=/tmp/site
( cd "$repo" && python3 -m pip install --no-build-isolation --no-deps . ) > "$out/build.log" 2>&1 || exit 1
cd /tmp && python3 -c "import tokamax; print('tokamax', tokamax.__version__ if hasattr(tokamax, '__version__') else '')"
timeout 400 python3 -m jaxdnn.bench norms ${BENCH_ARGS:-} --out "$out/norms.json" 2>&1 | tee "$out/bench.txt"
