"""Rewrites the triple-chevron launches of a CUDA source, `kernel<<<grid,
block, smem, stream>>>(args);`, as calls of cuda_emu.h's host emulation,
`emu::Launch(grid, block, smem, stream, [&]() { kernel(args); });`, so that a
host compiler takes it (usage: python transform.py pool.cu > pool_emu.inc)."""

import sys


def transform(src):
  out, i = [], 0
  while True:
    j = src.find("<<<", i)
    if j < 0:
      out.append(src[i:])
      return "".join(out)
    k = j
    while src[k - 1] in " \n":
      k -= 1
    depth = 0  # scan back over the kernel's name and template arguments
    while k > 0:
      c = src[k - 1]
      depth += c == ">"
      depth -= c == "<"
      if depth == 0 and c in " \n;{(":
        break
      k -= 1
    kernel = src[k:j].strip()
    e = src.index(">>>(", j)
    config = src[j + 3 : e]
    q, depth = e + 3, 0
    while True:
      depth += src[q] == "("
      depth -= src[q] == ")"
      if depth == 0:
        break
      q += 1
    args = src[e + 4 : q]
    out.append(src[i:k])
    out.append(f"emu::Launch({config}, [&]() {{ {kernel}({args}); }})")
    i = q + 1


if __name__ == "__main__":
  sys.stdout.write(transform(open(sys.argv[1]).read()))
