#!/usr/bin/env python3
"""Checks what docs.rs will build, without a nightly toolchain.

docs.rs builds the crate with `[package.metadata.docs.rs]` from Cargo.toml,
on nightly, with `--cfg docsrs`. This script fails unless:

- the metadata lists every feature of `[features]` but `loom` (which swaps
  the crate's atomics for a model checker's and must never reach a build of
  the docs), and does not ask for `all-features` (which would turn `loom`
  on);
- it passes `--cfg docsrs` to rustdoc (`rustdoc-args`);
- `src/lib.rs` turns on `doc_cfg` under that cfg, so that feature-gated
  items carry their feature's badge.

On success it prints the features, comma-separated, for `.ci/run` to build
the docs with on stable (`cargo doc --features "$(...)"`).
Run from anywhere: `python3 scripts/check_docs_rs.py`.
"""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
# The one feature the docs must never be built with.
NEVER = {"loom"}


def tables(text):
    """Each `[table]` of a TOML file with its `key = value` lines, values
    joined across lines until their brackets close (enough for Cargo.toml's
    arrays of strings; comments dropped)."""
    out, name, pending = {}, None, None
    for raw in text.splitlines():
        line = re.sub(r"\s+#.*$|^\s*#.*$", "", raw).strip()
        if pending is not None:
            pending[1] += " " + line
            if pending[1].count("[") <= pending[1].count("]"):
                out[name][pending[0]] = pending[1]
                pending = None
            continue
        if not line:
            continue
        header = re.fullmatch(r"\[([^\[\]]+)\]", line)
        if header:
            name = header.group(1).strip()
            out.setdefault(name, {})
            continue
        if line.startswith("[["):
            # An array of tables ([[bench]], [[test]]): none of ours.
            name = None
            continue
        if name is None or "=" not in line:
            continue
        key, value = (part.strip() for part in line.split("=", 1))
        if value.count("[") > value.count("]"):
            pending = [key, value]
        else:
            out[name][key] = value
    return out


def strings(value):
    return re.findall(r'"([^"]*)"', value or "")


def main():
    manifest = tables((ROOT / "Cargo.toml").read_text())
    features = set(manifest.get("features", {})) - {"default"}
    meta = manifest.get("package.metadata.docs.rs")
    wrong = []
    if meta is None:
        sys.exit("Cargo.toml has no [package.metadata.docs.rs]")
    if meta.get("all-features", "false") != "false":
        wrong.append("all-features would turn on loom: list the features instead")
    listed = strings(meta.get("features"))
    for feature in sorted(features - NEVER - set(listed)):
        wrong.append(f"feature `{feature}` is not documented on docs.rs: add it to features")
    for feature in sorted(set(listed) & NEVER):
        wrong.append(f"feature `{feature}` must never reach a docs build")
    for feature in sorted(set(listed) - features):
        wrong.append(f"`{feature}` is listed but is no feature of the crate")
    args = strings(meta.get("rustdoc-args"))
    if not any(args[i : i + 2] == ["--cfg", "docsrs"] for i in range(len(args))):
        wrong.append('rustdoc-args must pass "--cfg", "docsrs"')
    lib = (ROOT / "src" / "lib.rs").read_text()
    if not re.search(r"^#!\[cfg_attr\(docsrs,\s*feature\(doc_cfg\)\)\]", lib, re.M):
        wrong.append("src/lib.rs lacks #![cfg_attr(docsrs, feature(doc_cfg))]")
    for line in wrong:
        print(f"docs.rs: {line}", file=sys.stderr)
    if wrong:
        sys.exit(1)
    print(",".join(listed))


main()
