"""JAX's own dot-product-attention tests, run against jaxdnn: the
`testDotProductAttention*` tests of `tests/nn_test.py` from a JAX source
checkout (not copied here) with `jax.nn.dot_product_attention` swapped for
`jaxdnn.dot_product_attention`, and nothing else changed.

  python tests/upstream/run_jax_attention_tests.py PATH/nn_test.py [pytest args]

Deliberate differences, and the tests they affect, are listed in README.md.
"""

import sys

import jax
import pytest

import jaxdnn


def main(argv):
  if not argv:
    raise SystemExit(__doc__)
  jax.nn.dot_product_attention = jaxdnn.dot_product_attention
  args = [argv[0], "-k", "DotProductAttention", "-p", "no:cacheprovider", "-q", *argv[1:]]
  return pytest.main(args)


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
