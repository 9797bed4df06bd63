"""Compares the SASS of two builds of a CUDA extension, kernel by kernel.

  python benchmarks/sass_diff.py OLD.so NEW.so [--cuobjdump PATH]

For refactors that must not change kernels: each function's instructions are
compared with addresses, encodings and the function's own name left out (so
moved files and renamed namespaces compare equal), and functions are matched
by their instruction streams where names differ. Prints the functions only in
one build and those whose code differs; exits 1 on any difference.
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import os
import re
import shutil
import subprocess
import sys


def functions(path: str, cuobjdump: str) -> dict[str, str]:
  env = dict(os.environ)
  text = subprocess.run(
    [cuobjdump, "-sass", path], capture_output=True, text=True, env=env, check=True
  ).stdout
  out, name, body = {}, None, []
  for line in text.splitlines():
    m = re.match(r"\s*Function : (\S+)", line)
    if m:
      if name:
        out[name] = "\n".join(body)
      name, body = m.group(1), []
      continue
    if name is None:
      continue
    ins = re.sub(r"/\*.*?\*/", "", line)  # addresses and encodings
    ins = re.sub(r"\s+", " ", ins).strip()
    header = re.match(r"(arch|code version|host|compile_size|identifier|code for) ", ins)
    if ins and not header and not ins.startswith(".") and ins != "}" and "Fatbin" not in ins:
      body.append(ins)
  if name:
    out[name] = "\n".join(body)
  return out


def main(argv=None) -> int:
  ap = argparse.ArgumentParser()
  ap.add_argument("old")
  ap.add_argument("new")
  ap.add_argument("--cuobjdump", default=shutil.which("cuobjdump") or "cuobjdump")
  ap.add_argument(
    "--ignore-param-offsets",
    action="store_true",
    help="compare kernel-parameter loads (c[0x0][...]) without their offsets, "
    "for a change that only adds a field to a kernel's argument struct",
  )
  args = ap.parse_args(argv)
  old, new = functions(args.old, args.cuobjdump), functions(args.new, args.cuobjdump)
  if args.ignore_param_offsets:
    blank = lambda s: re.sub(r"c\[0x0\]\[0x[0-9a-f]+\]", "c[0x0][param]", s)
    old = {k: blank(v) for k, v in old.items()}
    new = {k: blank(v) for k, v in new.items()}
  digest = lambda s: hashlib.sha1(s.encode()).hexdigest()
  same_name = [n for n in old if n in new]
  differ = [n for n in same_name if old[n] != new[n]]
  only_old = {n: digest(old[n]) for n in old if n not in new}
  only_new = {n: digest(new[n]) for n in new if n not in old}
  # Renamed functions: the same code under another name.
  new_by_code = collections.defaultdict(list)
  for n, d in only_new.items():
    new_by_code[d].append(n)
  renamed = 0
  for n, d in list(only_old.items()):
    if new_by_code.get(d):
      new_by_code[d].pop()
      del only_old[n]
      renamed += 1
  only_new_left = [n for lst in new_by_code.values() for n in lst]
  print(
    f"functions: old {len(old)}, new {len(new)}; same name {len(same_name)} "
    f"({len(same_name) - len(differ)} identical), renamed with identical code {renamed}"
  )
  for n in differ:
    print(f"DIFFERS   {n} ({len(old[n].splitlines())} -> {len(new[n].splitlines())} instructions)")
  for n in only_old:
    print(f"ONLY OLD  {n}")
  for n in only_new_left:
    print(f"ONLY NEW  {n}")
  return 1 if differ or only_old or only_new_left else 0


if __name__ == "__main__":
  sys.exit(main())
