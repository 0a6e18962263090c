#!/usr/bin/env python3
"""Import circles between the workspace's Rust files.

    python3 scripts/import-circles.py [--verbose] [--crate NAME] [ROOT]

Reads every crate of the workspace (every directory under ROOT with a
Cargo.toml and a src/, tests/, benches/ or examples/ target), follows each
target's module tree from its root file (`src/lib.rs`, `src/main.rs`,
`tests/it/main.rs`, `benches/load/main.rs`, ...) through its `mod name;`
declarations, and draws an edge from file A to file B when A imports an item
that B defines: a `use crate::...`, `use super::...`, `use self::...` or a
`use child::...` of a child module. An import is followed through the
re-exports on its way (`pub use` and plain `use` bindings of the modules it
passes), so `use crate::GroupKey` depends on the file that defines
`GroupKey`, not on `lib.rs` that re-exports it. A module's `mod.rs` and its
submodules' files are distinct files; a parent declaring `mod child;` is not
an import; an inline `mod tests { use super::*; }` imports from its own
file, which is no edge. Paths written out in code without a `use`
(`crate::a::f()`) are not followed.

A circle is a strongly connected component of two files or more: each of
its files reaches every other through imports. Prints each circle with the
imports that close it, and the count; exits 1 when there is any. With
`--allow FILE` (one known circle per line: its files, sorted, separated by
spaces; `#` starts a comment) it exits 1 only for a circle not listed, and
names the listed ones that are gone so the list can shrink.

Standard library only. `cargo test -p shardring-dev --test it
import_circles` runs it with `--allow scripts/import-circles.allow`, so the
README's test command and CI fail on a new circle.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from dataclasses import dataclass, field

IDENT = r"(?:r#)?[A-Za-z_][A-Za-z0-9_]*"


def strip(text: str) -> str:
    """The source with comments, string and char literals blanked out
    (newlines kept, so offsets and line numbers stay)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == "r" and re.match(r'r#*"', text[i:]) and not re.match(r"[A-Za-z0-9_]", text[i - 1 : i] or " "):
            m = re.match(r'r(#*)"', text[i:])
            close = '"' + m.group(1)
            j = text.find(close, i + len(m.group(0)))
            j = n if j < 0 else j + len(close)
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == "b" and text.startswith('b"', i) and not re.match(r"[A-Za-z0-9_]", text[i - 1 : i] or " "):
            out.append(" ")
            i += 1
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == "'":
            # A char literal ('a', '\n', '\u{1F600}'), not a lifetime ('a).
            m = re.match(r"'(\\(?:u\{[0-9a-fA-F]+\}|x[0-9a-fA-F]{2}|.)|[^\\'])'", text[i:], re.S)
            if m:
                out.append(re.sub(r"[^\n]", " ", m.group(0)))
                i += len(m.group(0))
            else:
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def split_top(text: str, sep: str = ",") -> list[str]:
    """`text` split at `sep` outside braces."""
    parts, depth, start = [], 0, 0
    for i, c in enumerate(text):
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
        elif c == sep and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


@dataclass
class Module:
    path: tuple[str, ...]  # from the crate root
    file: str
    children: dict[str, "Module"] = field(default_factory=dict)
    # name -> (use path as written, the module whose scope it is written in)
    bindings: dict[str, tuple[tuple[str, ...], "Module"]] = field(default_factory=dict)
    globs: list[tuple[tuple[str, ...], "Module"]] = field(default_factory=list)
    parent: "Module | None" = None


USE = re.compile(r"(?<![A-Za-z0-9_])use\s+([^;]+);")
MOD_DECL = re.compile(r"(?<![A-Za-z0-9_])mod\s+(" + IDENT + r")\s*([;{])")
# A `#[path = "..."]` attribute right before a `mod` (read from the raw text:
# `strip` blanks its string).
PATH_ATTR = re.compile(r"#\[\s*path\s*=\s*\"([^\"]+)\"\s*\]\s*(?:#\[[^\]]*\]\s*)*(?:pub(?:\([^)]*\))?\s+)?$")


@dataclass
class Use:
    module: Module
    leaves: list[tuple[tuple[str, ...], str | None]]
    line: int


class Crate:
    def __init__(self, name: str, root: str, repo: str):
        self.name = name
        self.repo = repo
        self.files: dict[str, Module] = {}
        self.uses: list[Use] = []
        self.root = self.load(root, (), None)

    def load(self, file: str, path: tuple[str, ...], parent: Module | None) -> Module:
        raw = open(file, encoding="utf-8").read()
        text = strip(raw)
        module = Module(path, file, parent=parent)
        self.files.setdefault(file, module)
        # Inline modules: spans of `mod name { ... }` in this file.
        spans: list[tuple[int, int, Module]] = []
        here = os.path.dirname(file)
        stem = os.path.splitext(os.path.basename(file))[0]
        child_dir = here if stem in ("mod", "lib", "main") or parent is None else os.path.join(here, stem)
        for m in MOD_DECL.finditer(text):
            name = m.group(1).removeprefix("r#")
            attr = PATH_ATTR.search(raw, max(0, m.start() - 300), m.start())
            if m.group(2) == ";":
                if attr:
                    target = os.path.normpath(os.path.join(here, attr.group(1)))
                else:
                    a = os.path.join(child_dir, name + ".rs")
                    b = os.path.join(child_dir, name, "mod.rs")
                    target = a if os.path.exists(a) else b
                if not os.path.exists(target):
                    continue
                owner = self.inline_owner(spans, m.start(), module)
                owner.children[name] = self.load(target, owner.path + (name,), owner)
            else:
                start = m.end() - 1
                end = matching_brace(text, start)
                owner = self.inline_owner(spans, m.start(), module)
                inline = Module(owner.path + (name,), file, parent=owner)
                owner.children[name] = inline
                spans.append((start, end, inline))
        for m in USE.finditer(text):
            owner = self.inline_owner(spans, m.start(), module)
            leaves = expand(m.group(1))
            line = text.count("\n", 0, m.start()) + 1
            self.uses.append(Use(owner, leaves, line))
            for p, alias in leaves:
                if p and p[-1] == "*":
                    owner.globs.append((p[:-1], owner))
                elif p:
                    bound = alias or (p[-2] if p[-1] == "self" and len(p) > 1 else p[-1])
                    if bound != "_":
                        owner.bindings[bound] = (p[:-1] if p[-1] == "self" else p, owner)
        return module

    @staticmethod
    def inline_owner(spans, at, module):
        owner = module
        for start, end, inline in spans:
            if start < at < end:
                owner = inline  # spans nest in order of appearance
        return owner

    def start(self, path: tuple[str, ...], scope: Module):
        """Where a use path starts resolving: (module, remaining segments),
        or None for another crate."""
        if not path:
            return None
        head, rest = path[0], path[1:]
        if head == "crate":
            return self.root, rest
        if head in ("self",):
            return scope, rest
        if head == "super":
            m = scope
            while path and path[0] == "super":
                m = m.parent or m
                path = path[1:]
            return m, path
        if head in scope.children or head in scope.bindings:
            return scope, path
        return None

    def resolve(self, path, scope, seen=None) -> str | None:
        """The file that defines what `path` (written in `scope`) names."""
        seen = seen or set()
        key = (path, id(scope))
        if key in seen:
            return None
        seen.add(key)
        start = self.start(path, scope)
        if start is None:
            return None
        module, rest = start
        while rest:
            seg = rest[0]
            if seg in module.children:
                module, rest = module.children[seg], rest[1:]
                continue
            if seg in module.bindings:
                target, written_in = module.bindings[seg]
                if target == path and written_in is scope:
                    return module.file
                # Another crate's item (`use std::...`, `pub use dep as x`)
                # is no file of this crate: None.
                return self.resolve(target + rest[1:], written_in, seen)
            for target, written_in in module.globs:
                found = self.resolve(target + rest, written_in, seen)
                if found:
                    return found
            return module.file
        return module.file


def expand(tree: str, prefix: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], str | None]]:
    """A use tree (whitespace kept) as its leaves: (path, alias)."""
    tree = tree.strip()
    if tree.startswith("::"):
        tree = tree[2:].strip()
    m = re.match(r"^((?:\s*" + IDENT + r"\s*::\s*)*)\{(.*)\}$", tree, re.S)
    if m:
        head = tuple(s.strip() for s in m.group(1).split("::") if s.strip())
        leaves = []
        for part in split_top(m.group(2)):
            leaves += expand(part, prefix + head)
        return leaves
    alias = None
    m = re.match(r"^(.*?)\s+as\s+(" + IDENT + r")$", tree, re.S)
    if m:
        tree, alias = m.group(1), m.group(2)
    segs = tuple(s.strip() for s in tree.split("::"))
    return [(prefix + segs, alias)]



def matching_brace(text: str, start: int) -> int:
    depth = 0
    for i in range(start, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return i
    return len(text)


def targets(crate_dir: str) -> list[str]:
    roots = []
    for f in ("src/lib.rs", "src/main.rs"):
        p = os.path.join(crate_dir, f)
        if os.path.exists(p):
            roots.append(p)
    for kind in ("src/bin", "tests", "benches", "examples"):
        d = os.path.join(crate_dir, kind)
        if not os.path.isdir(d):
            continue
        for entry in sorted(os.listdir(d)):
            p = os.path.join(d, entry)
            if entry.endswith(".rs") and os.path.isfile(p):
                roots.append(p)
            elif os.path.isfile(os.path.join(p, "main.rs")):
                roots.append(os.path.join(p, "main.rs"))
    return roots


def circles(edges: dict[str, dict[str, list[int]]]) -> list[list[str]]:
    """Strongly connected components of two files or more (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    sys.setrecursionlimit(10000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return sorted(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("root", nargs="?", default=os.path.join(os.path.dirname(__file__), ".."))
    parser.add_argument("--verbose", action="store_true", help="print every edge")
    parser.add_argument("--crate", help="only the crate in this directory (e.g. core)")
    parser.add_argument("--allow", help="a file of known circles: fail only on others")
    args = parser.parse_args()
    repo = os.path.normpath(args.root)

    crate_dirs = sorted(
        d
        for d in os.listdir(repo)
        if os.path.isfile(os.path.join(repo, d, "Cargo.toml")) and d not in ("target",)
    )
    if args.crate:
        crate_dirs = [args.crate]
    edges: dict[str, dict[str, list[int]]] = {}
    for d in crate_dirs:
        for root in targets(os.path.join(repo, d)):
            crate = Crate(d, root, repo)
            for use in crate.uses:
                for path, _alias in use.leaves:
                    if path and path[-1] == "*":
                        path = path[:-1]
                    if path and path[-1] == "self":
                        path = path[:-1]
                    found = crate.resolve(path, use.module)
                    if found and found != use.module.file:
                        a = os.path.relpath(use.module.file, repo)
                        b = os.path.relpath(found, repo)
                        edges.setdefault(a, {}).setdefault(b, [])
                        if use.line not in edges[a][b]:
                            edges[a][b].append(use.line)
    if args.verbose:
        for a in sorted(edges):
            for b in sorted(edges[a]):
                print(f"{a} -> {b} (line {', '.join(map(str, edges[a][b]))})")
    found = circles(edges)
    allowed = set()
    if args.allow:
        for line in open(args.allow, encoding="utf-8"):
            line = line.split("#", 1)[0].split()
            if line:
                allowed.add(tuple(sorted(line)))
    new = 0
    for component in found:
        known = tuple(component) in allowed
        new += not known
        print(f"circle of {len(component)} files{' (known)' if known else ''}:")
        members = set(component)
        for a in component:
            for b, lines in sorted(edges.get(a, {}).items()):
                if b in members:
                    print(f"  {a}:{lines[0]} -> {b}")
    print(f"{len(found)} import circles")
    if args.allow:
        gone = allowed - {tuple(c) for c in found}
        for component in sorted(gone):
            print(f"gone, remove it from {args.allow}: {' '.join(component)}")
        if new:
            print(f"{new} new: break them (move the shared item into its own module or the lower file)")
        return 1 if new else 0
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
