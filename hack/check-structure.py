#!/usr/bin/env python3
"""Structure rules of src/ that rustc and clippy do not check (`make lint`):

- no function longer than MAX_FN_LINES lines (signature to closing brace);
- no import circle between the files of src/: a file's `use` of another
  file's items (crate::a::b, super::x, self::y paths) is an edge, and the
  graph of files must have no cycle. Test modules (`tests.rs`, `mod tests`)
  are left out: they import what they test;
- the assignment protocol's keys (owner label; epoch, drain, drain-epoch,
  handed-over-from and last-probe annotations) are named in
  src/assignment.rs only: everyone else reads and writes an assignment
  through it.

Prints each violation; exits 1 when there is one.
"""
import os
import re
import sys

MAX_FN_LINES = 100
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
SRC = os.path.join(ROOT, "src")

FN = re.compile(r"^\s*(pub(\([^)]*\))?\s+)?(const\s+)?(async\s+)?(unsafe\s+)?fn\s+(\w+)")


def strip(line):
    """The line without string/char literals and // comments (enough for braces)."""
    line = re.sub(r'"(\\.|[^"\\])*"', '""', line)
    line = re.sub(r"'(\\.|[^'\\])'", "''", line)
    i = line.find("//")
    return line if i < 0 else line[:i]


def rs_files():
    for d, _, fs in os.walk(SRC):
        for f in sorted(fs):
            if f.endswith(".rs"):
                yield os.path.join(d, f)


def test_cutoff(lines):
    """Index of the line where an inline `mod tests` starts (or len)."""
    for i, l in enumerate(lines):
        if re.match(r"^\s*mod tests\s*\{", l):
            return i
    return len(lines)


def long_functions(path):
    lines = open(path, encoding="utf-8").read().split("\n")
    out = []
    end_of_code = test_cutoff(lines)
    i = 0
    while i < end_of_code:
        m = FN.match(lines[i])
        if not m:
            i += 1
            continue
        depth, opened, j = 0, False, i
        while j < len(lines):
            s = strip(lines[j])
            if not opened and ";" in s and "{" not in s:
                break  # a declaration without a body
            for c in s:
                if c == "{":
                    depth += 1
                    opened = True
                elif c == "}":
                    depth -= 1
            if opened and depth <= 0:
                break
            j += 1
        n = j - i + 1
        if opened and n > MAX_FN_LINES:
            out.append((i + 1, m.group(6), n))
        i += 1
    return out


def module_of(path):
    rel = os.path.relpath(path, SRC)[:-3].split(os.sep)
    if rel[-1] == "mod":
        rel = rel[:-1]
    if rel in (["lib"], ["main"]):
        return []
    return rel


def is_test_file(path):
    return os.path.basename(path) == "tests.rs" or os.sep + "tests" + os.sep in path


USE = re.compile(r"^\s*(pub(\([^)]*\))?\s+)?use\s+([^;]+);", re.S)


def use_paths(text):
    """Every path a file's use declarations name, braces expanded."""
    paths = []
    for m in re.finditer(r"(?m)^\s*(?:pub(?:\([^)]*\))?\s+)?use\s+([^;]+);", text):
        paths.extend(expand(re.sub(r"\s+", "", m.group(1))))
    # Paths used inline: crate::a::b::Item
    for m in re.finditer(r"\bcrate::[A-Za-z_][\w:]*", text):
        paths.append(m.group(0))
    return paths


def expand(tree):
    i = tree.find("{")
    if i < 0:
        return [tree]
    prefix, inner = tree[:i], tree[i + 1 : tree.rfind("}")]
    parts, depth, cur = [], 0, ""
    for c in inner:
        if c == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        depth += c == "{"
        depth -= c == "}"
        cur += c
    parts.append(cur)
    return [p for part in parts if part for p in expand(prefix + part)]


DEF = re.compile(
    r"(?m)^\s*(?:pub(?:\([^)]*\))?\s+)?(?:async\s+|const\s+|unsafe\s+)*"
    r"(?:struct|enum|fn|type|trait|const|static|union|macro_rules!)\s+(\w+)"
)


def code_of(path):
    """A file's text without comments and without an inline `mod tests`."""
    text = open(path, encoding="utf-8").read()
    cut = re.search(r"(?m)^\s*(#\[cfg\(test\)\]\s*)?mod tests\s*\{", text)
    if cut:
        text = text[: cut.start()]
    return "\n".join(strip(l) for l in text.split("\n"))


class Tree:
    """The modules of src/ (one per file), the items each defines and the
    names each re-exports (`pub use`)."""

    def __init__(self, files):
        self.path = {tuple(module_of(p)): p for p in files}
        self.code = {m: code_of(p) for m, p in self.path.items()}
        self.defined = {m: set(DEF.findall(c)) for m, c in self.code.items()}
        self.reexports = {}
        for m, c in self.code.items():
            r = {}
            for u in re.finditer(r"(?m)^\s*pub(?:\([^)]*\))?\s+use\s+([^;]+);", c):
                for full in expand(re.sub(r"\s+", "", u.group(1))):
                    last = full.split("::")[-1]
                    name = last.split("as")[-1] if "as" in last else last
                    r[name] = full
            self.reexports[m] = r

    def target(self, path, here, seen=()):
        """The module that defines what a use path names, or None (another crate)."""
        segs = [s for s in path.split("::") if s]
        if not segs:
            return None
        if segs[0] == "crate":
            cur, segs = (), segs[1:]
        elif segs[0] == "super":
            cur = here
            while segs and segs[0] == "super":
                cur, segs = cur[:-1], segs[1:]
        elif segs[0] == "self":
            cur, segs = here, segs[1:]
        elif here + (segs[0],) in self.path:
            cur = here
        else:
            return None
        while segs and cur + (segs[0],) in self.path:
            cur, segs = cur + (segs[0],), segs[1:]
        if not segs or segs[0] == "*" or segs[0] in self.defined.get(cur, ()):
            return cur if cur in self.path else None
        name = segs[0].split("as")[0]
        via = self.reexports.get(cur, {}).get(name)
        if via and (cur, name) not in seen:
            t = self.target(via, cur, seen + ((cur, name),))
            if t is not None:
                return t
        return cur if cur in self.path else None


def cycles():
    files = [p for p in rs_files() if not is_test_file(p)]
    tree = Tree(files)
    edges = {m: set() for m in tree.path}
    for m, c in tree.code.items():
        # A facade's re-exports are not uses.
        body = re.sub(r"(?m)^\s*pub(?:\([^)]*\))?\s+use\s+[^;]+;", "", c)
        for u in use_paths(body):
            t = tree.target(u, m)
            if t is not None and t != m and t != m[: len(t)]:
                edges[m].add(t)
            elif t is not None and t != m:
                # An ancestor's own items (a child using its parent's types).
                edges[m].add(t)
    # Tarjan's strongly connected components.
    index, low, stack, on, out, n = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges[v]:
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
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out, edges


PROTOCOL = re.compile(
    r"\b(OWNER_LABEL|EPOCH_ANNOTATION|DRAIN_ANNOTATION|DRAIN_EPOCH_ANNOTATION|"
    r"HANDED_OVER_FROM_ANNOTATION|LAST_PROBE_ANNOTATION)\b|"
    r"webchecker\.test\.network\.io/(owner|epoch|drain|drain-epoch|handed-over-from|last-probe)\b"
)


def protocol_outside():
    """(file, line, text) of every mention of an assignment key outside
    src/assignment.rs (tests aside)."""
    out = []
    home = os.path.join(SRC, "assignment")
    for p in rs_files():
        if is_test_file(p) or p == home + ".rs" or p.startswith(home + os.sep):
            continue
        lines = open(p, encoding="utf-8").read().split("\n")
        for i, l in enumerate(lines[: test_cutoff(lines)]):
            if PROTOCOL.search(l):
                out.append((p, i + 1, l.strip()))
    return out


def main():
    bad = 0
    for p, line, text in protocol_outside():
        print(f"{os.path.relpath(p, ROOT)}:{line}: names an assignment key outside src/assignment.rs: {text}")
        bad += 1
    for p in rs_files():
        for line, name, n in long_functions(p):
            print(f"{os.path.relpath(p, ROOT)}:{line}: fn {name} is {n} lines (at most {MAX_FN_LINES})")
            bad += 1
    comps, edges = cycles()
    for comp in comps:
        names = ["::".join(c) or "crate" for c in comp]
        print(f"import circle between {len(comp)} files: {', '.join(names)}")
        members = set(comp)
        for c in comp:
            ins = sorted("::".join(t) for t in edges[c] if t in members)
            print(f"  {'::'.join(c)} uses {', '.join(ins)}")
        bad += 1
    if bad:
        print(f"check-structure: {bad} violation(s)")
        sys.exit(1)
    print("check-structure: no function above %d lines, no import circle in src/, "
          "assignment keys in src/assignment.rs only" % MAX_FN_LINES)


if __name__ == "__main__":
    main()
