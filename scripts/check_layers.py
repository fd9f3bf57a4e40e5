#!/usr/bin/env python3
"""Fails if a module of src/ imports one at its own level or above, or if
the files of src/ import each other in a circle.

The order, bottom to top, is the one docs/DESIGN.md ("Layers") gives: each
top-level module of src/ may name (as `crate::<module>`) only modules
before it in ORDER. Inside a module listed in FLOORS the same holds one
level down: each of its floors (a folder, or a file) may name only the
floors before it, and its `mod.rs` (the re-exports on top) any floor; a
floor's own files may name each other, and a file of no floor fails.

Every path an import names is read, whatever its form (`crate::`,
`super::`, `super::super::`, a child module's name, a group `{a, b}`, a
path inside code), and resolved to the module it reaches; `self::` paths
and the inline test modules' `super::*` stay inside their file. Comments,
doc comments included, string literals and doc-only imports
(`#[cfg(doc)]`) are not imports. The crate root (`crate::Name` of a
re-export) is outside the layers and the circles, and so is a module's
face (`mod.rs`, or `x.rs` beside `x/`) naming its own children: the
circles searched run among siblings and across modules.
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
# The floors inside a module, bottom to top (see each floor's `//!`).
# `tests` (the module's `#[cfg(test)]` tests) may name any floor, and no
# floor may name it.
FLOORS = {
    "redis": ["script", "wire", "quota", "table", "shared", "check", "lease", "api"],
    "tower": [
        "sf", "cidr", "forwarded", "key", "ip", "refusal", "grpc", "metrics",
        "response", "service",
    ],
}
TESTS = "tests"

src = pathlib.Path(__file__).resolve().parent.parent / "src"
rank = {name: i for i, name in enumerate(ORDER)}
wrong = []


RAW = re.compile(r'b?r(#*)"')
CHAR = re.compile(r"'(\\.[^']*|[^\\'])'")
DOC_USE = re.compile(r"#\[cfg\(doc\)\]\s*(pub(\([^)]*\))?\s+)?use\s[^;]*;")


def strip(code):
    """The code without comments, string and char literals, and
    doc-only imports."""
    out = []
    i, n = 0, len(code)
    while i < n:
        c = code[i]
        if code.startswith("//", i):
            i = code.find("\n", i)
            i = n if i < 0 else i
        elif code.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if code.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif code.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    i += 1
        elif (m := RAW.match(code, i)) and (
            i == 0 or not (code[i - 1].isalnum() or code[i - 1] == "_")
        ):
            end = code.find('"' + m.group(1), m.end())
            i = n if end < 0 else end + 1 + len(m.group(1))
            out.append('""')
        elif c == '"':
            i += 1
            while i < n and code[i] != '"':
                i += 2 if code[i] == "\\" else 1
            i += 1
            out.append('""')
        elif m := CHAR.match(code, i):
            i = m.end()
            out.append("' '")
        else:
            out.append(c)
            i += 1
    return DOC_USE.sub("", "".join(out))


def module_of(path):
    """The module path of a file of src/: `src/a/b.rs` is `["a", "b"]`."""
    parts = list(path.relative_to(src).with_suffix("").parts)
    if parts[-1] == "mod" or parts == ["lib"]:
        parts = parts[:-1]
    return parts


def inline_spans(code):
    """The spans (start, end) of `code`'s inline `mod x { }` blocks: a
    path inside one starts one module further down."""
    spans = []
    for m in re.finditer(r"\bmod\s+\w+\s*\{", code):
        depth, i = 1, m.end()
        while i < len(code) and depth:
            depth += {"{": 1, "}": -1}.get(code[i], 0)
            i += 1
        spans.append((m.start(), i))
    return spans


def group(code, i):
    """The end of the balanced `{ }` group that opens at `code[i]`."""
    depth = 0
    for j in range(i, len(code)):
        depth += {"{": 1, "}": -1}.get(code[j], 0)
        if depth == 0:
            return j + 1
    return len(code)


def expand(tree):
    """The paths a use tree names: `a::{b::c, d}` gives `a::b::c`, `a::d`
    (each as a list of segments; a glob `*` ends its path)."""
    m = re.match(r"\s*((?:[A-Za-z_]\w*\s*::\s*)*)([A-Za-z_]\w*|\*|\{)?", tree)
    head = [s.strip() for s in m.group(1).split("::") if s.strip()]
    last = m.group(2)
    if last is None or last == "*":
        return [head]
    if last != "{":
        return [head + [last]]
    start = m.end() - 1
    body = tree[start + 1:group(tree, start) - 1]
    items, depth, cur = [], 0, ""
    for ch in body:
        depth += {"{": 1, "}": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            items.append(cur)
            cur = ""
        else:
            cur += ch
    items.append(cur)
    return [head + sub for item in items if item.strip() for sub in expand(item)]


PATH = re.compile(r"(?<![\w:])(crate|super|self)((?:\s*::\s*super)*)\s*::\s*")
TAIL = re.compile(r"(?:[A-Za-z_]\w*\s*::\s*)*(?:[A-Za-z_]\w*|\*|\{)")


def imports(path, code):
    """The module paths (from the crate root, to the item) that `code`,
    the file `path`'s, names."""
    here = module_of(path)
    spans = inline_spans(code)
    found = []
    # A path may also start at a child module the file declares.
    children = re.findall(r"\bmod\s+(\w+)\s*;", code)
    starts = list(PATH.finditer(code))
    if children:
        child = re.compile(r"(?<![\w:])()()(?=(?:" + "|".join(children) + r")\s*::)")
        starts += list(child.finditer(code))
    for m in starts:
        head, supers = m.group(1), m.group(2).count("super")
        if head == "self":
            continue
        tail = TAIL.match(code, m.end())
        if not tail:
            continue
        end = group(code, tail.end() - 1) if tail.group().endswith("{") else tail.end()
        inline = sum(1 for a, b in spans if a < m.start() < b)
        if head == "crate":
            base = []
        elif head == "":
            if inline:
                continue  # an inline module's own child
            base = here
        else:
            ups = 1 + supers - inline
            if ups <= 0:
                continue  # inside the file
            base = here[: len(here) - ups]
        for names in expand(code[m.end():end]):
            found.append(base + names)
    return found


def file_of(module):
    """The file a module path reaches: the deepest module file on it (an
    item's path ends at its module's file)."""
    file, folder = src / "lib.rs", src
    for seg in module:
        if (folder / f"{seg}.rs").is_file():
            file, folder = folder / f"{seg}.rs", folder / seg
        elif (folder / seg / "mod.rs").is_file():
            file, folder = folder / seg / "mod.rs", folder / seg
        else:
            break
    return file


def floor_of(module, floors):
    """The floor of a module path inside a floored module (its second
    segment), `mod` for the floored module itself or an item of its
    `mod.rs`."""
    if len(module) < 2 or (module[1] not in floors and module[1] != TESTS):
        return "mod"
    return module[1]


def below(file, parent):
    """Whether `file` is a module under `parent`'s (a module's face, its
    `mod.rs` or `x.rs`, may re-export and use its own children: the
    circles searched are among siblings and across modules)."""
    folder = parent.parent if parent.name == "mod.rs" else parent.with_suffix("")
    return folder in file.parents


files = sorted(src.rglob("*.rs"))
graph = {}
for path in files:
    top = path.relative_to(src).parts[0].removesuffix(".rs")
    if top not in OUTSIDE and top not in rank:
        wrong.append(f"{path}: module `{top}` has no place in the order")
        continue
    code = strip(path.read_text())
    here = module_of(path)
    if top in FLOORS and len(here) > 1 and floor_of(here, FLOORS[top]) == "mod":
        wrong.append(f"{path}: floor `{here[1]}` has no place in `{top}`'s floors")
    named = imports(path, code)
    edges = graph.setdefault(path, set())
    for target in named:
        if not target:
            continue
        used = target[0]
        if top not in OUTSIDE and used != top and used in rank and rank[used] >= rank[top]:
            wrong.append(f"{path}: `{top}` imports `{used}`, which is not below it")
        if used == top and top in FLOORS:
            floors = FLOORS[top]
            mine, theirs = floor_of(here, floors), floor_of(target, floors)
            order = {f: i for i, f in enumerate(floors)}
            order["mod"] = len(floors)
            if mine != theirs and mine != TESTS and (
                theirs == TESTS or order[theirs] >= order[mine]
            ):
                wrong.append(
                    f"{path}: `{top}::{mine}` imports `{top}::{theirs}`, which is not below it"
                )
        reached = file_of(target)
        if reached != path and reached != src / "lib.rs" and not below(reached, path):
            edges.add(reached)

# Circles among files: a depth-first search for a back edge.
state, stack = {}, []


def visit(node):
    state[node] = 1
    stack.append(node)
    for nxt in sorted(graph.get(node, ())):
        if state.get(nxt) == 1:
            circle = stack[stack.index(nxt):] + [nxt]
            wrong.append("import circle: " + " -> ".join(str(p.relative_to(src)) for p in circle))
        elif nxt not in state:
            visit(nxt)
    stack.pop()
    state[node] = 2


sys.setrecursionlimit(10_000)
for node in sorted(graph):
    if node not in state:
        visit(node)

for line in dict.fromkeys(wrong):
    print(line)
if wrong:
    sys.exit("the modules do not read top to bottom (see docs/DESIGN.md, Layers)")
print("layers: every module imports only modules below it, every floor of "
      + ", ".join(FLOORS) + " only floors below it, and no file imports itself through others")
