"""Where the packed-document forward's host-timed gap goes (issue 3).

Host-timed, the packed forward (b2 s8192, causal, segment ids) spends ~80 us
per call more than its GPU-busy time, dense causal s8192 about none. This
traces N back-to-back calls of each with CUPTI (torch.profiler): the GPU
records (kernels, memsets, copies) and the CUDA runtime/driver API calls the
host made, then prints per call: GPU busy, span, idle gaps between GPU
records, and the API calls by total host time.

  python3 benchmarks/trace_packed_host.py [--calls 20]
"""

import argparse
import collections
import json
import os
import tempfile

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
import jax
import jax.numpy as jnp
import numpy as np

import jaxdnn

ap = argparse.ArgumentParser()
ap.add_argument("--calls", type=int, default=20)
a = ap.parse_args()

from torch.profiler import ProfilerActivity, profile  # noqa: E402

batch, seq, heads, dim = 2, 8192, 16, 128
rng = np.random.default_rng(0)
ids = np.zeros((batch, seq), np.int32)
for b in range(batch):
  pos, doc = 0, 0
  while pos < seq:
    n = int(min(seq - pos, max(16, rng.exponential(1024))))
    ids[b, pos : pos + n] = doc
    pos, doc = pos + n, doc + 1
seg = jnp.asarray(ids)
keys = jax.random.split(jax.random.PRNGKey(7), 3)
q, k, v = (jax.random.normal(kk, (batch, seq, heads, dim), jnp.bfloat16) for kk in keys)
cases = {
  "packed": jax.jit(
    lambda q, k, v: jaxdnn.dot_product_attention(
      q, k, v, is_causal=True, query_segment_ids=seg, key_value_segment_ids=seg
    )
  ),
  "packed-segargs": jax.jit(
    lambda q, k, v, s: jaxdnn.dot_product_attention(
      q, k, v, is_causal=True, query_segment_ids=s, key_value_segment_ids=s
    )
  ),
  "dense-causal": jax.jit(lambda q, k, v: jaxdnn.dot_product_attention(q, k, v, is_causal=True)),
}
# The benchmark's own functions (arrays among the keyword arguments passed as
# jit arguments), forward and forward+backward, to trace what it times.
from jaxdnn.attention.bench import _fwd_and_fwdbwd  # noqa: E402
from jaxdnn.bench.timing import time_jax  # noqa: E402

bench_fwd, bench_fwdbwd = _fwd_and_fwdbwd(
  lambda q, k, v, **kw: jaxdnn.dot_product_attention(q, k, v, **kw),
  dict(is_causal=True, query_segment_ids=seg, key_value_segment_ids=seg),
)
cases["bench-packed-fwd"] = bench_fwd
cases["bench-packed-fwd+bwd"] = bench_fwdbwd
print("XLA_FLAGS:", os.environ.get("XLA_FLAGS", ""))
for name, f in cases.items():
  args = (q, k, v, seg) if name == "packed-segargs" else (q, k, v)
  host = time_jax(f, *args, warmup=2, repeats=7)
  print(f"== {name}: host-timed (the harness's time_jax) {host * 1e6:.1f} us/call")
  for _ in range(3):
    jax.block_until_ready(f(*args))
  with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
    for _ in range(a.calls):
      out = f(*args)
    jax.block_until_ready(out)
  with tempfile.TemporaryDirectory() as d:
    path = os.path.join(d, "t.json")
    prof.export_chrome_trace(path)
    ev = json.load(open(path))["traceEvents"]
  gpu = sorted(
    (e["ts"], e["dur"], e.get("name", "")[:60])
    for e in ev
    if e.get("cat") in ("kernel", "gpu_memset", "gpu_memcpy") and "dur" in e
  )
  api = [e for e in ev if e.get("cat") in ("cuda_runtime", "cuda_driver") and "dur" in e]
  busy = sum(d for _, d, _ in gpu)
  span = gpu[-1][0] + gpu[-1][1] - gpu[0][0] if gpu else 0
  gaps = [gpu[i + 1][0] - (gpu[i][0] + gpu[i][1]) for i in range(len(gpu) - 1)]
  print(
    f"== {name}: {len(gpu) / a.calls:.1f} GPU records/call, busy {busy / a.calls:.1f} us/call, "
    f"span {span / a.calls:.1f} us/call, "
    f"gaps > 5 us: {sum(g for g in gaps if g > 5) / a.calls:.1f} us/call"
  )
  kinds = collections.Counter(n for _, _, n in gpu)
  for n, c in kinds.most_common(8):
    print(f"   GPU  {c / a.calls:5.1f}/call  {n}")
  by = collections.defaultdict(lambda: [0, 0.0])
  for e in api:
    by[e["name"]][0] += 1
    by[e["name"]][1] += e["dur"]
  for n, (c, t) in sorted(by.items(), key=lambda x: -x[1][1])[:10]:
    print(f"   API  {c / a.calls:5.1f}/call  {t / a.calls:8.1f} us/call  {n}")
  big = sorted(gaps, reverse=True)[:5]
  print("   largest GPU idle gaps (us):", [round(g, 1) for g in big])
