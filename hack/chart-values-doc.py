#!/usr/bin/env python3
"""Writes the values reference of the chart's README from its values.yaml.

The table between the markers `<!-- values:begin ... -->` and
`<!-- values:end -->` of deploy/helm/webchecker-operator/README.md is
generated (key, type, default, description, in the order of values.yaml);
the rest of the README is written by hand. Standard library only.

    python3 hack/chart-values-doc.py           # rewrite the table
    python3 hack/chart-values-doc.py --check   # exit 1 if it is out of date

Conventions of values.yaml (helm-docs style):
- `# -- text` right above a key (no blank line between) describes it; the
  description runs on over the following comment lines up to an empty `#`
  line or the key. Comment lines before `# --` or after that empty line are
  notes for readers of values.yaml and stay out of the table.
- A described key is one row, whatever its value (a map such as `resources`
  is shown whole as its default). An undescribed map is a section: its keys
  are rows. Any other undescribed key is an error, as is a described key
  inside a described map.
- `<` outside `code spans` is refused (Markdown would read `<release>` as
  HTML): write `<release>` in backticks.

values.yaml is read as the YAML subset it is written in: block mappings and
sequences, plain, single- and double-quoted scalars, `[]` and `{}`. Anything
else is an error naming the line (tests/generated/main.rs compares the defaults
with a real YAML parser).
"""
import json
import os
import re
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHART = os.path.join(REPO, "deploy", "helm", "webchecker-operator")
VALUES = os.path.join(CHART, "values.yaml")
README = os.path.join(CHART, "README.md")
BEGIN = "<!-- values:begin: generated from values.yaml by hack/chart-values-doc.py (make chart-sync); edit the comments there -->"
END = "<!-- values:end -->"


class Bad(Exception):
    pass


# ------------------------------------------------------------------ reading
class Line:
    def __init__(self, no, indent, text, comments):
        self.no, self.indent, self.text, self.comments = no, indent, text, comments


def lines_of(text):
    """Content lines with the comment block right above each (a blank line
    ends a block)."""
    out, block = [], []
    for no, raw in enumerate(text.splitlines(), 1):
        if "\t" in raw[: len(raw) - len(raw.lstrip())]:
            raise Bad("line %d: a tab in the indentation" % no)
        s = raw.strip()
        if not s:
            block = []
        elif s.startswith("#"):
            block.append(s)
        else:
            out.append(Line(no, len(raw) - len(raw.lstrip()), strip_comment(s), block))
            block = []
    return out


def strip_comment(s):
    """`value # note` -> `value`, outside quotes."""
    quote = None
    for i, c in enumerate(s):
        if quote:
            if c == quote:
                quote = None
        elif c in "\"'":
            quote = c
        elif c == "#" and i > 0 and s[i - 1] == " ":
            return s[:i].rstrip()
    return s


def scalar(s, no):
    if s in ("[]", "{}"):
        return [] if s == "[]" else {}
    if s.startswith('"'):
        if not s.endswith('"') or len(s) < 2:
            raise Bad("line %d: unterminated string %s" % (no, s))
        return json.loads(s)
    if s.startswith("'"):
        if not s.endswith("'") or len(s) < 2:
            raise Bad("line %d: unterminated string %s" % (no, s))
        return s[1:-1].replace("''", "'")
    if s[0] in "[{&*!|>%@`":
        raise Bad("line %d: %r is outside the YAML subset this generator reads "
                  "(block maps and lists, scalars, [] and {})" % (no, s))
    if s in ("true", "false"):
        return s == "true"
    if s in ("null", "~"):
        return None
    if re.fullmatch(r"-?\d+", s):
        return int(s)
    if re.fullmatch(r"-?\d+\.\d+", s):
        return float(s)
    return s


KEY = re.compile(r"""([A-Za-z0-9_.\-/]+|"[^"]*")\s*:(?:\s+(.*))?$""")


class Node:
    """A key of values.yaml: its value and the comment block above it."""

    def __init__(self, key, value, comments, no):
        self.key, self.value, self.comments, self.no = key, value, comments, no


def parse(lines, i, indent):
    """The block (map or list) starting at lines[i] with this indentation;
    returns (value, next index). Maps hold Nodes, in file order."""
    if lines[i].text.startswith("- "):
        items = []
        while i < len(lines) and lines[i].indent == indent and lines[i].text.startswith("- "):
            ln = lines[i]
            rest = ln.text[2:].strip()
            if KEY.match(rest):
                # A map item: its first key sits after the dash.
                sub = [Line(ln.no, indent + 2, rest, [])] + lines[i + 1:]
                value, used = parse(sub, 0, indent + 2)
                items.append(value)
                i = i + used
            else:
                items.append(scalar(rest, ln.no))
                i += 1
        return items, i
    nodes = []
    while i < len(lines) and lines[i].indent == indent:
        ln = lines[i]
        m = KEY.match(ln.text)
        if not m:
            raise Bad("line %d: expected `key: value`, found %r" % (ln.no, ln.text))
        key = m.group(1).strip('"')
        i += 1
        if m.group(2):
            value = scalar(m.group(2), ln.no)
        elif i < len(lines) and (lines[i].indent > indent
                                 or (lines[i].indent == indent and lines[i].text.startswith("- "))):
            value, i = parse(lines, i, lines[i].indent)
        else:
            value = None
        nodes.append(Node(key, value, ln.comments, ln.no))
    if i < len(lines) and lines[i].indent > indent:
        raise Bad("line %d: unexpected indentation" % lines[i].no)
    return nodes, i


def plain(v):
    """A parsed value without its Nodes (what Helm sees)."""
    if isinstance(v, list) and v and all(isinstance(n, Node) for n in v):
        return {n.key: plain(n.value) for n in v}
    if isinstance(v, list):
        return [plain(x) for x in v]
    return v


def is_map(v):
    return isinstance(v, list) and v and all(isinstance(n, Node) for n in v)


# ------------------------------------------------------------------ the table
def description(comments):
    """The `# --` paragraph of a comment block, or None."""
    body = [c[1:].strip() if c != "#" else "" for c in comments]
    for k, c in enumerate(body):
        if c == "--" or c.startswith("-- "):
            words = [c[2:].strip()]
            for more in body[k + 1:]:
                if not more:
                    break
                words.append(more)
            return " ".join(w for w in words if w)
    return None


def type_of(v):
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, int):
        return "int"
    if isinstance(v, float):
        return "float"
    if isinstance(v, list):
        return "list"
    if isinstance(v, dict):
        return "object"
    return "string"


def cell(text, where):
    parts = text.split("`")
    if len(parts) % 2 == 0:
        raise Bad("%s: unbalanced ` in %r" % (where, text))
    for k in range(0, len(parts), 2):
        if "<" in parts[k]:
            raise Bad("%s: put %r in `backticks` (Markdown reads <...> as HTML)"
                      % (where, parts[k][parts[k].index("<"):][:20]))
    return text.replace("|", "\\|")


def rows(nodes, prefix, out):
    for n in nodes:
        path = prefix + n.key
        where = "values.yaml line %d (%s)" % (n.no, path)
        desc = description(n.comments)
        if desc is not None:
            if not desc:
                raise Bad("%s: empty `# --` description" % where)
            if is_map(n.value):
                inner = [c for c in walk(n.value, path + ".") if description(c[1].comments) is not None]
                if inner:
                    raise Bad("%s is described as a whole, and so is %s inside it: describe one or the other"
                              % (where, inner[0][0]))
            value = plain(n.value)
            default = json.dumps(value, ensure_ascii=False)
            out.append((path, type_of(value), default, cell(desc, where)))
        elif is_map(n.value):
            rows(n.value, path + ".", out)
        else:
            raise Bad("%s has no `# -- description` comment right above it" % where)


def walk(nodes, prefix):
    for n in nodes:
        yield prefix + n.key, n
        if is_map(n.value):
            yield from walk(n.value, prefix + n.key + ".")


def table(values_text):
    lines = lines_of(values_text)
    if not lines:
        raise Bad("values.yaml is empty")
    if lines[0].indent != 0:
        raise Bad("line %d: the top level must not be indented" % lines[0].no)
    nodes, i = parse(lines, 0, 0)
    if i != len(lines) or not is_map(nodes):
        raise Bad("line %d: expected a top-level `key: value`" % lines[min(i, len(lines) - 1)].no)
    out = []
    rows(nodes, "", out)
    md = ["| key | type | default | description |", "|---|---|---|---|"]
    for key, typ, default, desc in out:
        md.append("| `%s` | %s | `%s` | %s |" % (key, typ, default.replace("|", "\\|"), desc))
    return "\n".join(md) + "\n"


def updated_readme(readme, tbl):
    if readme.count(BEGIN) != 1 or readme.count(END) != 1:
        raise Bad("README.md must hold the line %s once and %s once after it" % (BEGIN, END))
    head, rest = readme.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    if END in head:
        raise Bad("README.md: %s comes before %s" % (END, BEGIN))
    return head + BEGIN + "\n\n" + tbl + "\n" + END + tail


def main(argv):
    check = argv[1:] == ["--check"]
    if argv[1:] and not check:
        sys.stderr.write("usage: %s [--check]\n" % argv[0])
        return 2
    rel = os.path.relpath(README, REPO)
    try:
        with open(VALUES, encoding="utf-8") as f:
            tbl = table(f.read())
        with open(README, encoding="utf-8") as f:
            old = f.read()
        new = updated_readme(old, tbl)
    except Bad as e:
        sys.stderr.write("chart-values-doc: %s\n" % e)
        return 1
    if check:
        if new != old:
            a, b = old.splitlines(), new.splitlines()
            n = next((k for k in range(min(len(a), len(b))) if a[k] != b[k]), min(len(a), len(b)))
            sys.stderr.write(
                "%s: the values reference is out of date with values.yaml (first difference at line %d:\n"
                "  README:    %s\n  generated: %s)\nrun `make chart-sync` and commit the result\n"
                % (rel, n + 1, a[n] if n < len(a) else "<end>", b[n] if n < len(b) else "<end>"))
            return 1
        return 0
    if new != old:
        with open(README, "w", encoding="utf-8") as f:
            f.write(new)
        print("wrote %s" % rel)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
