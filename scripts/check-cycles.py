#!/usr/bin/env python3
"""Finds import cycles between the module files of each crate under crates/.

Per crate, every module that lives in its own file (found from `src/lib.rs` or `src/main.rs`
through `mod NAME;` declarations) is a node. An edge A -> B is drawn when A's code names a
path into B: `use crate::b::...`, `super::...`, `self::...`, `child::...` (a module A
declares), in `use` trees and in expressions or attributes alike, test code included. A path
into an inline module (`mod tests { ... }`) counts for the file that holds it. The crate root
(`lib.rs`/`main.rs`) is the crate's facade (it declares and re-exports every module, and its
modules use its error type), so it is left out of the graph.

Every strongly connected component of more than one module is a cycle and fails the check,
unless the crate root's `//!` doc allows exactly that set of modules with a reason, on one line:

    //! Allowed cycle: `a` ↔ `b::c` — why the two belong together

A line allowing a set that is no longer a cycle fails too, so the list stays true.

Usage: check-cycles.py [ROOT] [--crate NAME]... [--list]
  ROOT defaults to the repository holding this script; --list prints each crate's edges.
Exit status 0 when no cycle is left unallowed, 1 otherwise.
"""

import argparse
import os
import re
import sys

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
ALLOW_RE = re.compile(r"^\s*//!\s*Allowed cycle:\s*(?P<mods>.+?)\s+—\s+(?P<why>\S.*)$")
ALLOW_MOD_RE = re.compile(r"`([A-Za-z0-9_:]+)`")
KEYWORDS_NOT_MODULES = {"crate", "super", "self", "Self"}


def strip_comments_and_strings(text):
    """The source with comments, string and char literals blanked (newlines kept)."""
    out = []
    i = 0
    n = len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            depth = 0
            j = i
            while j < n:
                if text.startswith("/*", j):
                    depth += 1
                    j += 2
                elif text.startswith("*/", j):
                    depth -= 1
                    j += 2
                    if depth == 0:
                        break
                else:
                    j += 1
            out.append(blank(text[i:j]))
            i = j
        elif c == "r" and re.match(r'r#*"', text[i:i + 260]) and not is_ident_char(text, i - 1):
            m = re.match(r'r(#*)"', text[i:])
            close = '"' + m.group(1)
            j = text.find(close, i + len(m.group(0)))
            j = n if j < 0 else j + len(close)
            out.append(blank(text[i:j]))
            i = j
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(blank(text[i:j]))
            i = j
        elif c == "'":
            m = re.match(r"'(\\(x[0-9a-fA-F]{2}|u\{[0-9a-fA-F]+\}|.)|[^\\'])'", text[i:i + 12])
            if m:
                out.append(" " * len(m.group(0)))
                i += len(m.group(0))
            else:  # a lifetime or label
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def is_ident_char(text, i):
    return i >= 0 and (text[i].isalnum() or text[i] == "_")


def blank(chunk):
    return "".join("\n" if ch == "\n" else " " for ch in chunk)


def expand_use_tree(tree):
    """`a::{b, c::{d as e, self}}` -> [['a','b'], ['a','c','d'], ['a','c']]."""
    tree = re.sub(r"\s+as\s+" + IDENT, "", tree)
    tree = re.sub(r"\s+", "", tree)
    paths = []

    def walk(prefix, part):
        # split `part` at top-level commas
        depth = 0
        start = 0
        items = []
        for k, ch in enumerate(part):
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            elif ch == "," and depth == 0:
                items.append(part[start:k])
                start = k + 1
        items.append(part[start:])
        for item in items:
            if not item:
                continue
            brace = item.find("{")
            if brace >= 0:
                head = item[:brace].rstrip(":")
                inner = item[brace + 1:item.rfind("}")]
                walk(prefix + [s for s in head.split("::") if s], inner)
            else:
                segments = [s for s in item.split("::") if s]
                if segments and segments[-1] == "self":
                    segments = segments[:-1]
                paths.append(prefix + segments)

    walk([], tree)
    return paths


class Crate:
    """The module files of one crate and the edges between them."""

    def __init__(self, name, src):
        self.name = name
        self.src = src
        self.root_file = None
        self.modules = {}  # module path (tuple) -> file
        self.children = {}  # module path -> set of child names declared (file or inline)
        self.edges = {}  # module path -> {target module path: first evidence}
        for root in ("lib.rs", "main.rs"):
            if os.path.isfile(os.path.join(src, root)):
                self.root_file = os.path.join(src, root)
                break
        if self.root_file is None:
            return
        self._discover((), self.root_file, src)
        for path, file in self.modules.items():
            self._scan(path, file)

    def _discover(self, path, file, mod_dir):
        """Records `path` as living in `file` and walks its `mod NAME;` declarations;
        `mod_dir` is where its children's files are."""
        self.modules[path] = file
        self.children.setdefault(path, set())
        with open(file, encoding="utf-8") as handle:
            code = strip_comments_and_strings(handle.read())
        for m in re.finditer(r"\bmod\s+(" + IDENT + r")\s*([;{])", code):
            name = m.group(1)
            self.children[path].add(name)
            if m.group(2) != ";":
                continue
            for candidate, child_dir in (
                (os.path.join(mod_dir, name + ".rs"), os.path.join(mod_dir, name)),
                (os.path.join(mod_dir, name, "mod.rs"), os.path.join(mod_dir, name)),
            ):
                if os.path.isfile(candidate):
                    self._discover(path + (name,), candidate, child_dir)
                    break

    def _file_module_of(self, logical):
        """The longest prefix of `logical` that is a module with its own file."""
        for k in range(len(logical), -1, -1):
            if tuple(logical[:k]) in self.modules:
                return tuple(logical[:k])
        return ()

    def _resolve(self, here, segments):
        """The module path `segments` (as written in module `here`) points into, or None for an
        extern crate or a name not known as a module."""
        if not segments:
            return None
        first = segments[0]
        if first == "crate":
            return list(segments[1:])
        if first == "super" or first == "self":
            base = list(here)
            rest = list(segments)
            while rest and rest[0] in ("super", "self"):
                if rest[0] == "super":
                    if not base:
                        return None
                    base.pop()
                rest.pop(0)
            return base + rest
        if first in self.children.get(tuple(here), ()):
            return list(here) + list(segments)
        return None

    def _scan(self, path, file):
        with open(file, encoding="utf-8") as handle:
            code = strip_comments_and_strings(handle.read())
        # Inline modules change what `super`/`self` mean: track them by brace depth.
        inline_opens = {}
        for m in re.finditer(r"\bmod\s+(" + IDENT + r")\s*\{", code):
            inline_opens[m.end() - 1] = m.group(1)
        scope_at = self._scopes(code, path, inline_opens)
        uses = []
        for m in re.finditer(r"\buse\s+([^;]+);", code):
            for segments in expand_use_tree(m.group(1)):
                uses.append((m.start(), segments))
        use_spans = [(m.start(), m.end()) for m in re.finditer(r"\buse\s+([^;]+);", code)]
        for m in re.finditer(r"(?<![A-Za-z0-9_:])(" + IDENT + r"(?:\s*::\s*" + IDENT + r")+)", code):
            if any(a <= m.start() < b for a, b in use_spans):
                continue
            segments = re.sub(r"\s+", "", m.group(1)).split("::")
            uses.append((m.start(), segments))
        for offset, segments in uses:
            here = scope_at(offset)
            target = self._resolve(here, segments)
            if target is None:
                continue
            target_module = self._file_module_of(target)
            if target_module == path or target_module == ():
                continue
            line = code.count("\n", 0, offset) + 1
            evidence = f"{os.path.relpath(file, self.src)}:{line} {'::'.join(segments)}"
            self.edges.setdefault(path, {}).setdefault(target_module, evidence)

    @staticmethod
    def _scopes(code, path, inline_opens):
        """A function from an offset in `code` to the logical module path there."""
        marks = []  # (offset, logical path) at every change of scope
        stack = []
        current = list(path)
        marks.append((0, tuple(current)))
        for k, ch in enumerate(code):
            if ch == "{":
                name = inline_opens.get(k)
                stack.append(name)
                if name is not None:
                    current.append(name)
                    marks.append((k, tuple(current)))
            elif ch == "}" and stack:
                name = stack.pop()
                if name is not None:
                    current.pop()
                    marks.append((k, tuple(current)))

        def scope_at(offset):
            found = marks[0][1]
            for mark_offset, logical in marks:
                if mark_offset > offset:
                    break
                found = logical
            return list(found)

        return scope_at

    def cycles(self):
        """Strongly connected components of more than one module (Tarjan), each sorted."""
        nodes = sorted(p for p in self.modules if p)
        graph = {n: sorted(t for t in self.edges.get(n, {}) if t) for n in nodes}
        index = {}
        low = {}
        on_stack = set()
        stack = []
        found = []
        counter = [0]

        def strongconnect(v):
            index[v] = low[v] = counter[0]
            counter[0] += 1
            stack.append(v)
            on_stack.add(v)
            for w in graph[v]:
                if w not in index:
                    strongconnect(w)
                    low[v] = min(low[v], low[w])
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
            if low[v] == index[v]:
                component = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    component.append(w)
                    if w == v:
                        break
                if len(component) > 1:
                    found.append(sorted(component))

        sys.setrecursionlimit(10000)
        for v in nodes:
            if v not in index:
                strongconnect(v)
        return sorted(found)

    def allowed(self):
        """The allow-list in the crate root's `//!` doc: [(frozenset of module names, reason)]."""
        entries = []
        with open(self.root_file, encoding="utf-8") as handle:
            for line in handle:
                m = ALLOW_RE.match(line)
                if m:
                    mods = frozenset(ALLOW_MOD_RE.findall(m.group("mods")))
                    entries.append((mods, m.group("why").strip()))
        return entries


def name(module):
    return "::".join(module)


def cycle_path(crate, component):
    """One closed walk through the component, with the evidence for each step."""
    members = set(component)
    steps = []
    for source in component:
        for target, evidence in sorted(crate.edges.get(source, {}).items()):
            if target in members:
                steps.append(f"      {name(source)} -> {name(target)}  ({evidence})")
    return steps


def check(root, only=(), show_edges=False, out=sys.stdout):
    """Checks every crate under ROOT/crates; returns the number of problems."""
    problems = 0
    crates_dir = os.path.join(root, "crates")
    for crate_name in sorted(os.listdir(crates_dir)):
        if only and crate_name not in only:
            continue
        src = os.path.join(crates_dir, crate_name, "src")
        if not os.path.isdir(src):
            continue
        crate = Crate(crate_name, src)
        if crate.root_file is None:
            continue
        if show_edges:
            for source in sorted(crate.edges):
                for target in sorted(crate.edges[source]):
                    print(f"{crate_name}: {name(source) or '(root)'} -> {name(target)}", file=out)
        allowed = crate.allowed()
        used = set()
        for component in crate.cycles():
            names = frozenset(name(m) for m in component)
            match = [k for k, (mods, _) in enumerate(allowed) if mods == names]
            label = " ↔ ".join(sorted(names))
            if match:
                used.update(match)
                print(f"{crate_name}: allowed cycle {label} ({allowed[match[0]][1]})", file=out)
                continue
            problems += 1
            print(f"{crate_name}: cycle {label}", file=out)
            for step in cycle_path(crate, component):
                print(step, file=out)
        for k, (mods, why) in enumerate(allowed):
            if k not in used:
                problems += 1
                print(f"{crate_name}: allowed cycle {' ↔ '.join(sorted(mods))} is no longer a "
                      f"cycle; remove the line from {os.path.relpath(crate.root_file, root)}",
                      file=out)
    return problems


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", nargs="?",
                        default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    parser.add_argument("--crate", action="append", default=[])
    parser.add_argument("--list", action="store_true", help="print every edge")
    args = parser.parse_args(argv)
    problems = check(args.root, set(args.crate), args.list)
    if problems:
        print(f"{problems} import cycle problem(s)")
        return 1
    print("no import cycles between modules")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
