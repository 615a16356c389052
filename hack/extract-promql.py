#!/usr/bin/env python3
"""Prints every PromQL expression of the dashboards and alert rules as JSON lines.

    python3 hack/extract-promql.py [--var NAME=VALUE ...] [FILE ...]

Without arguments it reads dashboards/*.json and alerts/*.yaml (except
*.test.yaml) of the repository. Each output line is

    {"source": "dashboards/fleet-overview.json#panel=11:Failing checkers/target=A", "expr": "..."}

with Grafana variables replaced by values that Prometheus accepts, so the
expression can be sent as is to /api/v1/query:

    $__rate_interval, $__interval -> 1m     $__range -> 1h
    $__range_s -> 3600                      $__range_ms, $__interval_ms -> ms
    multi-valued dashboard variables ($cluster, $job, $instance, $namespace,
      $checker, ...) -> their allValue, what Grafana sends for "All" (.*
      for $cluster also matches series without a cluster label)
    single-valued ones (the checker dashboard's $namespace and $checker):
      NAME="$v" -> NAME=~".*" (every checker at once: still valid PromQL)
    --var NAME=VALUE: that value instead (regex-escaped in =~ matchers,
      as Grafana does), e.g. --var namespace=shop --var checker=api
      (the dashboards use variables only as whole matcher values, which
       hack/lint-dashboards.py enforces)

Template variable queries label_values(SELECTOR, label) are emitted with
their SELECTOR (source ...#variable=NAME). Alert and recording rules are
emitted with source ALERTFILE#group=G/alert=NAME (or /record=NAME).

Standard library only: the rules file is read with PyYAML when it is
installed, and otherwise with a small parser of the YAML subset that rules
files use (block mappings and sequences, plain and quoted scalars, | and >
block scalars). Exits 1 with a message on anything it cannot handle.
"""
import glob
import json
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

GLOBALS = {
    "__rate_interval": "1m",
    "__interval": "1m",
    "__interval_ms": "60000",
    "__range": "1h",
    "__range_s": "3600",
    "__range_ms": "3600000",
}
VAR_RE = re.compile(r"\$\{([A-Za-z0-9_]+)(?::[^}]*)?\}|\$([A-Za-z0-9_]+)|\[\[([A-Za-z0-9_]+)(?::[^\]]*)?\]\]")


class ExtractError(Exception):
    pass


# ------------------------------------------------------------------ mini YAML
class MiniYAML:
    """Parser of the YAML subset used by Prometheus rules files."""

    def __init__(self, text, name):
        self.lines = text.replace("\t", "    ").split("\n")
        self.name = name

    def fail(self, i, msg):
        raise ExtractError("%s:%d: %s (unsupported YAML for the built-in parser; install PyYAML)" % (self.name, i + 1, msg))

    @staticmethod
    def indent(line):
        return len(line) - len(line.lstrip(" "))

    def skip(self, i):
        while i < len(self.lines):
            s = self.lines[i].strip()
            if s and not s.startswith("#") and s != "---":
                break
            i += 1
        return i

    def parse(self):
        i = self.skip(0)
        if i >= len(self.lines):
            return None
        value, i = self.node(i, self.indent(self.lines[i]))
        i = self.skip(i)
        if i < len(self.lines):
            self.fail(i, "unexpected content")
        return value

    def node(self, i, ind):
        s = self.lines[i].strip()
        if s == "-" or s.startswith("- "):
            return self.seq(i, ind)
        if s[0] in "{[":
            self.fail(i, "flow collections")
        return self.mapping(i, ind)

    def seq(self, i, ind):
        items = []
        while True:
            i = self.skip(i)
            if i >= len(self.lines):
                break
            line = self.lines[i]
            li = self.indent(line)
            s = line.strip()
            if li < ind or not (s == "-" or s.startswith("- ")):
                if li > ind:
                    self.fail(i, "bad indentation in a sequence")
                break
            if li > ind:
                self.fail(i, "bad indentation in a sequence")
            rest = s[1:]
            if not rest.strip() or rest.strip().startswith("#"):
                j = self.skip(i + 1)
                if j >= len(self.lines) or self.indent(self.lines[j]) <= ind:
                    items.append(None)
                    i += 1
                    continue
                value, i = self.node(j, self.indent(self.lines[j]))
            else:
                col = li + 1 + (len(rest) - len(rest.lstrip(" ")))
                body = rest.lstrip(" ")
                if self.split_key(body) is None:
                    # "- scalar"
                    items.append(self.scalar(self.strip_comment(body), i))
                    i += 1
                    continue
                self.lines[i] = " " * col + body
                value, i = self.mapping(i, col)
            items.append(value)
        return items, i

    @staticmethod
    def strip_comment(s):
        quote = None
        for k, c in enumerate(s):
            if quote:
                if c == quote:
                    quote = None
            elif c in "'\"" and (k == 0 or s[k - 1] in " :[{,"):
                quote = c
            elif c == "#" and (k == 0 or s[k - 1] == " "):
                return s[:k].rstrip()
        return s.rstrip()

    @staticmethod
    def split_key(s):
        """'key: rest' -> (key, rest); None when s is not a mapping entry."""
        if s[:1] in "'\"":
            q = s[0]
            end = s.find(q, 1)
            if end < 0 or not s[end + 1:].startswith(":"):
                return None
            key, after = s[1:end], s[end + 2:]
        else:
            m = re.match(r"^([^\s:#][^:#]*?)\s*:(\s|$)", s)
            if not m:
                return None
            key, after = m.group(1), s[m.end(1):].lstrip()[1:]
        if after and not after.startswith(" ") and after.strip():
            return None
        return key, after.strip()

    def mapping(self, i, ind):
        d = {}
        while True:
            i = self.skip(i)
            if i >= len(self.lines):
                break
            line = self.lines[i]
            li = self.indent(line)
            if li < ind:
                break
            if li > ind:
                self.fail(i, "bad indentation in a mapping")
            s = line.strip()
            if s.startswith("- "):
                break
            kv = self.split_key(s)
            if kv is None:
                self.fail(i, "expected 'key: value'")
            key, rest = kv
            rest = self.strip_comment(rest) if not rest.startswith(("|", ">")) else rest
            if key in d:
                self.fail(i, "duplicate key %r" % key)
            if rest == "":
                j = self.skip(i + 1)
                if j < len(self.lines) and (self.indent(self.lines[j]) > li or (
                        self.indent(self.lines[j]) == li and self.lines[j].strip().startswith("-"))):
                    value, i = self.node(j, self.indent(self.lines[j]))
                else:
                    value, i = None, i + 1
            elif rest[0] in "|>":
                value, i = self.block_scalar(i, li, rest)
            else:
                value = self.scalar(rest, i)
                i += 1
            d[key] = value
        return d, i

    def block_scalar(self, i, parent, header):
        m = re.match(r"^([|>])([-+]?)\s*(#.*)?$", header)
        if not m:
            self.fail(i, "block scalar header %r" % header)
        style, chomp = m.group(1), m.group(2)
        j = i + 1
        raw = []
        while j < len(self.lines):
            line = self.lines[j]
            if line.strip() and self.indent(line) <= parent:
                break
            raw.append(line)
            j += 1
        while raw and not raw[-1].strip():
            raw.pop()
            j -= 1
        body = [l for l in raw if l.strip()]
        if not body:
            return "", j
        ind = min(self.indent(l) for l in body)
        if self.indent(body[0]) != ind:
            self.fail(i, "block scalar whose first line is more indented")
        lines = [l[ind:] if l.strip() else "" for l in raw]
        if style == "|":
            text = "\n".join(lines)
        else:
            text = ""
            for l in lines:
                if l.startswith(" "):
                    self.fail(i, "more-indented lines in a folded scalar")
                if l == "":
                    text += "\n"
                else:
                    if text and not text.endswith("\n"):
                        text += " "
                    text += l
        if chomp == "-":
            pass
        else:
            text += "\n"  # clip; "keep" would also keep trailing blank lines
        return text, j

    def scalar(self, s, i):
        if not s:
            return None
        if s[0] == '"':
            if not s.endswith('"') or len(s) < 2:
                self.fail(i, "multi-line double-quoted scalar")
            try:
                return json.loads(s)
            except ValueError:
                self.fail(i, "double-quoted scalar with YAML-only escapes")
        if s[0] == "'":
            if not s.endswith("'") or len(s) < 2:
                self.fail(i, "multi-line single-quoted scalar")
            return s[1:-1].replace("''", "'")
        if s[0] in "{[&*!|>%@`":
            self.fail(i, "scalar starting with %r" % s[0])
        j = self.skip(i + 1)
        if j < len(self.lines) and self.indent(self.lines[j]) > self.indent(self.lines[i]) and \
                self.split_key(self.lines[j].strip()) is None and not self.lines[j].strip().startswith("- "):
            self.fail(j, "multi-line plain scalar")
        return s


def load_yaml(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    try:
        import yaml  # noqa: F401  (optional)
    except ImportError:
        return MiniYAML(text, path).parse()
    return yaml.safe_load(text)


# ------------------------------------------------------------------ dashboards
def substitute(expr, variables, where, values):
    """variables: name -> allValue of a multi-valued variable, None for a
    single-valued one; values: the --var values."""
    if "${datasource}" in expr or "$datasource" in expr:
        raise ExtractError("%s: the data source variable appears in an expression" % where)

    def single(m):
        label, name = m.group(1), m.group(2) or m.group(3)
        if name in values:
            return '%s="%s"' % (label, values[name].replace("\\", "\\\\").replace('"', '\\"'))
        return '%s=~".*"' % label

    single_names = "|".join(re.escape(n) for n, v in variables.items() if v is None)
    if single_names:
        expr = re.sub(r'([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"(?:\$(%s)|\$\{(%s)\})"' % (single_names, single_names), single, expr)

    def repl(m):
        name = m.group(1) or m.group(2) or m.group(3)
        if name in GLOBALS:
            return GLOBALS[name]
        if name in variables and variables[name] is not None:
            if name in values:
                return re.sub(r"([\\.^$*+?()\[\]{}|])", r"\\\\\1", values[name])
            return variables[name]
        if name in variables:
            raise ExtractError("%s: single-valued $%s outside a NAME=\"$%s\" matcher in %r" % (where, name, name, expr))
        raise ExtractError("%s: unknown variable $%s in %r" % (where, name, expr))

    return VAR_RE.sub(repl, expr)


def walk_panels(panels):
    for p in panels or []:
        yield p
        yield from walk_panels(p.get("panels"))


def dashboard_exprs(path, rel, values):
    with open(path, encoding="utf-8") as f:
        try:
            d = json.load(f)
        except ValueError as e:
            raise ExtractError("%s: invalid JSON: %s" % (rel, e))
    tlist = (d.get("templating") or {}).get("list") or []
    variables = {v.get("name"): (v.get("allValue") or ".*") if v.get("multi") or v.get("includeAll") else None
                 for v in tlist if v.get("type") != "datasource"}
    for v in tlist:
        if v.get("type") != "query":
            continue
        q = v.get("query")
        if isinstance(q, dict):
            q = q.get("query", "")
        m = re.match(r"^\s*label_values\((.*),\s*([A-Za-z_][A-Za-z0-9_]*)\s*\)\s*$", q or "", re.S)
        if m:
            where = "%s#variable=%s" % (rel, v.get("name"))
            yield where, substitute(m.group(1), variables, where, values)
    for p in walk_panels(d.get("panels")):
        for t in p.get("targets") or []:
            expr = t.get("expr")
            if not expr:
                continue
            where = "%s#panel=%s:%s/target=%s" % (rel, p.get("id"), p.get("title", ""), t.get("refId", "?"))
            yield where, substitute(expr, variables, where, values)


def rules_exprs(path, rel):
    doc = load_yaml(path)
    if not isinstance(doc, dict) or not isinstance(doc.get("groups"), list):
        raise ExtractError("%s: not a Prometheus rules file (no groups list)" % rel)
    for g in doc["groups"]:
        for r in g.get("rules") or []:
            kind = "alert" if "alert" in r else "record"
            where = "%s#group=%s/%s=%s" % (rel, g.get("name"), kind, r.get(kind))
            expr = r.get("expr")
            if not isinstance(expr, str) or not expr.strip():
                raise ExtractError("%s: no expr" % where)
            yield where, expr.strip()


def main(argv):
    values = {}
    while argv and argv[0] == "--var":
        if len(argv) < 2 or not re.match(r"^[A-Za-z0-9_]+=", argv[1]):
            print("extract-promql: --var wants NAME=VALUE", file=sys.stderr)
            return 2
        name, value = argv[1].split("=", 1)
        values[name] = value
        argv = argv[2:]
    files = argv or sorted(glob.glob(os.path.join(ROOT, "dashboards", "*.json"))) + sorted(
        f for f in glob.glob(os.path.join(ROOT, "alerts", "*.yaml")) + glob.glob(os.path.join(ROOT, "alerts", "*.yml"))
        if not re.search(r"\.test\.ya?ml$", f))
    if not files:
        print("extract-promql: no dashboards or rules files found", file=sys.stderr)
        return 1
    try:
        out = []
        for path in files:
            rel = os.path.relpath(os.path.abspath(path), ROOT)
            gen = dashboard_exprs(path, rel, values) if path.endswith(".json") else rules_exprs(path, rel)
            for source, expr in gen:
                out.append(json.dumps({"source": source, "expr": expr}, ensure_ascii=False))
    except (ExtractError, OSError) as e:
        print("extract-promql: %s" % e, file=sys.stderr)
        return 1
    sys.stdout.write("".join(line + "\n" for line in out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
