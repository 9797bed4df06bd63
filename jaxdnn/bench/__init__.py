"""Benchmark harness: `python -m jaxdnn.bench norms [--out results.json]`."""
