"""The op families, in the order jaxdnn exports them: one line per family.

Each name is a subpackage jaxdnn/<name>/ whose __all__ is jaxdnn's public API
for it (and whose optional `bench` module `python -m jaxdnn.bench <name>`
runs); its C++ half is registered by one jaxdnn_family() line in CMakeLists.txt.
"""

FAMILIES = (
  "norms",
  "attention",
  "softmax",
  "activations",
  "cnn_norms",
  "pooling",
  "recurrent",
  "conv",
)
