#!/usr/bin/env python3
"""Structure rules that rustc and clippy do not check (`make lint`), over
every crate of the workspace: the operator (src/), crates/*, the kit (kit/),
the bench (bench/) and each test binary (tests/<name>.rs, tests/<name>/main.rs):

- no function longer than MAX_FN_LINES lines (signature to closing brace),
  tests included;
- no import circle between the files of a library or binary crate: a file's
  `use` of another file's items (crate::a::b, super::x, self::y paths) is an
  edge, and the graph of files must have no cycle. Unit tests (`tests.rs`,
  `mod tests`) are left out: they import what they test;
- no circle between folders: an edge between two files is an edge between
  the two folders (siblings under their nearest common folder) that hold
  them, in every crate, test binaries included;
- no circle between the workspace's crates (a crate's code naming another's);
- the assignment protocol's keys (owner label; epoch, drain, drain-epoch,
  handed-over-from and last-probe annotations) are named in the operator's
  code (src/, crates/) in crates/api/src/assignment.rs only: everyone else
  reads and writes an assignment through it.

Prints each violation; exits 1 when there is one.
"""
import os
import re
import sys

MAX_FN_LINES = 100
ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
PROTOCOL_HOME = os.path.join(ROOT, "crates", "api", "src", "assignment")

FN = re.compile(r"^\s*(pub(\([^)]*\))?\s+)?(const\s+)?(async\s+)?(unsafe\s+)?fn\s+(\w+)")


def strip(line):
    """The line without string/char literals and // comments (enough for braces)."""
    line = re.sub(r'"(\\.|[^"\\])*"', '""', line)
    line = re.sub(r"'(\\.|[^'\\])'", "''", line)
    i = line.find("//")
    return line if i < 0 else line[:i]


def rs_under(top):
    for d, _, fs in os.walk(top):
        for f in sorted(fs):
            if f.endswith(".rs"):
                yield os.path.join(d, f)


def long_functions(path):
    lines = open(path, encoding="utf-8").read().split("\n")
    out = []
    i = 0
    while i < len(lines):
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


def test_cutoff(lines):
    """Index of the line where an inline `mod tests` starts (or len)."""
    for i, l in enumerate(lines):
        if re.match(r"^\s*mod tests\s*\{", l):
            return i
    return len(lines)


class Crate:
    """One compiled crate: its root file and the files of its modules.
    `lib` is the name other crates use it by (None for binaries and tests)."""

    def __init__(self, label, root, moddir, files, lib=None, unit_tests=True):
        self.label, self.root, self.moddir, self.lib = label, root, moddir, lib
        self.files = files
        self.unit_tests = unit_tests  # test files are left out of file circles

    def module_of(self, path):
        if path == self.root:
            return ()
        rel = os.path.relpath(path, self.moddir)[:-3].split(os.sep)
        if rel[-1] == "mod":
            rel = rel[:-1]
        return tuple(rel)


def packages():
    """(dir, lib name or None) of the workspace's members, from Cargo.toml."""
    text = open(os.path.join(ROOT, "Cargo.toml"), encoding="utf-8").read()
    members = re.search(r"members\s*=\s*\[([^\]]*)\]", text).group(1)
    out = []
    for m in re.findall(r'"([^"]+)"', members):
        d = os.path.normpath(os.path.join(ROOT, m))
        toml = open(os.path.join(d, "Cargo.toml"), encoding="utf-8").read()
        name = re.search(r'(?m)^name\s*=\s*"([^"]+)"', toml).group(1)
        lib = re.search(r'(?ms)^\[lib\][^\[]*?^name\s*=\s*"([^"]+)"', toml)
        has_lib = os.path.exists(os.path.join(d, "src", "lib.rs"))
        out.append((d, (lib.group(1) if lib else name.replace("-", "_")) if has_lib else None))
    return out


def crates():
    out = []
    for d, lib in packages():
        src = os.path.join(d, "src")
        rel = os.path.relpath(d, ROOT)
        bins = os.path.join(src, "bin")
        if lib:
            files = [p for p in rs_under(src)
                     if not p.startswith(bins + os.sep) and p != os.path.join(src, "main.rs")]
            out.append(Crate(f"{rel}: lib", os.path.join(src, "lib.rs"), src, files, lib))
            for single in [os.path.join(src, "main.rs")] + list(rs_under(bins)):
                if os.path.exists(single):
                    out.append(Crate(os.path.relpath(single, ROOT), single, os.path.dirname(single), [single]))
        elif os.path.exists(os.path.join(src, "main.rs")):
            out.append(Crate(f"{rel}: bin", os.path.join(src, "main.rs"), src, list(rs_under(src))))
        tests = os.path.join(d, "tests")
        if os.path.isdir(tests):
            for e in sorted(os.listdir(tests)):
                p = os.path.join(tests, e)
                if e.endswith(".rs"):
                    out.append(Crate(os.path.relpath(p, ROOT), p, tests, [p], unit_tests=False))
                elif os.path.exists(os.path.join(p, "main.rs")):
                    out.append(Crate(os.path.relpath(p, ROOT), os.path.join(p, "main.rs"), p,
                                     list(rs_under(p)), unit_tests=False))
    return out


def is_test_file(path):
    return os.path.basename(path) == "tests.rs" or os.sep + "tests" + os.sep in path


def use_paths(text):
    """Every path a file's use declarations name, braces expanded."""
    paths = []
    for m in re.finditer(r"(?m)^\s*(?:pub(?:\([^)]*\))?\s+)?use\s+([^;]+);", text):
        paths.extend(expand(re.sub(r"\s+", "", m.group(1))))
    # Paths used inline: crate::a::b::Item, super::a::item
    for m in re.finditer(r"\b(?:crate|super)::[A-Za-z_][\w:]*", text):
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
    """The modules of one crate (one per file), the items each defines and the
    names each re-exports (`pub use`)."""

    def __init__(self, crate, files):
        self.path = {crate.module_of(p): p for p in files}
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
        elif (segs[0],) in self.path and here == ():
            cur = ()
        else:
            return None
        while segs and cur + (segs[0],) in self.path:
            cur, segs = cur + (segs[0],), segs[1:]
        if not segs or segs[0] == "*" or segs[0] in self.defined.get(cur, ()):
            return cur if cur in self.path else None
        name = segs[0].split("as")[0]
        via = self.reexports.get(cur, {}).get(name)
        if via and via.split("::")[0] not in ("crate", "super", "self") and \
                cur + (via.split("::")[0],) not in self.path:
            return None  # re-exported from another crate
        if via and (cur, name) not in seen:
            t = self.target(via, cur, seen + ((cur, name),))
            if t is not None:
                return t
        return cur if cur in self.path else None


def file_edges(crate, files):
    tree = Tree(crate, files)
    edges = {m: set() for m in tree.path}
    for m, c in tree.code.items():
        # A facade's re-exports are not uses.
        body = re.sub(r"(?m)^\s*pub(?:\([^)]*\))?\s+use\s+[^;]+;", "", c)
        for u in use_paths(body):
            t = tree.target(u, m)
            if t is not None and t != m:
                edges[m].add(t)
    return edges


def circles(edges):
    """The strongly connected components of more than one node (Tarjan)."""
    index, low, stack, on, out, n = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
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
    return out


def is_folder(tree_paths, m):
    """Whether module m has modules below it (a folder)."""
    return any(len(o) > len(m) and o[: len(m)] == m for o in tree_paths)


def folder_edges(edges):
    """File edges lifted to folders: a -> b becomes an edge between the two
    children of their nearest common folder that hold them. An edge from or
    to the common folder's own file (mod.rs) stays inside the folder."""
    out = {}
    for a, targets in edges.items():
        for b in targets:
            k = 0
            while k < min(len(a), len(b)) and a[k] == b[k]:
                k += 1
            if k == len(a) or k == len(b):
                continue  # one holds the other
            fa, fb = a[: k + 1], b[: k + 1]
            if not (is_folder(edges, fa) or is_folder(edges, fb)):
                continue  # two files of one folder: the file rule's business
            out.setdefault(fa, set()).add(fb)
            out.setdefault(fb, set())
    return out


def crate_edges(all_crates):
    """lib name -> the other libs of the workspace its non-test code names."""
    libs = {c.lib: c for c in all_crates if c.lib}
    out = {}
    for c in all_crates:
        if not c.lib:
            continue
        out[c.lib] = set()
        for p in c.files:
            if is_test_file(p):
                continue
            text = code_of(p)
            for other in libs:
                if other != c.lib and re.search(r"\b%s::" % re.escape(other), text):
                    out[c.lib].add(other)
    return out


PROTOCOL = re.compile(
    r"\b(OWNER_LABEL|EPOCH_ANNOTATION|DRAIN_ANNOTATION|DRAIN_EPOCH_ANNOTATION|"
    r"HANDED_OVER_FROM_ANNOTATION|LAST_PROBE_ANNOTATION)\b|"
    r"webchecker\.test\.network\.io/(owner|epoch|drain|drain-epoch|handed-over-from|last-probe)\b"
)


def protocol_outside(all_crates):
    """(file, line, text) of every mention of an assignment key outside
    crates/api/src/assignment.rs, in the code of the libraries and binaries
    (their unit tests and the test binaries aside)."""
    out = []
    operator = [os.path.join(ROOT, "src"), os.path.join(ROOT, "crates")]
    for c in all_crates:
        # The kit's oracle and the bench's simulated API server read the keys
        # on their own: they check the protocol, they do not take part in it.
        if not c.unit_tests or not any(c.root.startswith(d + os.sep) for d in operator):
            continue
        for p in c.files:
            if is_test_file(p) or p == PROTOCOL_HOME + ".rs" or p.startswith(PROTOCOL_HOME + os.sep):
                continue
            lines = open(p, encoding="utf-8").read().split("\n")
            for i, l in enumerate(lines[: test_cutoff(lines)]):
                if PROTOCOL.search(l):
                    out.append((p, i + 1, l.strip()))
    return out


def name(m):
    return "::".join(m) or "crate"


def main():
    bad = []
    all_crates = crates()
    for p, line, text in protocol_outside(all_crates):
        bad.append(f"{os.path.relpath(p, ROOT)}:{line}: names an assignment key outside "
                   f"crates/api/src/assignment.rs: {text}")
    for c in all_crates:
        for p in c.files:
            for line, fn, n in long_functions(p):
                bad.append(f"{os.path.relpath(p, ROOT)}:{line}: fn {fn} is {n} lines (at most {MAX_FN_LINES})")
        edges = file_edges(c, c.files)
        if c.unit_tests:
            code = [p for p in c.files if not is_test_file(p)]
            code_edges = file_edges(c, code)
            for comp in circles(code_edges):
                members = set(comp)
                lines = [f"{c.label}: import circle between {len(comp)} files: {', '.join(map(name, comp))}"]
                for m in comp:
                    ins = sorted(name(t) for t in code_edges[m] if t in members)
                    lines.append(f"  {name(m)} uses {', '.join(ins)}")
                bad.append("\n".join(lines))
        folders = folder_edges(edges if not c.unit_tests else file_edges(c, [p for p in c.files if not is_test_file(p)]))
        for comp in circles(folders):
            members = set(comp)
            lines = [f"{c.label}: import circle between folders {', '.join(map(name, comp))}"]
            for m in comp:
                ins = sorted(name(t) for t in folders[m] if t in members)
                lines.append(f"  {name(m)} uses {', '.join(ins)}")
            bad.append("\n".join(lines))
    for comp in circles(crate_edges(all_crates)):
        bad.append(f"import circle between crates: {', '.join(comp)}")
    for b in bad:
        print(b)
    if bad:
        print(f"check-structure: {len(bad)} violation(s)")
        sys.exit(1)
    print(f"check-structure: {len(all_crates)} crates; no function above {MAX_FN_LINES} lines, "
          "no import circle between files, folders or crates, the assignment keys in "
          "crates/api/src/assignment.rs only")


if __name__ == "__main__":
    main()
