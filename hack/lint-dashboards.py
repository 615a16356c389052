#!/usr/bin/env python3
"""Checks the Grafana dashboards of webchecker-operator. Standard library only.

    python3 hack/lint-dashboards.py [DASHBOARD.json ...]

Without arguments it checks dashboards/*.json of the repository. Prints one
line per problem ("FILE: panel N 'title': message") and exits 1 if there is
any, 0 otherwise.

Checks, per dashboard:
- valid JSON object with uid (unique, <= 40 chars of [A-Za-z0-9_-]), title
  (unique), schemaVersion >= 39, editable false;
- template variables: one `datasource` variable (type datasource, query
  prometheus, label "Data source"); query variables use ${datasource}, refresh
  on time range change (2), and are either multi-valued (multi, includeAll
  and an allValue) or single-valued (none of the three: a dashboard about one
  thing, e.g. the checker dashboard's namespace and checker); cluster, job and
  instance are multi-valued, and cluster's allValue is .* so that "All" also
  matches series without a cluster label; the variables cluster, job,
  instance, namespace and checker exist; a variable's query uses only the
  variables defined before it, as the panels do;
- no hard-coded data source anywhere: every "datasource" is the variable;
- panels: integer ids unique in the dashboard, gridPos with x, y, w, h inside
  the 24-column grid, no two panels overlap; every panel except rows has a
  title, a description, the datasource variable, targets and a unit (or value
  mappings) where Grafana shows numbers;
- targets: datasource variable, a unique refId, a non-empty expr.
- expressions (a small PromQL tokenizer, not a full parser):
  balanced brackets and quotes; no data source variable; only known
  variables; a multi-valued variable only as the whole value of an =~
  matcher (its values are a regex alternation), a single-valued one only as
  the whole value of an = matcher (Grafana does not regex-escape it, so =~
  would let "a.b" match "axb"); every selector has cluster=~"$cluster",
  job=~"$job" and instance=~"$instance", and selectors of per-checker metrics
  also namespace and name matched with $namespace and $checker; rate()/irate()
  ranges are [$__rate_interval]; counters (*_total) only inside
  rate/irate/increase.
- data links (fieldConfig links, panel links) to a dashboard (/d/UID...):
  UID is one of the dashboards linted, the link keeps the time range
  (${__url_time_range}) and the data source (${datasource:queryparam}), sets
  every single-valued variable of the target (var-NAME=...), names only
  variables the target has, and ${__data.fields.F} names a column of the
  table (a key of its organize transformation's renameByName).
These include the rules of Grafana's dashboard-linter (`lint --strict`) that
apply to these dashboards; the PromQL itself is checked against a real
Prometheus with hack/extract-promql.py. dashboard-linter itself cannot be
built here: v0.2.0 needs github.com/grafana/grafana/apps/dashboard
v0.0.0-20260602113031-3fcdbc5a6e5c, which the Go module proxy refuses (403
"This module version is not available"), and v0.1.1 is not served at all.
"""
import glob
import json
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MIN_SCHEMA = 39
GRID_W = 24
DS_REFS = {"$datasource", "${datasource}"}
REQUIRED_VARS = ("cluster", "job", "instance", "namespace", "checker")
# Always multi-valued, with these allValues. cluster: .* also matches series
# without the label (Prometheus without external labels); job and instance:
# .+ as dashboard-linter's template-job-rule and template-instance-rule.
MULTI_VARS = {"cluster": ".*", "job": ".+", "instance": ".+"}
GLOBAL_VARS = {"__rate_interval", "__interval", "__interval_ms", "__range", "__range_s", "__range_ms",
               "__from", "__to", "__dashboard", "__name", "__org", "__user"}
# Panels whose numbers need a unit (as dashboard-linter's panel-units-rule).
UNIT_PANELS = {"stat", "singlestat", "graph", "table", "timeseries", "gauge", "bargauge"}
NO_QUERY_PANELS = {"row", "text", "dashlist", "news", "welcome"}
PER_CHECKER = re.compile(
    r"^webchecker_(probe_duration_seconds(_bucket|_sum|_count)?|probes_total|up|last_probe_success|"
    r"last_status_code|last_success_timestamp_seconds|probe_phase_duration_seconds|"
    r"certificate_expiry_timestamp_seconds|certificate_info|checker_info|tls_info|http_version|"
    r"zone_probe_success|zone_probe_duration_seconds|zone_probes_total)$")
AGGREGATORS = {"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values",
               "bottomk", "topk", "quantile", "limitk", "limit_ratio"}
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or",
            "unless", "offset", "atan2", "inf", "nan"}
LABEL_LIST_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right"}
COUNTER_FUNCS = {"rate", "irate", "increase"}

TOKEN_RE = re.compile(r"""
    (?P<ws>\s+)
  | (?P<str>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)
  | (?P<var>\$\{[^}]*\}|\$[A-Za-z0-9_]+|\[\[[^\]]*\]\])
  | (?P<dur>(?:\d+(?:ms|[smhdwy]))+(?![A-Za-z0-9_]))
  | (?P<num>0x[0-9a-fA-F]+|(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)
  | (?P<ident>[A-Za-z_:][A-Za-z0-9_:]*)
  | (?P<op>=~|!~|!=|==|>=|<=|[-+*/%^=<>(){}\[\],@])
""", re.X)


class Tok:
    def __init__(self, kind, text):
        self.kind, self.text = kind, text

    def __repr__(self):
        return "%s:%s" % (self.kind, self.text)


def tokenize(expr):
    pos, out = 0, []
    while pos < len(expr):
        m = TOKEN_RE.match(expr, pos)
        if not m:
            raise ValueError("cannot tokenize at %r" % expr[pos:pos + 20])
        pos = m.end()
        if m.lastgroup != "ws":
            out.append(Tok(m.lastgroup, m.group()))
    return out


def var_name(text):
    """'$x' / '${x}' / '${x:fmt}' / '[[x]]' -> 'x'."""
    t = text
    if t.startswith("${"):
        t = t[2:-1]
    elif t.startswith("[["):
        t = t[2:-2]
    else:
        t = t[1:]
    return t.split(":")[0]


def unquote(s):
    if s[0] == "`":
        return s[1:-1]
    return re.sub(r"\\(.)", r"\1", s[1:-1])


def analyse(expr):
    """Returns (selectors, problems). A selector is a dict with name, matchers,
    range (text inside [] or None), func (enclosing call) and direct (True when
    it is the call's argument itself)."""
    problems = []
    try:
        toks = tokenize(expr)
    except ValueError as e:
        return [], [str(e)]
    pairs = {")": "(", "]": "[", "}": "{"}
    depth = []
    for t in toks:
        if t.text in "([{" and t.kind == "op":
            depth.append(t.text)
        elif t.text in ")]}" and t.kind == "op":
            if not depth or depth[-1] != pairs[t.text]:
                return [], ["unbalanced %r" % t.text]
            depth.pop()
    if depth:
        return [], ["unclosed %r" % depth[-1]]

    selectors = []
    calls = []  # stack of (function name or None) per open paren
    i = 0
    n = len(toks)
    while i < n:
        t = toks[i]
        if t.kind == "ident" and t.text in LABEL_LIST_KEYWORDS and i + 1 < n and toks[i + 1].text == "(":
            j = i + 1
            while toks[j].text != ")":
                j += 1
            i = j + 1
            continue
        if t.kind == "op" and t.text == "(":
            prev = toks[i - 1] if i else None
            calls.append(prev.text if prev is not None and prev.kind == "ident" else None)
            i += 1
            continue
        if t.kind == "op" and t.text == ")":
            calls.pop()
            i += 1
            continue
        if t.kind == "op" and t.text == "[":
            # range or subquery of a non-selector expression: skip
            j = i
            while toks[j].text != "]":
                j += 1
            i = j + 1
            continue
        is_name = (t.kind == "ident" and t.text not in KEYWORDS and t.text not in AGGREGATORS
                   and not (i + 1 < n and toks[i + 1].text == "("))
        if t.kind == "ident" and t.text in AGGREGATORS and not (i + 1 < n and toks[i + 1].text in ("(", "by", "without")):
            is_name = True  # a metric called like an aggregator
        if t.kind == "ident" and t.text == "offset":
            i += 2
            continue
        if is_name or (t.kind == "op" and t.text == "{"):
            sel = {"name": t.text if is_name else None, "matchers": [], "range": None,
                   "func": calls[-1] if calls else None,
                   "direct": i > 0 and toks[i - 1].text == "(" or False}
            j = i + 1 if is_name else i
            if j < n and toks[j].text == "{":
                j += 1
                while toks[j].text != "}":
                    if toks[j].text == ",":
                        j += 1
                        continue
                    if j + 2 >= n or toks[j].kind not in ("ident",) or toks[j + 1].kind != "op" or toks[j + 2].kind not in ("str", "var"):
                        problems.append("cannot read the matchers of %s" % (sel["name"] or "{...}"))
                        break
                    value = unquote(toks[j + 2].text) if toks[j + 2].kind == "str" else toks[j + 2].text
                    sel["matchers"].append((toks[j].text, toks[j + 1].text, value))
                    j += 3
                while j < n and toks[j].text != "}":
                    j += 1
                j += 1
            if j < n and toks[j].text == "[":
                k = j + 1
                parts = []
                while toks[k].text != "]":
                    parts.append(toks[k].text)
                    k += 1
                sel["range"] = "".join(parts)
                j = k + 1
            selectors.append(sel)
            i = j
            continue
        i += 1
    return selectors, problems


# ----------------------------------------------------------------------- lint
class Linter:
    def __init__(self):
        self.problems = []
        self.uids = {}
        self.titles = {}
        # uid -> {variable name: kind}, for the links between dashboards.
        self.variables = {}
        # (where, url, columns of the table or None, variables of its dashboard)
        self.links = []

    def err(self, where, msg):
        self.problems.append("%s: %s" % (where, msg))

    def check_ds(self, where, ds, what):
        if isinstance(ds, str):
            uid = ds
        elif isinstance(ds, dict):
            uid = ds.get("uid")
            if ds.get("type") not in (None, "prometheus"):
                self.err(where, "%s datasource type is %r, not prometheus" % (what, ds.get("type")))
        else:
            self.err(where, "%s has no datasource (want {\"type\": \"prometheus\", \"uid\": \"${datasource}\"})" % what)
            return
        if uid not in DS_REFS:
            self.err(where, "%s uses a hard-coded datasource %r instead of ${datasource}" % (what, uid))

    def find_hardcoded(self, rel, node, path):
        if isinstance(node, dict):
            for k, v in node.items():
                p = path + "." + k
                if k == "datasource" and not path.startswith(".annotations"):
                    uid = v.get("uid") if isinstance(v, dict) else v
                    if v is not None and uid not in DS_REFS:
                        self.err(rel, "hard-coded datasource %r at %s" % (uid, p))
                self.find_hardcoded(rel, v, p)
        elif isinstance(node, list):
            for k, v in enumerate(node):
                self.find_hardcoded(rel, v, "%s[%d]" % (path, k))

    def lint_file(self, path):
        rel = os.path.relpath(os.path.abspath(path), ROOT)
        try:
            with open(path, encoding="utf-8") as f:
                d = json.load(f)
        except (OSError, ValueError) as e:
            self.err(rel, "not valid JSON: %s" % e)
            return
        if not isinstance(d, dict):
            self.err(rel, "top level is not a JSON object")
            return
        uid, title = d.get("uid"), d.get("title")
        if not isinstance(uid, str) or not re.match(r"^[A-Za-z0-9_-]{1,40}$", uid):
            self.err(rel, "uid %r must be 1-40 characters of [A-Za-z0-9_-]" % (uid,))
        elif uid in self.uids:
            self.err(rel, "uid %r also used by %s" % (uid, self.uids[uid]))
        else:
            self.uids[uid] = rel
        if not isinstance(title, str) or not title.strip():
            self.err(rel, "no title")
        elif title in self.titles:
            self.err(rel, "title %r also used by %s" % (title, self.titles[title]))
        else:
            self.titles[title] = rel
        sv = d.get("schemaVersion")
        if not isinstance(sv, int) or sv < MIN_SCHEMA:
            self.err(rel, "schemaVersion %r, want an integer >= %d" % (sv, MIN_SCHEMA))
        if d.get("editable") is not False:
            self.err(rel, "editable must be false (provisioned dashboards are changed in the repository)")
        self.find_hardcoded(rel, d, "")
        variables = self.lint_templating(rel, d)
        if isinstance(uid, str):
            self.variables[uid] = variables
        self.lint_panels(rel, d, variables)

    def lint_templating(self, rel, d):
        tl = (d.get("templating") or {}).get("list")
        if not isinstance(tl, list):
            self.err(rel, "no templating.list")
            return set()
        names = [v.get("name") for v in tl]
        for n in set(names):
            if names.count(n) > 1:
                self.err(rel, "template variable %r defined %d times" % (n, names.count(n)))
        ds_vars = [v for v in tl if v.get("type") == "datasource"]
        if len(ds_vars) != 1:
            self.err(rel, "want exactly one datasource variable, found %d" % len(ds_vars))
        for v in ds_vars:
            if v.get("name") != "datasource":
                self.err(rel, "datasource variable is named %r, not 'datasource'" % v.get("name"))
            if v.get("query") != "prometheus":
                self.err(rel, "datasource variable query is %r, not 'prometheus'" % v.get("query"))
            if v.get("label") != "Data source":
                self.err(rel, "datasource variable label is %r, not 'Data source'" % v.get("label"))
        kinds = {}
        for v in tl:
            name = v.get("name")
            where = "%s: variable %r" % (rel, name)
            if v.get("type") != "query":
                kinds[name] = v.get("type")
                continue
            self.check_ds(where, v.get("datasource"), "variable")
            if v.get("refresh") != 2:
                self.err(where, "refresh is %r; want 2 (on time range change)" % v.get("refresh"))
            q = v.get("query")
            if isinstance(q, dict):
                q = q.get("query")
            if not isinstance(q, str) or not re.match(r"^\s*(label_values|label_names|metrics|query_result)\(.+\)\s*$", q, re.S):
                self.err(where, "query %r is not label_values(...)/query_result(...)" % (q,))
            elif kinds:
                # Chained variables: only those defined before this one.
                self.lint_var_refs(where, q, kinds)
            multi, include_all, all_value = bool(v.get("multi")), bool(v.get("includeAll")), v.get("allValue")
            if multi and include_all and all_value:
                kinds[name] = "multi"
            elif not multi and not include_all and not all_value:
                kinds[name] = "single"
            else:
                kinds[name] = "multi"
                self.err(where, "must be multi-valued (multi, includeAll and an allValue such as .* or .+, so that "
                                "'All' is one regex, not a list of every value) or single-valued (none of the three)")
            if name in MULTI_VARS and kinds[name] == "single":
                self.err(where, "must be multi-value with includeAll")
            if name in MULTI_VARS and kinds[name] == "multi" and all_value != MULTI_VARS[name]:
                why = ("matches series without a cluster label too" if name == "cluster"
                       else "dashboard-linter template-%s-rule" % name)
                self.err(where, "allValue must be %r (%s)" % (MULTI_VARS[name], why))
            if name in ("job", "instance") and v.get("label") != name.title():
                self.err(where, "label must be %r" % name.title())
        for req in REQUIRED_VARS:
            if req not in names:
                self.err(rel, "missing template variable %r" % req)
        return {n: k for n, k in kinds.items() if n}

    def lint_panels(self, rel, d, variables):
        panels = d.get("panels")
        if not isinstance(panels, list) or not panels:
            self.err(rel, "no panels")
            return
        if d.get("rows"):
            self.err(rel, "uses the deprecated 'rows' list; use row panels")
        ids = {}
        groups = [panels]
        for p in panels:
            if p.get("type") == "row" and p.get("collapsed") and p.get("panels"):
                groups.append(p["panels"])
            elif p.get("type") == "row" and p.get("panels"):
                self.err(rel, "expanded row %r holds panels (they belong after it)" % p.get("title"))
        for group in groups:
            boxes = []
            for p in group:
                where = "%s: panel %s %r" % (rel, p.get("id"), p.get("title"))
                pid = p.get("id")
                if not isinstance(pid, int) or isinstance(pid, bool):
                    self.err(where, "id must be an integer")
                elif pid in ids:
                    self.err(where, "duplicate panel id (also %r)" % ids[pid])
                else:
                    ids[pid] = p.get("title")
                g = p.get("gridPos")
                if not isinstance(g, dict) or not all(isinstance(g.get(k), int) for k in ("x", "y", "w", "h")):
                    self.err(where, "gridPos with integer x, y, w, h missing")
                else:
                    if g["w"] < 1 or g["h"] < 1 or g["x"] < 0 or g["y"] < 0 or g["x"] + g["w"] > GRID_W:
                        self.err(where, "gridPos %s outside the %d-column grid" % (g, GRID_W))
                    for other, og in boxes:
                        if (g["x"] < og["x"] + og["w"] and og["x"] < g["x"] + g["w"] and
                                g["y"] < og["y"] + og["h"] and og["y"] < g["y"] + g["h"]):
                            self.err(where, "overlaps panel %s %r" % (other.get("id"), other.get("title")))
                    boxes.append((p, g))
                self.lint_panel(where, p, variables)

    def lint_panel(self, where, p, variables):
        ptype = p.get("type")
        if not ptype:
            self.err(where, "no type")
        if ptype == "row":
            if not p.get("title"):
                self.err(where, "row without title")
            return
        if not (p.get("title") or "").strip():
            self.err(where, "no title")
        if not (p.get("description") or "").strip():
            self.err(where, "no description")
        if ptype in NO_QUERY_PANELS:
            return
        self.check_ds(where, p.get("datasource"), "panel")
        defaults = ((p.get("fieldConfig") or {}).get("defaults") or {})
        self.collect_links(where, p, variables)
        if ptype in UNIT_PANELS:
            has_unit = bool(defaults.get("unit")) or any(
                prop.get("id") == "unit" and prop.get("value")
                for o in (p.get("fieldConfig") or {}).get("overrides") or [] for prop in o.get("properties") or [])
            if not has_unit and not defaults.get("mappings"):
                self.err(where, "no unit (fieldConfig.defaults.unit) and no value mappings")
        targets = p.get("targets")
        if not isinstance(targets, list) or not targets:
            self.err(where, "no targets")
            return
        refs = set()
        for t in targets:
            twhere = "%s target %s" % (where, t.get("refId"))
            if not t.get("refId"):
                self.err(twhere, "no refId")
            elif t["refId"] in refs:
                self.err(twhere, "duplicate refId")
            refs.add(t.get("refId"))
            self.check_ds(twhere, t.get("datasource"), "target")
            expr = t.get("expr")
            if not isinstance(expr, str) or not expr.strip():
                self.err(twhere, "no expr")
                continue
            self.lint_expr(twhere, expr, variables)

    def lint_var_refs(self, where, expr, variables):
        """Variables in an expression: known, and each the whole value of a
        matcher of its kind (=~ multi-valued, = single-valued)."""
        for m in re.finditer(r"\$\{[^}]*\}|\$[A-Za-z0-9_]+|\[\[[^\]]*\]\]", expr):
            name = var_name(m.group())
            kind = variables.get(name)
            before, after = expr[:m.start()], expr[m.end():]
            if name == "datasource":
                self.err(where, "the datasource variable appears in the expression")
            elif kind == "multi":
                if not (re.search(r'=~\s*"$', before) and after.startswith('"')):
                    self.err(where, "$%s must be the whole value of an =~ matcher (=~\"$%s\"): it is multi-valued" % (name, name))
            elif kind == "single":
                if not (re.search(r'(^|[^=!~<>])=\s*"$', before) and after.startswith('"')):
                    self.err(where, "$%s must be the whole value of an = matcher (=\"$%s\"): it is single-valued, "
                                    "and Grafana does not regex-escape it" % (name, name))
            elif name not in GLOBAL_VARS:
                self.err(where, "unknown variable $%s" % name)

    def lint_expr(self, where, expr, variables):
        self.lint_var_refs(where, expr, variables)
        selectors, problems = analyse(expr)
        for pr in problems:
            self.err(where, pr)
        op = {var: "=" if variables.get(var) == "single" else "=~" for var in ("namespace", "checker")}
        for s in selectors:
            label = s["name"] or "{...}"
            ms = {(k, o, v) for k, o, v in s["matchers"]}
            for var in ("cluster", "job", "instance"):
                if (var, "=~", "$" + var) not in ms:
                    self.err(where, '%s lacks %s=~"$%s"' % (label, var, var))
            if s["name"] and PER_CHECKER.match(s["name"]):
                for lab, var in (("namespace", "namespace"), ("name", "checker")):
                    if (lab, op[var], "$" + var) not in ms:
                        self.err(where, '%s lacks %s%s"$%s"' % (label, lab, op[var], var))
            if s["range"] is not None and s["func"] in ("rate", "irate") and s["range"] not in ("$__rate_interval", "${__rate_interval}"):
                self.err(where, "%s(%s[%s]): use [$__rate_interval]" % (s["func"], label, s["range"]))
            if s["name"] and s["name"].endswith("_total"):
                if s["range"] is None or s["func"] not in COUNTER_FUNCS or not s["direct"]:
                    self.err(where, "counter %s must be wrapped in rate/irate/increase" % label)

    # ---------------------------------------------------------------- links
    def collect_links(self, where, p, variables):
        fc = p.get("fieldConfig") or {}
        links = list((fc.get("defaults") or {}).get("links") or []) + list(p.get("links") or [])
        for o in fc.get("overrides") or []:
            for prop in o.get("properties") or []:
                if prop.get("id") == "links":
                    links += prop.get("value") or []
        columns = None
        for t in p.get("transformations") or []:
            if t.get("id") == "organize":
                columns = set(((t.get("options") or {}).get("renameByName") or {}))
        for link in links:
            url = link.get("url") or ""
            if not (link.get("title") or "").strip():
                self.err(where, "link %r has no title" % url)
            if url.startswith("/d/"):
                self.links.append((where, url, columns, variables))

    def finish(self):
        """Checks the links between dashboards, once every file is read."""
        for where, url, columns, variables in self.links:
            uid = re.split(r"[/?]", url[3:], maxsplit=1)[0]
            target = self.variables.get(uid)
            if target is None:
                self.err(where, "link to /d/%s: no dashboard with that uid among those linted" % uid)
                continue
            if "${__url_time_range}" not in url:
                self.err(where, "link to %s does not keep the time range (${__url_time_range})" % uid)
            if "${datasource:queryparam}" not in url:
                self.err(where, "link to %s does not keep the data source (${datasource:queryparam})" % uid)
            set_vars = re.findall(r"[?&]var-([A-Za-z0-9_]+)=", url)
            carried = re.findall(r"\$\{([A-Za-z0-9_]+):queryparam\}", url)
            for name in set_vars + carried:
                if name not in target:
                    self.err(where, "link to %s sets variable %r, which that dashboard does not have" % (uid, name))
            for name in carried:
                if name not in variables:
                    self.err(where, "link carries ${%s:queryparam}, which this dashboard does not have" % name)
            for name, kind in sorted(target.items()):
                if kind == "single" and name not in set_vars:
                    self.err(where, "link to %s does not set its single-valued variable %r (var-%s=...)" % (uid, name, name))
            for field in re.findall(r"\$\{__data\.fields\.([^}:]+)(?::[^}]*)?\}", url):
                if columns is None or field not in columns:
                    self.err(where, "link uses ${__data.fields.%s}, not a column of the table (renameByName keys: %s)"
                             % (field, ", ".join(sorted(columns or [])) or "none"))


def main(argv):
    files = argv or sorted(glob.glob(os.path.join(ROOT, "dashboards", "*.json")))
    if not files:
        print("lint-dashboards: no dashboards found", file=sys.stderr)
        return 1
    lint = Linter()
    for f in files:
        lint.lint_file(f)
    lint.finish()
    for p in lint.problems:
        print(p)
    if lint.problems:
        print("lint-dashboards: %d problem(s) in %d file(s)" % (len(lint.problems), len(files)), file=sys.stderr)
        return 1
    print("lint-dashboards: %d dashboard(s) OK" % len(files))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
