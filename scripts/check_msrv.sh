#!/usr/bin/env bash
# Fails if any locked dependency that a user of tollgate compiles (the normal
# and build dependencies, on any platform, with every feature a user may
# enable) declares a newer `rust-version` than tollgate's own.
#
# The `loom` feature is left out: it exists for `cargo test --features loom`
# on the current toolchain, and is outside the semver-stable API. So are the
# dev-dependencies, which only the crate's own tests and benchmarks compile.
#
# Needs cargo and python3. Run from anywhere: `bash scripts/check_msrv.sh`.
set -euo pipefail
cd "$(dirname "$0")/.."

FEATURES="${MSRV_FEATURES:-tower,axum,tokio,redis}"

cargo metadata --format-version 1 --locked --features "$FEATURES" |
  python3 -c '
import json, sys

def version(text):
    return tuple(int(part) for part in text.split("."))

meta = json.load(sys.stdin)
packages = {p["id"]: p for p in meta["packages"]}
nodes = {n["id"]: n for n in meta["resolve"]["nodes"]}
root = meta["resolve"]["root"]
ours = packages[root].get("rust_version")
if not ours:
    sys.exit("Cargo.toml declares no rust-version")

# Every package reachable from ours through normal or build edges.
seen, todo = set(), [root]
while todo:
    for dep in nodes[todo.pop()]["deps"]:
        kinds = {k["kind"] for k in dep["dep_kinds"]}
        if kinds & {None, "build"} and dep["pkg"] not in seen:
            seen.add(dep["pkg"])
            todo.append(dep["pkg"])

newer = sorted(
    (version(p["rust_version"]), p["name"], p["version"], p["rust_version"])
    for p in (packages[i] for i in seen)
    if p.get("rust_version") and version(p["rust_version"]) > version(ours)
)
needed = max((version(packages[i]["rust_version"]) for i in seen
              if packages[i].get("rust_version")), default=(0,))
print(f"rust-version {ours}; {len(seen)} locked dependencies need at most "
      + ".".join(map(str, needed)))
for _, name, ver, rv in newer:
    print(f"  {name} {ver} needs rust {rv}")
if newer:
    sys.exit(f"rust-version {ours} is older than the locked dependencies need")
'
