# Sourced by the device scripts (with $repo set): tokamax, the JAX-native peer,
# and its pure-Python dependencies travel as wheels (carry .whl) into
# /tmp/site; a stand-in for the xprof module it imports for its own profiling
# lets it load without xprof. Nothing happens without the wheels.
if [ -d "$repo/.whl" ] && ls "$repo"/.whl/tokamax-*.whl > /dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$repo"/.whl/*.whl
  mkdir -p /tmp/site/xprof/cli/tools
  touch /tmp/site/xprof/__init__.py /tmp/site/xprof/cli/__init__.py
  echo "get_kernel_stats_tool = None" > /tmp/site/xprof/cli/tools/__init__.py
  export PYTHONPATH=/tmp/site
fi
