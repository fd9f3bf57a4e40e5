#!/usr/bin/env python3
"""Fails if a module of src/ imports one at its own level or above.

The order, bottom to top, is the one docs/DESIGN.md ("Layers") gives: each
top-level module of src/ may name (as `crate::<module>`) only modules
before it in ORDER. Comments, doc comments included, are not imports.
Run from anywhere: `python3 scripts/check_layers.py`.
"""
import pathlib
import re
import sys

ORDER = [
    "sync", "error", "clock", "algorithm", "decision", "cell", "store",
    "memory", "telemetry", "reservation", "limiter", "check", "builder",
    "wait", "tower", "redis",
]
# Not layers: the crate root, the loom models' window into the crate, and
# the guide (documentation only).
OUTSIDE = {"lib", "loom_support", "guide"}

src = pathlib.Path(__file__).resolve().parent.parent / "src"
rank = {name: i for i, name in enumerate(ORDER)}
wrong = []
for path in sorted(src.rglob("*.rs")):
    module = path.relative_to(src).parts[0].removesuffix(".rs")
    if module in OUTSIDE:
        continue
    if module not in rank:
        wrong.append(f"{path}: module `{module}` has no place in the order")
        continue
    code = re.sub(r"//[^\n]*", "", path.read_text())
    for used in sorted(set(re.findall(r"\bcrate::([a-z_]+)", code))):
        if used != module and used in rank and rank[used] >= rank[module]:
            wrong.append(f"{path}: `{module}` imports `{used}`, which is not below it")
for line in wrong:
    print(line)
if wrong:
    sys.exit("the modules do not read top to bottom (see docs/DESIGN.md, Layers)")
print("layers: every module imports only modules below it")
