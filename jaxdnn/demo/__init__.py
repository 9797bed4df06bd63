"""The main job: `jaxdnn-demo` trains a recognisable model built on jaxdnn's
ops, on the CPU by default and on the GPU when jax sees one, printing the
loss falling and jaxdnn-vs-XLA timings.

    jaxdnn-demo [--model gpt|lstm|resnet|mlp] [--steps N] [...]

gpt (default): a character-level GPT on the source of Python's standard
library (demo/gpt.py); lstm: a character-level LSTM language model on the
same text (demo/lstm.py); resnet: a small ResNet on generated pictures of
shapes (demo/resnet.py); mlp: the pre-norm toy regression model (demo/mlp.py).
"""

from __future__ import annotations

import sys


def main(argv=None):
  argv = list(sys.argv[1:] if argv is None else argv)
  model = "gpt"
  if "--model" in argv:
    i = argv.index("--model")
    if i + 1 >= len(argv) or argv[i + 1] not in ("gpt", "lstm", "resnet", "mlp"):
      print("jaxdnn-demo: --model must be gpt, lstm, resnet or mlp", file=sys.stderr)
      return 2
    model = argv[i + 1]
    del argv[i : i + 2]
  if model == "gpt":
    from jaxdnn.demo import gpt

    return gpt.main(argv)
  if model == "lstm":
    from jaxdnn.demo import lstm

    return lstm.main(argv)
  if model == "resnet":
    from jaxdnn.demo import resnet

    return resnet.main(argv)
  from jaxdnn.demo import mlp

  return mlp.main(argv)
