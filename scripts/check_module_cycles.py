#!/usr/bin/env python3
"""Finds modules of a crate that depend on each other in a circle.

    scripts/check_module_cycles.py [--with-tests] [CRATE_DIR...]

Defaults to every crate under crates/. For each crate root (src/lib.rs,
src/main.rs, src/bin/*.rs) it follows the `mod` declarations to the files
of the module tree, and reads each file's paths into the crate: `use`
statements and paths written inline (`crate::verify::reading(..)`), from
`crate::`, `super::` and `self::`. A path to an item the target module
re-exports (`crate::Metrics`, `pub use metrics::Metrics` in lib.rs) counts
against the module that defines the item. Comments and strings are
skipped, so doc links are not dependencies.

A dependency of `a::x::..` on `a::y::..` is an edge x -> y between the
siblings x and y under their common parent `a`. A child using its parent's
items, or the parent using its children, is not an edge: that is how a
module with children is built. Within each parent, a strongly connected
set of two or more siblings is a circle; each is printed with the edges
that close it, one place in the source for each.

Code inside `#[cfg(test)]` modules is left out unless --with-tests is
given: a test may use whatever it needs.

Exits 1 when it finds a circle, 0 when there is none. Needs only Python 3.
"""

import argparse
import os
import re
import sys
from pathlib import Path

ITEM_KINDS = r"(?:struct|enum|fn|trait|type|const|static|union|mod)"
ITEM_DEF = re.compile(
    r"^[ \t]*(?:pub(?:\s*\([^)]*\))?\s+)?(?:(?:unsafe|async|const|extern\s*\"[^\"]*\")\s+)*"
    + ITEM_KINDS
    + r"\s+(r#)?(\w+)",
    re.M,
)
MOD_DECL = re.compile(r"^[ \t]*(?:pub(?:\s*\([^)]*\))?\s+)?mod\s+(\w+)\s*;", re.M)
INLINE_MOD = re.compile(r"(?:pub(?:\s*\([^)]*\))?\s+)?mod\s+(\w+)\s*\{")
USE_STMT = re.compile(r"(?<![\w:])(pub(?:\s*\([^)]*\))?\s+)?use\s+([^;]*);")
INLINE_PATH = re.compile(r"(?<![\w:])((?:crate|super|self)(?:\s*::\s*(?:\w+))+)")
CFG_TEST = re.compile(r"#\s*\[\s*cfg\s*\(\s*test\s*\)\s*\]\s*")


def blank(text):
    """The text with comments, strings and char literals blanked out
    (newlines kept, so offsets and line numbers still match)."""
    out = list(text)
    i, n = 0, len(text)

    def wipe(a, b):
        for k in range(a, b):
            if out[k] != "\n":
                out[k] = " "

    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            wipe(i, j)
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
            wipe(i, j)
            i = j
        elif c in "rb" and re.match(r"(?:br|r)#*\"", text[i:i + 300]) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r"(?:br|r)(#*)\"", text[i:])
            end = text.find('"' + m.group(1), i + m.end())
            j = n if end < 0 else end + 1 + len(m.group(1))
            wipe(i, j)
            i = j
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            wipe(i, j + 1)
            i = j + 1
        elif c == "'":
            # A char literal ('a', '\n', '\u{1F600}', '"'), not a lifetime ('a).
            m = re.match(r"'(?:\\(?:u\{[0-9a-fA-F]+\}|x[0-9a-fA-F]{2}|.)|[^\\'\n])'", text[i:])
            if m:
                wipe(i, i + m.end())
                i += m.end()
            else:
                i += 1
        else:
            i += 1
    return "".join(out)


def matching_brace(code, open_at):
    depth = 0
    for k in range(open_at, len(code)):
        if code[k] == "{":
            depth += 1
        elif code[k] == "}":
            depth -= 1
            if depth == 0:
                return k
    return len(code)


def expand_use(tree):
    """`a::{b, c::{d, e}, self}` -> [[a, b], [a, c, d], [a, c, e], [a]]."""
    tree = re.sub(r"\s+", "", tree)
    tree = re.sub(r"^::", "", tree)

    def parse(s):
        # Splits a brace group's body at top-level commas.
        parts, depth, start = [], 0, 0
        for k, ch in enumerate(s):
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            elif ch == "," and depth == 0:
                parts.append(s[start:k])
                start = k + 1
        parts.append(s[start:])
        return [p for p in parts if p]

    def walk(prefix, s):
        brace = s.find("{")
        if brace < 0:
            path = prefix + [x for x in s.split("::") if x]
            if path and path[-1] == "self":
                path = path[:-1]
            return [path]
        head = [x for x in s[:brace].split("::") if x]
        body = s[brace + 1:s.rfind("}")]
        out = []
        for part in parse(body):
            out.extend(walk(prefix + head, part))
        return out

    return walk([], tree)


class Module:
    def __init__(self, path, file, is_dir_owner):
        self.path = path  # ["report", "html"]; [] is the crate root
        self.file = file
        # Children of lib.rs, main.rs and mod.rs sit beside the file;
        # children of x.rs sit in x/.
        self.child_dir = file.parent if is_dir_owner else file.parent / file.stem
        self.children = {}
        self.items = set()
        self.reexports = {}  # name -> absolute path it stands for
        self.globs = []  # absolute paths of `pub use x::*`
        self.code = ""
        self.test_ranges = []
        self.inline_mods = []  # (open, close) brace offsets


def line_of(code, offset):
    return code.count("\n", 0, offset) + 1


class Crate:
    def __init__(self, name, root_file):
        self.name = name
        self.root = self.load([], root_file, True)

    def load(self, path, file, is_dir_owner):
        m = Module(path, file, is_dir_owner)
        m.code = blank(file.read_text(encoding="utf-8"))
        for om in INLINE_MOD.finditer(m.code):
            close = matching_brace(m.code, om.end() - 1)
            m.inline_mods.append((om.end() - 1, close))
            m.items.add(om.group(1))
        for t in CFG_TEST.finditer(m.code):
            mm = INLINE_MOD.match(m.code, t.end())
            if mm:
                m.test_ranges.append((t.start(), matching_brace(m.code, mm.end() - 1)))
        for d in ITEM_DEF.finditer(m.code):
            m.items.add(d.group(2))
        for decl in MOD_DECL.finditer(m.code):
            name = decl.group(1)
            candidates = [m.child_dir / f"{name}.rs", m.child_dir / name / "mod.rs"]
            found = next((c for c in candidates if c.is_file()), None)
            if found is None:
                continue  # a #[path] module or a generated one: not followed
            m.children[name] = self.load(path + [name], found, found.name == "mod.rs")
        return m

    def modules(self):
        stack = [self.root]
        while stack:
            m = stack.pop()
            yield m
            stack.extend(m.children.values())

    def at(self, path):
        m = self.root
        for seg in path:
            m = m.children.get(seg)
            if m is None:
                return None
        return m

    def absolute(self, module, segs, inline_depth):
        """A path as written in `module` -> absolute segments, or None when
        it does not start in this crate."""
        if not segs:
            return None
        if segs[0] == "crate":
            return segs[1:]
        if segs[0] in ("super", "self"):
            base = list(module.path)
            depth = inline_depth
            k = 0
            while k < len(segs) and segs[k] in ("super", "self"):
                if segs[k] == "super":
                    if depth > 0:
                        depth -= 1  # leaves an inline module: still this file
                    elif base:
                        base.pop()
                    else:
                        return None
                k += 1
            return base + segs[k:]
        if segs[0] in module.children:
            return list(module.path) + segs
        return None

    def resolve(self, abs_segs, seen=None):
        """The module path that defines what `abs_segs` names."""
        seen = seen or set()
        m, k = self.root, 0
        while k < len(abs_segs) and abs_segs[k] in m.children:
            m = m.children[abs_segs[k]]
            k += 1
        if k == len(abs_segs):
            return m.path
        item = abs_segs[k]
        key = (tuple(m.path), item)
        if key in seen or item in m.items:
            return m.path
        seen.add(key)
        if item in m.reexports:
            return self.resolve(m.reexports[item] + abs_segs[k + 1:], seen)
        for g in m.globs:
            target = self.at(g)
            if target is not None and (item in target.items or item in target.reexports):
                return self.resolve(g + abs_segs[k:], seen)
        return m.path

    def read_reexports(self):
        for m in self.modules():
            for u in USE_STMT.finditer(m.code):
                if not u.group(1):
                    continue
                text = strip_alias_keep(u.group(2))
                for segs, alias in text:
                    absolute = self.absolute(m, segs, 0)
                    if absolute is None:
                        continue
                    if segs and segs[-1] == "*":
                        m.globs.append(absolute[:-1])
                    elif absolute:
                        m.reexports[alias or absolute[-1]] = absolute

    def uses(self, module, with_tests):
        """(absolute path, line) for every path into the crate in `module`."""
        code = module.code

        def skipped(offset):
            return not with_tests and any(a <= offset <= b for a, b in module.test_ranges)

        def depth_at(offset):
            return sum(1 for a, b in module.inline_mods if a < offset < b)

        use_spans = []
        for u in USE_STMT.finditer(code):
            use_spans.append((u.start(), u.end()))
            if skipped(u.start()):
                continue
            depth = depth_at(u.start())
            for segs, _ in strip_alias_keep(u.group(2)):
                absolute = self.absolute(module, [s for s in segs if s != "*"], depth)
                if absolute is not None:
                    yield absolute, line_of(code, u.start()), "use " + "::".join(segs)
        for p in INLINE_PATH.finditer(code):
            if skipped(p.start()) or any(a <= p.start() < b for a, b in use_spans):
                continue
            segs = re.split(r"\s*::\s*", p.group(1))
            absolute = self.absolute(module, segs, depth_at(p.start()))
            if absolute is not None:
                yield absolute, line_of(code, p.start()), "::".join(segs)


def strip_alias_keep(tree):
    """Like expand_use, with the alias each leaf is imported under."""
    out = []
    flat = re.sub(r"\s+", " ", tree)
    # Mark aliases so the whitespace-free expansion keeps them apart.
    flat = re.sub(r"\s+as\s+(\w+)", r"@\1", flat)
    for segs in expand_use(flat):
        alias = None
        if segs and "@" in segs[-1]:
            segs[-1], alias = segs[-1].split("@", 1)
        out.append((segs, alias))
    return out


def sccs(nodes, edges):
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            out.append(sorted(comp))

    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


def check_crate(crate_dir, with_tests, repo):
    roots = [crate_dir / "src" / "lib.rs", crate_dir / "src" / "main.rs"]
    roots += sorted((crate_dir / "src" / "bin").glob("*.rs"))
    found = []
    for root in roots:
        if not root.is_file():
            continue
        crate = Crate(crate_dir.name, root)
        crate.read_reexports()
        # parent path -> {child: {child: [(file, line, text)]}}
        graph = {}
        for m in crate.modules():
            for absolute, line, text in crate.uses(m, with_tests):
                target = crate.resolve(absolute)
                common = 0
                while common < min(len(m.path), len(target)) and m.path[common] == target[common]:
                    common += 1
                if common == len(m.path) or common == len(target):
                    continue  # parent and child, or within one module
                parent = tuple(m.path[:common])
                a, b = m.path[common], target[common]
                where = (os.path.relpath(m.file, repo), line, text)
                graph.setdefault(parent, {}).setdefault(a, {}).setdefault(b, []).append(where)
        for parent, edges in sorted(graph.items()):
            nodes = set(edges) | {b for e in edges.values() for b in e}
            for comp in sccs(nodes, edges):
                if len(comp) < 2:
                    continue
                found.append((crate, root, parent, comp, edges))
    return found


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("crates", nargs="*", type=Path, help="crate directories (default: every crate under crates/)")
    ap.add_argument("--with-tests", action="store_true", help="count code in #[cfg(test)] modules too")
    args = ap.parse_args()
    repo = Path(__file__).resolve().parent.parent
    crate_dirs = args.crates or sorted(p for p in (repo / "crates").iterdir() if (p / "Cargo.toml").is_file())
    circles = 0
    for crate_dir in crate_dirs:
        for crate, root, parent, comp, edges in check_crate(crate_dir.resolve(), args.with_tests, repo):
            circles += 1
            scope = "::".join(("crate",) + parent)
            print(f"{crate.name} ({root.name}): circle under {scope}: {', '.join(comp)}")
            members = set(comp)
            for a in comp:
                for b in sorted(edges.get(a, {})):
                    if b in members:
                        file, line, text = edges[a][b][0]
                        more = len(edges[a][b]) - 1
                        extra = f" (+{more} more)" if more else ""
                        print(f"  {a} -> {b}: {file}:{line}: {text}{extra}")
    if circles:
        print(f"{circles} circle(s) among sibling modules")
        return 1
    print(f"no circles among sibling modules in {len(crate_dirs)} crate(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
