#!/usr/bin/env python3
"""Generates dashboards/*.json (Grafana dashboards of webchecker-operator).

The JSON files are what Grafana imports and what the Helm chart ships; this
script is how they are written, so that a change of a selector or of a panel
is made once. Standard library only.

    python3 dashboards/generate.py           # rewrite dashboards/*.json
    python3 dashboards/generate.py --check   # exit 1 if a file is out of date

Conventions (checked by hack/lint-dashboards.py):
- data source: the `datasource` variable (type datasource, query prometheus);
  every panel and target says {"type": "prometheus", "uid": "${datasource}"};
- every selector carries cluster=~"$cluster", job=~"$job" and
  instance=~"$instance"; per-checker selectors also namespace=~"$namespace" and
  name=~"$checker" (=~: those variables are multi-valued); the checker
  dashboard's namespace and checker are single-valued (one checker) and match
  exactly: namespace="$namespace", name="$checker";
- $cluster's "All" is .*, which also matches series without a cluster label
  (a Prometheus without external labels or relabelling has none);
- rates use [$__rate_interval];
- per-checker series move between replicas (instance/pod change) when a
  checker is reassigned, so per-checker queries aggregate by (namespace, name);
- tables of checkers link each checker to the checker dashboard (data link on
  the Checker column: namespace and checker set, time range, data source,
  cluster and job kept).
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
DS = {"type": "prometheus", "uid": "${datasource}"}
RI = "$__rate_interval"


# --------------------------------------------------------------------- PromQL
def sel(metric, *extra, checker=False, one=False):
    """A selector with the dashboard's variables as matchers; checker: a
    per-checker metric (multi-valued namespace and checker), one: the same on
    the checker dashboard (single-valued: exact match)."""
    m = ['cluster=~"$cluster"', 'job=~"$job"', 'instance=~"$instance"']
    if checker:
        m += ['namespace=~"$namespace"', 'name=~"$checker"']
    if one:
        m += ['namespace="$namespace"', 'name="$checker"']
    m += list(extra)
    return "%s{%s}" % (metric, ", ".join(m))


def csel(metric, *extra):
    return sel(metric, *extra, checker=True)


def osel(metric, *extra):
    return sel(metric, *extra, one=True)


BUILD_INFO = sel("webchecker_build_info")


def by_replica(expr):
    """Adds the `replica` label (the operator's identity) from build_info."""
    return "%s * on (job, instance) group_left (replica) %s" % (expr, BUILD_INFO)


# Checkers of the kinds chosen in $kind (http, grpc, tcp, tls): only
# webchecker_checker_info carries the kind, so state queries join it.
OF_KIND = " and on (namespace, name) %s" % csel("webchecker_checker_info", 'kind=~"$kind"')
UP = "(max by (namespace, name) (%s)%s)" % (csel("webchecker_up"), OF_KIND)
DOWN = "(%s == 0)" % UP
# Time-weighted uptime of each checker over the dashboard's range. A checker
# that moved has one webchecker_up series per owner, each covering part of the
# range: add up the samples of all owners before dividing (avg_over_time per
# series would weigh each owner's part as a whole checker).
UPTIME = "sum by (namespace, name) (sum_over_time(%s[$__range])) / sum by (namespace, name) (count_over_time(%s[$__range]))" % (
    csel("webchecker_up"), csel("webchecker_up"))
FAIL15 = "sum by (namespace, name, reason) (increase(%s[15m]))" % csel(
    "webchecker_probes_total", 'result="failure"')
# One series per failing checker: the reason with the most failures in the last
# 15 minutes, or "none in 15m" (value 0) when it failed earlier than that.
REASON = (
    "(topk by (namespace, name) (1, %s > 0) and on (namespace, name) %s)"
    " or on (namespace, name) "
    'label_replace(%s, "reason", "none in 15m", "", "")' % (FAIL15, DOWN, DOWN)
)
WITH_REASON = " * on (namespace, name) group_left (reason) group by (namespace, name, reason) (%s)" % REASON


def success_ratio(by, success, probes):
    """Successful / all probes over the range; 0, not empty, when none
    succeeded (then no series has result="success")."""
    all_ = "sum %s(increase(%s[$__range]))" % (by, probes)
    return "(sum %s(increase(%s[$__range])) or 0 * %s) / %s" % (by, success, all_, all_)


# Histograms the operator can also expose as native histograms
# (--native-histograms): their quantiles read the classic buckets or, where
# Prometheus stored none (it keeps only the native form of a histogram scraped
# with scrape_native_histograms unless always_scrape_classic_histograms), the
# native series. On Prometheus 2 the second half matches nothing.
NATIVE = {"webchecker_probe_duration_seconds_bucket"}


def quantile(q, bucket, by="", checker=False, fn="rate", window=RI):
    s = csel(bucket) if checker else sel(bucket)
    grp = "le" if not by else by + ", le"
    classic = "histogram_quantile(%s, sum by (%s) (%s(%s[%s])))" % (q, grp, fn, s, window)
    if bucket not in NATIVE:
        return classic
    base = bucket[: -len("_bucket")]
    n = csel(base) if checker else sel(base)
    nsum = "sum by (%s)" % by if by else "sum"
    return "%s or histogram_quantile(%s, %s (%s(%s[%s])))" % (classic, q, nsum, fn, n, window)


def osel_quantile(q, fn, window):
    """The checker dashboard's quantile of one checker's probe duration, the
    buckets of all owners added up."""
    classic = "histogram_quantile(%s, sum by (namespace, name, le) (%s(%s[%s])))" % (
        q, fn, osel("webchecker_probe_duration_seconds_bucket"), window)
    native = "histogram_quantile(%s, sum by (namespace, name) (%s(%s[%s])))" % (
        q, fn, osel("webchecker_probe_duration_seconds"), window)
    return "%s or %s" % (classic, native)


# --------------------------------------------------------------------- panels
class Layout:
    """Places panels left to right on Grafana's 24-column grid."""

    def __init__(self):
        self.panels = []
        self.x = 0
        self.y = 0
        self.line_h = 0
        self.next_id = 1

    def _id(self):
        i = self.next_id
        self.next_id += 1
        return i

    def newline(self):
        self.y += self.line_h
        self.x = 0
        self.line_h = 0

    def row(self, title):
        self.newline()
        self.panels.append({
            "type": "row", "id": self._id(), "title": title, "collapsed": False,
            "gridPos": {"h": 1, "w": 24, "x": 0, "y": self.y}, "panels": [],
        })
        self.y += 1

    def add(self, panel, w, h):
        if self.x + w > 24:
            self.newline()
        panel["id"] = self._id()
        panel["gridPos"] = {"h": h, "w": w, "x": self.x, "y": self.y}
        self.x += w
        self.line_h = max(self.line_h, h)
        # Stable key order: id, type, title, description first.
        ordered = {k: panel[k] for k in ("id", "type", "title", "description", "datasource", "gridPos")}
        ordered.update({k: v for k, v in panel.items() if k not in ordered})
        self.panels.append(ordered)


def target(expr, ref, legend=None, instant=False, fmt="time_series"):
    t = {"datasource": DS, "editorMode": "code", "expr": expr, "refId": ref}
    if legend is not None:
        t["legendFormat"] = legend
    if instant:
        t["instant"] = True
        t["range"] = False
    else:
        t["range"] = True
    if fmt != "time_series":
        t["format"] = fmt
    return t


def targets(*specs, **kw):
    out = []
    for i, spec in enumerate(specs):
        expr, legend = spec if isinstance(spec, tuple) else (spec, None)
        out.append(target(expr, chr(ord("A") + i), legend, **kw))
    return out


def thresholds(*steps):
    s = [{"color": steps[0], "value": None}]
    for i in range(1, len(steps), 2):
        s.append({"color": steps[i + 1], "value": steps[i]})
    return {"mode": "absolute", "steps": s}


def timeseries(title, desc, tgts, unit, stack=False, min_=None, max_=None, fill=10, overrides=None):
    defaults = {
        "unit": unit,
        "color": {"mode": "palette-classic"},
        "custom": {
            "drawStyle": "line", "lineInterpolation": "linear", "lineWidth": 1,
            "fillOpacity": fill, "showPoints": "never", "spanNulls": False,
            "stacking": {"mode": "normal" if stack else "none", "group": "A"},
            "axisPlacement": "auto",
        },
        "thresholds": thresholds("green"),
    }
    if min_ is not None:
        defaults["min"] = min_
    if max_ is not None:
        defaults["max"] = max_
    return {
        "type": "timeseries", "title": title, "description": desc, "datasource": DS,
        "fieldConfig": {"defaults": defaults, "overrides": overrides or []},
        "options": {
            "legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
            "tooltip": {"mode": "multi", "sort": "desc"},
        },
        "targets": tgts,
    }


def stat(title, desc, tgts, unit, thr=None, decimals=None, mappings=None, graph=False, text="auto"):
    defaults = {"unit": unit, "color": {"mode": "thresholds"}, "thresholds": thr or thresholds("green")}
    if decimals is not None:
        defaults["decimals"] = decimals
    if mappings:
        defaults["mappings"] = mappings
    return {
        "type": "stat", "title": title, "description": desc, "datasource": DS,
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "options": {
            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
            "colorMode": "value", "graphMode": "area" if graph else "none",
            "justifyMode": "auto", "orientation": "auto", "textMode": text,
            "wideLayout": True, "showPercentChange": False,
        },
        "targets": tgts,
    }


def table(title, desc, tgts, unit, rename, exclude=("Time",), overrides=None, sort_by=None, thr=None):
    transformations = []
    if len(tgts) > 1:
        transformations.append({"id": "merge", "options": {}})
    transformations.append({
        "id": "organize",
        "options": {"excludeByName": {k: True for k in exclude}, "indexByName": {}, "renameByName": rename},
    })
    options = {"cellHeight": "sm", "showHeader": True, "footer": {"show": False, "reducer": ["sum"], "fields": ""}}
    if sort_by:
        options["sortBy"] = [{"displayName": sort_by[0], "desc": sort_by[1]}]
    return {
        "type": "table", "title": title, "description": desc, "datasource": DS,
        "fieldConfig": {
            "defaults": {"unit": unit, "custom": {"align": "auto", "cellOptions": {"type": "auto"}},
                         "thresholds": thr or thresholds("green")},
            "overrides": overrides or [],
        },
        "options": options,
        "targets": tgts,
        "transformations": transformations,
    }


def override(field, **props):
    return {"matcher": {"id": "byName", "options": field},
            "properties": [{"id": k, "value": v} for k, v in props.items()]}


def state_timeline(title, desc, tgts, mappings, thr=None, show_value="never", unit=None):
    defaults = {"color": {"mode": "thresholds"}, "mappings": mappings,
                "thresholds": thr or thresholds("green"),
                "custom": {"fillOpacity": 80, "lineWidth": 0}}
    if unit:
        defaults["unit"] = unit
    return {
        "type": "state-timeline", "title": title, "description": desc, "datasource": DS,
        "fieldConfig": {
            "defaults": defaults,
            "overrides": [],
        },
        "options": {"mergeValues": True, "showValue": show_value, "alignValue": "left", "rowHeight": 0.9,
                    "legend": {"displayMode": "list", "placement": "bottom", "showLegend": False},
                    "tooltip": {"mode": "single", "sort": "none"}},
        "targets": tgts,
    }


def heatmap(title, desc, tgts, unit):
    return {
        "type": "heatmap", "title": title, "description": desc, "datasource": DS,
        "fieldConfig": {"defaults": {"unit": unit, "custom": {"hideFrom": {"legend": False, "tooltip": False, "viz": False},
                                                              "scaleDistribution": {"type": "linear"}}},
                        "overrides": []},
        "options": {
            "calculate": False, "cellGap": 1, "cellValues": {"unit": "reqps"},
            "color": {"mode": "scheme", "scheme": "Oranges", "steps": 64, "exponent": 0.5,
                      "fill": "dark-orange", "reverse": False, "scale": "exponential"},
            "exemplars": {"color": "rgba(255,0,255,0.7)"},
            "filterValues": {"le": 1e-9}, "legend": {"show": True},
            "rowsFrame": {"layout": "auto"},
            "tooltip": {"mode": "single", "showColorScale": False, "yHistogram": False},
            "yAxis": {"axisPlacement": "left", "reverse": False, "unit": unit},
        },
        "targets": tgts,
    }


def mapping(values):
    """values: list of (value, text, color)."""
    return [{"type": "value", "options": {str(v): {"text": t, "color": c, "index": i}
                                          for i, (v, t, c) in enumerate(values)}}]


# ------------------------------------------------------------------ templating
def query_var(name, label, query, all_value=None):
    """all_value None: a single-valued variable (no All), else multi-valued
    with All = all_value."""
    v = {
        "name": name, "label": label, "type": "query", "datasource": DS,
        "definition": query, "query": query, "refresh": 2, "regex": "", "sort": 1,
    }
    if all_value is None:
        v.update({"multi": False, "includeAll": False, "current": {}})
    else:
        v.update({"multi": True, "includeAll": True, "allValue": all_value,
                  "current": {"selected": True, "text": ["All"], "value": ["$__all"]}})
    v.update({"options": [], "hide": 0, "skipUrlSync": False})
    return v


CLUSTER = 'cluster=~"$cluster"'
JOB = 'job=~"$job"'


def templating(one_checker=False):
    """one_checker: namespace and checker single-valued (the checker dashboard)."""
    all_checkers = None if one_checker else ".*"
    ns_match = 'namespace="$namespace"' if one_checker else 'namespace=~"$namespace"'
    return {"list": [
        {"name": "datasource", "label": "Data source", "type": "datasource", "query": "prometheus",
         "current": {}, "options": [], "refresh": 1, "regex": "", "hide": 0,
         "includeAll": False, "multi": False, "skipUrlSync": False},
        # All = .*: also the series without a cluster label (no external label set).
        query_var("cluster", "Cluster", "label_values(webchecker_build_info, cluster)", ".*"),
        query_var("job", "Job", "label_values(webchecker_build_info{%s}, job)" % CLUSTER, ".+"),
        query_var("instance", "Instance", "label_values(webchecker_build_info{%s, %s}, instance)" % (CLUSTER, JOB), ".+"),
        query_var("kind", "Kind", "label_values(webchecker_checker_info{%s, %s}, kind)" % (CLUSTER, JOB), ".*"),
        query_var("namespace", "Namespace", "label_values(webchecker_up{%s, %s}, namespace)" % (CLUSTER, JOB),
                  all_checkers),
        query_var("checker", "Checker",
                  'label_values(webchecker_checker_info{%s, %s, %s, kind=~"$kind"}, name)' % (CLUSTER, JOB, ns_match),
                  all_checkers),
    ]}


CHECKER_UID = "webchecker-checker"


def checker_link():
    """Data link of a table's Checker column to the checker dashboard. The
    instance filter is not carried: the checker dashboard follows the checker
    across the replicas that owned it."""
    return [{
        "title": "Checker dashboard: ${__data.fields.namespace}/${__data.fields.name}",
        "url": "/d/%s/webchecker-checker?${__url_time_range}&${datasource:queryparam}&${cluster:queryparam}"
               "&${job:queryparam}&var-namespace=${__data.fields.namespace}&var-checker=${__data.fields.name}" % CHECKER_UID,
        "targetBlank": False,
    }]


def dashboard(uid, title, desc, layout, one_checker=False):
    return {
        "annotations": {"list": []},
        "description": desc,
        "editable": False,
        "fiscalYearStartMonth": 0,
        "graphTooltip": 1,
        "id": None,
        "links": [{"asDropdown": False, "icon": "external link", "includeVars": True, "keepTime": True,
                   "tags": ["webchecker"], "targetBlank": False, "title": "WebChecker dashboards",
                   "tooltip": "", "type": "dashboards", "url": ""}],
        "liveNow": False,
        "panels": layout.panels,
        "refresh": "1m",
        "schemaVersion": 39,
        "tags": ["webchecker", "kubernetes-operator"],
        "templating": templating(one_checker),
        "time": {"from": "now-6h", "to": "now"},
        "timepicker": {},
        "timezone": "",
        "title": title,
        "uid": uid,
        "version": 1,
        "weekStart": "",
    }


# -------------------------------------------------------------- fleet overview
def fleet():
    L = Layout()
    L.row("Availability")
    L.add(stat("Checkers", "WebCheckers with a webchecker_up series in the selection (each counted once, whichever replica owns it).",
               targets("count(%s) or vector(0)" % UP, instant=True), "short"), 4, 4)
    L.add(stat("Checkers down", "Checkers whose Ready condition is not True now (webchecker_up == 0).",
               targets("count(%s) or vector(0)" % DOWN, instant=True), "short",
               thr=thresholds("green", 1, "red")), 4, 4)
    L.add(stat("Availability now", "Fraction of the selected checkers that are Ready now: avg of webchecker_up per checker.",
               targets("avg(%s)" % UP, instant=True), "percentunit",
               thr=thresholds("red", 0.95, "orange", 0.99, "green"), decimals=2), 4, 4)
    L.add(stat("Uptime over the range", "Time-weighted fraction of Ready samples over the dashboard's time range, averaged over the checkers: per checker, the samples of webchecker_up equal to 1 divided by all its samples, whichever replica exported them (a checker that moved between replicas counts once, with the samples of all its owners).",
               targets("avg(%s)" % UPTIME, instant=True), "percentunit",
               thr=thresholds("red", 0.95, "orange", 0.99, "green"), decimals=3), 4, 4)
    L.add(stat("Probe success ratio over the range", "Successful probes / all probes over the dashboard's time range, from webchecker_probes_total. Single failures count here even when failureThreshold keeps the checker Ready.",
               targets(success_ratio("", csel("webchecker_probes_total", 'result="success"'), csel("webchecker_probes_total")),
                       instant=True),
               "percentunit", thr=thresholds("red", 0.95, "orange", 0.99, "green"), decimals=3), 4, 4)
    L.add(stat("Certificates expiring < 30d", "https checkers a certificate of whose chain (leaf or intermediate) expires within 30 days (or has expired).",
               targets("count((min by (namespace, name) (%s > 0) - time()) < 30 * 86400) or vector(0)"
                       % csel("webchecker_certificate_expiry_timestamp_seconds"), instant=True),
               "short", thr=thresholds("green", 1, "orange")), 4, 4)

    L.add(timeseries("Checkers up and down", "Number of selected checkers that are Ready (up) and not Ready (down) over time.",
                     targets(("sum(%s)" % UP, "up"), ("count(%s)" % DOWN, "down")), "short", min_=0,
                     overrides=[override("down", color={"mode": "fixed", "fixedColor": "red"}),
                                override("up", color={"mode": "fixed", "fixedColor": "green"})]), 12, 8)
    L.add(timeseries("Availability over time", "Fraction of the selected checkers that are Ready at each point in time.",
                     targets(("avg(%s)" % UP, "availability")), "percentunit", min_=0, max_=1), 12, 8)

    L.row("Failures")
    L.add(table("Failing checkers",
                "Checkers that are not Ready now, with the failure reason seen most in the last 15 minutes (topk by reason of increase(webchecker_probes_total{result=\"failure\"}[15m])), "
                "the failures in those 15 minutes, how long Ready has not been True (webchecker_down_since_timestamp_seconds, kept when the checker moves to another replica) and the HTTP status of the last probe (0: no response). "
                "\"none in 15m\": the checker has not failed in the last 15 minutes (long interval, or Ready not yet recomputed).",
                targets(REASON,
                        "(time() - max by (namespace, name) (%s))%s" % (csel("webchecker_down_since_timestamp_seconds"), WITH_REASON),
                        "max by (namespace, name) (%s)%s" % (csel("webchecker_last_status_code"), WITH_REASON),
                        instant=True, fmt="table"),
                "short",
                rename={"namespace": "Namespace", "name": "Checker", "reason": "Reason",
                        "Value #A": "Failures (15m)", "Value #B": "Down for", "Value #C": "Last HTTP status"},
                overrides=[override("Down for", unit="s"), override("Last HTTP status", unit="none"),
                           override("Checker", links=checker_link())],
                sort_by=("Failures (15m)", True)), 14, 9)
    L.add(timeseries("Failures by reason", "Failed probes per second by reason (webchecker_probes_total{result=\"failure\"}).",
                     targets(("sum by (reason) (rate(%s[%s]))" % (csel("webchecker_probes_total", 'result="failure"'), RI), "{{reason}}")),
                     "reqps", stack=True, min_=0), 10, 9)
    L.add(timeseries("Status codes", "Number of checkers by the HTTP status of their last probe (count_values over webchecker_last_status_code; 0 means no HTTP response: DNS, connect, TLS error or timeout).",
                     targets(('count_values("code", max by (namespace, name) (%s))' % csel("webchecker_last_status_code"), "{{code}}")),
                     "short", stack=True, min_=0), 12, 8)
    L.add(timeseries("Probes by result", "Probes per second by result (success, failure).",
                     targets(("sum by (result) (rate(%s[%s]))" % (csel("webchecker_probes_total"), RI), "{{result}}")),
                     "reqps", stack=True, min_=0,
                     overrides=[override("failure", color={"mode": "fixed", "fixedColor": "red"}),
                                override("success", color={"mode": "fixed", "fixedColor": "green"})]), 12, 8)
    L.add(timeseries("Unconfirmed failures by replica and zone",
                     "Failures of each replica's probes per minute that another replica's probe refuted: the target answered the other replica "
                     "(webchecker_unconfirmed_failures_total, by the failing replica and its zone). The targets are fine, this replica's network path is not; "
                     "its checkers stay Ready with Degraded=True naming it. One replica: its pod or node; every replica of a zone: the zone. "
                     "The alert WebCheckerProberImpaired fires at 3 in a minute.",
                     targets((by_replica("sum by (job, instance, zone) (rate(%s[%s])) * 60" % (sel("webchecker_unconfirmed_failures_total"), RI)),
                              "{{replica}} {{zone}}")),
                     "opm", min_=0), 12, 8)
    L.add(timeseries("Confirmations by result",
                     "Failures per minute that would have turned a checker Ready=False, by what another replica's probe said (webchecker_confirmations_total): "
                     "confirmed (it failed too: Ready turns False), refuted (it succeeded: Ready stays True, Degraded=True), "
                     "unanswered (no other replica answered in time: the failure stands), none (no other replica, or spec.confirmFailures: false).",
                     targets(("sum by (result) (rate(%s[%s])) * 60" % (sel("webchecker_confirmations_total"), RI), "{{result}}")),
                     "opm", stack=True, min_=0,
                     overrides=[override("confirmed", color={"mode": "fixed", "fixedColor": "red"}),
                                override("refuted", color={"mode": "fixed", "fixedColor": "orange"}),
                                override("unanswered", color={"mode": "fixed", "fixedColor": "purple"}),
                                override("none", color={"mode": "fixed", "fixedColor": "blue"})]), 12, 8)

    L.row("Latency")
    L.add(timeseries("Probe duration percentiles", "p50, p90 and p99 of the whole probe duration across the selected checkers (histogram_quantile over webchecker_probe_duration_seconds_bucket). Empty when the operator runs with --per-checker-histogram=false.",
                     targets((quantile(0.5, "webchecker_probe_duration_seconds_bucket", checker=True), "p50"),
                             (quantile(0.9, "webchecker_probe_duration_seconds_bucket", checker=True), "p90"),
                             (quantile(0.99, "webchecker_probe_duration_seconds_bucket", checker=True), "p99")),
                     "s", min_=0), 12, 8)
    L.add(heatmap("Probe duration distribution", "Probes per second in each latency bucket of webchecker_probe_duration_seconds (buckets 5ms .. 10s).",
                  targets(("sum by (le) (rate(%s[%s]))" % (csel("webchecker_probe_duration_seconds_bucket"), RI), "{{le}}"), fmt="heatmap"),
                  "s"), 12, 8)
    L.add(timeseries("Slowest checkers (p90)", "The 10 selected checkers with the highest p90 probe duration at each point in time.",
                     targets(("topk(10, %s)" % quantile(0.9, "webchecker_probe_duration_seconds_bucket", by="namespace, name", checker=True),
                              "{{namespace}}/{{name}}")),
                     "s", min_=0), 12, 8)
    L.add(timeseries("Probe phase durations", "Average duration of each phase (resolve, connect, tls, processing = time to first byte, transfer) of the last probe of the selected checkers (webchecker_probe_phase_duration_seconds, a gauge per checker).",
                     targets(("avg by (phase) (%s)" % csel("webchecker_probe_phase_duration_seconds"), "{{phase}}")),
                     "s", stack=True, min_=0), 12, 8)

    L.row("Certificates")
    L.add(table("Certificates expiring within 30 days", "https checkers a certificate of whose chain (the earliest notAfter of leaf and intermediates, webchecker_certificate_expiry_timestamp_seconds) expires in less than 30 days; negative: already expired; webchecker_certificate_info says which. The alert WebCheckerCertificateExpiring fires under 14 days.",
                targets("sort((min by (namespace, name) (%s > 0) - time()) < 30 * 86400)"
                        % csel("webchecker_certificate_expiry_timestamp_seconds"), instant=True, fmt="table"),
                "s", rename={"namespace": "Namespace", "name": "Checker", "Value": "Expires in"},
                overrides=[override("Expires in", **{"custom.cellOptions": {"type": "color-background"}}),
                           override("Checker", links=checker_link())],
                thr=thresholds("red", 7 * 86400, "orange", 14 * 86400, "green"),
                sort_by=("Expires in", False)), 24, 8)
    return dashboard("webchecker-fleet-overview", "WebChecker / Fleet overview",
                     "Availability, failures, latency and certificates of the endpoints probed by WebChecker resources.", L)


# ------------------------------------------------------------- operator health
def operator():
    L = Layout()
    L.row("Replicas")
    L.add(stat("Replicas", "Operator replicas scraped now (count of webchecker_build_info).",
               targets("count(%s) or vector(0)" % BUILD_INFO, instant=True), "short",
               thr=thresholds("red", 1, "green")), 4, 4)
    L.add(stat("Leaders", "Replicas reporting webchecker_leader = 1. Exactly one is healthy; 0 means no sharder (alert WebCheckerNoLeader).",
               targets("sum(%s) or vector(0)" % sel("webchecker_leader"), instant=True), "short",
               thr=thresholds("red", 1, "green", 2, "red")), 4, 4)
    L.add(stat("Checkers owned", "Checkers owned and probed by all replicas together (sum of webchecker_owned_checkers).",
               targets("sum(%s)" % sel("webchecker_owned_checkers"), instant=True), "short"), 4, 4)
    L.add(stat("Worker pool saturation (max)", "Highest in-flight probes / worker pool size among the replicas.",
               targets("max(%s / %s)" % (sel("webchecker_inflight_probes"), sel("webchecker_worker_pool_size")), instant=True),
               "percentunit", thr=thresholds("green", 0.8, "orange", 0.95, "red"), decimals=1), 4, 4)
    L.add(stat("API reachable", "0 if any replica gets no answer to its Lease renewals (min of webchecker_api_reachable).",
               targets("min(%s)" % sel("webchecker_api_reachable"), instant=True), "none",
               mappings=mapping([(0, "unreachable", "red"), (1, "reachable", "green")])), 4, 4)
    L.add(stat("Self fences (range)", "Times replicas dropped their checkers because they lost their Lease or were paused, over the dashboard's time range.",
               targets("sum(increase(%s[$__range])) or vector(0)" % sel("webchecker_self_fences_total"), instant=True),
               "short", thr=thresholds("green", 1, "orange"), decimals=0), 4, 4)

    L.add(table("Replicas", "One row per scraped replica (the replica label of webchecker_build_info is its identity, also the owner label on WebCheckers and the holder of its membership Lease).",
                targets(*[("max by (replica) (%s)" % by_replica(sel(m))) for m in (
                    "webchecker_leader", "webchecker_owned_checkers", "webchecker_ring_members",
                    "webchecker_inflight_probes", "webchecker_worker_pool_size", "webchecker_api_reachable")],
                        instant=True, fmt="table"),
                "short",
                rename={"replica": "Replica", "Value #A": "Leader", "Value #B": "Owned checkers", "Value #C": "Ring members",
                        "Value #D": "In-flight probes", "Value #E": "Worker pool", "Value #F": "API reachable"},
                sort_by=("Replica", False)), 16, 8)
    L.add(table("Versions", "Replicas per version (webchecker_build_info). More than one row during a rolling update only.",
                targets("count by (version) (%s)" % BUILD_INFO, instant=True, fmt="table"),
                "short", rename={"version": "Version", "Value": "Replicas"}), 8, 8)

    L.row("Sharding")
    L.add(timeseries("Shard size per replica", "Checkers owned and probed by each replica (webchecker_owned_checkers). The alert WebCheckerShardImbalance fires when the largest shard exceeds 1.2x the average for 15m (with at least 100 checkers).",
                     targets((by_replica(sel("webchecker_owned_checkers")), "{{replica}}")), "short", min_=0), 12, 8)
    L.add(timeseries("Ring members", "Live members each replica sees through the membership Leases (webchecker_ring_members), and the replicas Prometheus scrapes. A replica seeing more members than are scraped means a replica is not scraped.",
                     targets((by_replica(sel("webchecker_ring_members")), "seen by {{replica}}"),
                             ("count(%s)" % BUILD_INFO, "scraped replicas")), "short", min_=0), 12, 8)
    L.add(state_timeline("Leader", "Which replica is the leader (sharder) over time (webchecker_leader).",
                         targets((by_replica(sel("webchecker_leader")), "{{replica}}")),
                         mapping([(0, "follower", "transparent"), (1, "leader", "blue")])), 12, 6)
    L.add(timeseries("Moves by cause", "Assignments written by the sharder per minute, by cause: new (unassigned checker), rebalance (ring change), dead (owner's Lease expired), departed (owner left gracefully).",
                     targets(("sum by (cause) (rate(%s[%s])) * 60" % (sel("webchecker_moves_total"), RI), "{{cause}}")),
                     "opm", stack=True, min_=0), 12, 6)
    L.add(timeseries("Drains completed", "Drain handshakes completed per minute by each replica as the old owner (webchecker_drains_total).",
                     targets((by_replica("sum by (job, instance) (rate(%s[%s])) * 60" % (sel("webchecker_drains_total"), RI)), "{{replica}}")),
                     "opm", min_=0), 12, 8)
    L.add(timeseries("Assignment latency", "Sharder: time from seeing an unassigned checker to writing its assignment (webchecker_assignment_latency_seconds; only the leader observes it).",
                     targets((quantile(0.5, "webchecker_assignment_latency_seconds_bucket"), "p50"),
                             (quantile(0.99, "webchecker_assignment_latency_seconds_bucket"), "p99")),
                     "s", min_=0), 12, 8)

    L.row("Scheduling")
    L.add(timeseries("Schedule lag percentiles", "Actual probe start minus due time across all replicas (webchecker_schedule_lag_seconds). The alert WebCheckerScheduleLagHigh fires when one replica's p99 stays above 500ms for 10m.",
                     targets((quantile(0.5, "webchecker_schedule_lag_seconds_bucket"), "p50"),
                             (quantile(0.9, "webchecker_schedule_lag_seconds_bucket"), "p90"),
                             (quantile(0.99, "webchecker_schedule_lag_seconds_bucket"), "p99")),
                     "s", min_=0), 12, 8)
    L.add(timeseries("Schedule lag p99 per replica", "p99 schedule lag of each replica.",
                     targets((by_replica(quantile(0.99, "webchecker_schedule_lag_seconds_bucket", by="job, instance")), "{{replica}}")),
                     "s", min_=0), 12, 8)
    L.add(timeseries("Worker pool saturation", "In-flight probes / worker pool size (--workers) per replica. Near 100% probes queue for a worker and start late.",
                     targets((by_replica("%s / %s" % (sel("webchecker_inflight_probes"), sel("webchecker_worker_pool_size"))), "{{replica}}")),
                     "percentunit", min_=0, max_=1), 8, 8)
    L.add(timeseries("In-flight probes", "Probes running now per replica (webchecker_inflight_probes) and the pool size (webchecker_worker_pool_size).",
                     targets((by_replica(sel("webchecker_inflight_probes")), "{{replica}}"),
                             (by_replica(sel("webchecker_worker_pool_size")), "pool {{replica}}")),
                     "short", min_=0), 8, 8)
    L.add(timeseries("Missed intervals", "Probe intervals skipped per second because the previous probe or the worker pool was late (webchecker_missed_intervals_total).",
                     targets((by_replica("sum by (job, instance) (rate(%s[%s]))" % (sel("webchecker_missed_intervals_total"), RI)), "{{replica}}")),
                     "ops", min_=0), 8, 8)

    L.row("Kubernetes API")
    L.add(timeseries("Status writes by result", "Status writes per second by result: ok, conflict (resourceVersion changed), error, fenced (refused because the replica no longer holds the assignment's epoch). The alert WebCheckerStatusWritesFailing fires above 10% error+conflict.",
                     targets(("sum by (result) (rate(%s[%s]))" % (sel("webchecker_status_writes_total"), RI), "{{result}}")),
                     "ops", stack=True, min_=0), 12, 8)
    L.add(timeseries("Events emitted", "Kubernetes Events emitted per minute by type and reason (webchecker_events_total).",
                     targets(("sum by (type, reason) (rate(%s[%s])) * 60" % (sel("webchecker_events_total"), RI), "{{type}} {{reason}}")),
                     "opm", stack=True, min_=0), 12, 8)
    L.add(timeseries("Lease renew failures", "Failed membership/leader Lease renewals per minute by replica and reason (unreachable: no answer; lost: someone else holds it).",
                     targets((by_replica("sum by (job, instance, reason) (rate(%s[%s])) * 60" % (sel("webchecker_lease_renew_failures_total"), RI)),
                              "{{replica}} {{reason}}")),
                     "opm", min_=0), 8, 8)
    L.add(timeseries("Self fences", "Times per minute a replica dropped all its checkers because it lost its Lease or noticed it had been paused (webchecker_self_fences_total).",
                     targets((by_replica("sum by (job, instance, reason) (rate(%s[%s])) * 60" % (sel("webchecker_self_fences_total"), RI)),
                              "{{replica}} {{reason}}")),
                     "opm", min_=0), 8, 8)
    L.add(timeseries("Watch restarts", "Watch errors and relists per minute by watch (webchecker_watch_restarts_total).",
                     targets(("sum by (watch) (rate(%s[%s])) * 60" % (sel("webchecker_watch_restarts_total"), RI), "{{watch}}")),
                     "opm", min_=0), 8, 8)
    L.add(state_timeline("API reachable", "Per replica: reachable while Lease renewals get answers, unreachable otherwise (webchecker_api_reachable).",
                         targets((by_replica(sel("webchecker_api_reachable")), "{{replica}}")),
                         mapping([(0, "unreachable", "red"), (1, "reachable", "green")])), 24, 5)

    L.row("Process")
    L.add(timeseries("CPU per replica", "CPU used by each replica, 100% = one core (rate of process_cpu_seconds_total).",
                     targets((by_replica("rate(%s[%s])" % (sel("process_cpu_seconds_total"), RI)), "{{replica}}")),
                     "percentunit", min_=0), 12, 8)
    L.add(timeseries("Memory per replica", "Resident memory of each replica (process_resident_memory_bytes) and its memory limit (webchecker_memory_limit_bytes). The alert WebCheckerReplicaMemoryHigh fires when one replica stays above 85% of its limit for 10m.",
                     targets((by_replica(sel("process_resident_memory_bytes")), "{{replica}}"),
                             (by_replica(sel("webchecker_memory_limit_bytes")), "{{replica}} limit")),
                     "bytes", min_=0), 12, 8)

    L.row("Selected checkers")
    L.add(timeseries("Selected checkers per replica", "How the checkers chosen with the Namespace and Checker variables are spread over the replicas (count of their webchecker_up series per owner).",
                     targets((by_replica("count by (job, instance) (%s)" % csel("webchecker_up")), "{{replica}}")),
                     "short", stack=True, min_=0), 12, 8)
    L.add(table("Owner of selected checkers", "The replica that owns (probes) each selected checker now, and whether the checker is Ready (1) or not (0). Same as `kubectl get wc -A -L webchecker.test.network.io/owner`.",
                targets("max by (namespace, name, replica) (%s)" % by_replica(csel("webchecker_up")), instant=True, fmt="table"),
                "short", rename={"namespace": "Namespace", "name": "Checker", "replica": "Owner", "Value": "Ready"},
                overrides=[override("Checker", links=checker_link())],
                sort_by=("Namespace", False)), 12, 8)
    return dashboard("webchecker-operator-health", "WebChecker / Operator health",
                     "Replicas, leadership, sharding, scheduling, Kubernetes API use and resources of webchecker-operator.", L)


# ------------------------------------------------------------------- checker
def checker():
    """One checker (the single-valued namespace and checker variables), across
    the replicas that owned it: every query aggregates by (namespace, name) or
    finer, never by instance, so that a move neither splits nor duplicates it."""
    L = Layout()
    one = "max by (namespace, name) (%s)"
    up = one % osel("webchecker_up")
    owner = "group by (namespace, name, replica) (%s * on (job, instance) group_left (replica) %s)" % (
        osel("webchecker_up"), BUILD_INFO)
    probes = osel("webchecker_probes_total")
    failures = osel("webchecker_probes_total", 'result="failure"')
    expiry = "(min by (namespace, name) (%s > 0) - time()) / 86400" % osel("webchecker_certificate_expiry_timestamp_seconds")
    status_thr = thresholds("red", 200, "green", 300, "blue", 400, "orange", 500, "red")
    no_response = [{"type": "value", "options": {"0": {"text": "no response", "color": "red", "index": 0}}}]
    ok_fail = mapping([(0, "failing", "red"), (1, "ok", "green")])

    L.row("Now")
    L.add(stat("Ready", "The checker's Ready condition now (webchecker_up, which honours failureThreshold and successThreshold).",
               targets(up, instant=True), "none", mappings=mapping([(0, "not ready", "red"), (1, "ready", "green")])), 3, 4)
    L.add(stat("Last probe", "Outcome of the last probe (webchecker_last_probe_success: no thresholds, flips on every single failure).",
               targets(one % osel("webchecker_last_probe_success"), instant=True), "none",
               mappings=mapping([(0, "failed", "red"), (1, "succeeded", "green")])), 3, 4)
    L.add(stat("Last HTTP status", "HTTP status code of the last probe's response (webchecker_last_status_code); no response: DNS, connect or TLS error, timeout, forbidden address.",
               targets(one % osel("webchecker_last_status_code"), instant=True), "none",
               thr=status_thr, mappings=no_response), 3, 4)
    L.add(stat("Uptime over the range", "Time-weighted fraction of Ready samples over the dashboard's time range, with the samples of every replica that owned the checker in it.",
               targets("sum by (namespace, name) (sum_over_time(%s[$__range])) / sum by (namespace, name) (count_over_time(%s[$__range]))"
                       % (osel("webchecker_up"), osel("webchecker_up")), instant=True),
               "percentunit", thr=thresholds("red", 0.95, "orange", 0.99, "green"), decimals=3), 3, 4)
    L.add(stat("Probe success ratio over the range", "Successful probes / all probes over the dashboard's time range (webchecker_probes_total, all owners added up).",
               targets(success_ratio("by (namespace, name) ", osel("webchecker_probes_total", 'result="success"'), probes),
                       instant=True),
               "percentunit", thr=thresholds("red", 0.95, "orange", 0.99, "green"), decimals=3), 3, 4)
    L.add(stat("p90 probe duration over the range", "90th percentile of the whole probe duration over the dashboard's time range (webchecker_probe_duration_seconds; empty with --per-checker-histogram=false).",
               targets(osel_quantile(0.9, "increase", "$__range"), instant=True),
               "s", thr=thresholds("green", 1, "orange", 5, "red"), decimals=3), 3, 4)
    L.add(stat("Certificate expires in", "Days until the earliest notAfter of the certificate chain presented at the last TLS handshake (webchecker_certificate_expiry_timestamp_seconds); negative: expired. https checkers only. The alert WebCheckerCertificateExpiring fires under 14 days.",
               targets(expiry, instant=True), "d", thr=thresholds("red", 7, "orange", 14, "green"), decimals=1), 3, 4)
    L.add(stat("Owner", "The replica that owns (probes) the checker now: the replica label of webchecker_build_info joined to the webchecker_up series of its owner.",
               targets((owner, "{{replica}}"), instant=True), "none", text="name"), 3, 4)

    L.row("Availability")
    L.add(state_timeline("Ready and last probe", "Ready condition (webchecker_up) and outcome of the last probe (webchecker_last_probe_success) over time. A gap: no owner exported the checker (suspended, or between two owners).",
                         targets((up, "Ready"), (one % osel("webchecker_last_probe_success"), "Last probe")), ok_fail), 24, 5)
    L.add(state_timeline("HTTP status", "HTTP status of the last probe over time (webchecker_last_status_code): green 2xx, blue 3xx, orange 4xx, red 5xx and no response.",
                         targets((one % osel("webchecker_last_status_code"), "status")), no_response,
                         thr=status_thr, show_value="auto", unit="none"), 24, 4)
    L.add(state_timeline("Owner replica", "Which replica owned (probed) the checker over time; a move (rebalance, drain, dead or departed owner) shows as a change of row.",
                         targets((owner, "{{replica}}")), mapping([(1, "owner", "blue")])), 24, 5)

    L.row("Probes")
    L.add(timeseries("Probes per second", "Probes per second by result (rate of webchecker_probes_total, all owners added up).",
                     targets(("sum by (namespace, name, result) (rate(%s[%s]))" % (probes, RI), "{{result}}")),
                     "reqps", stack=True, min_=0,
                     overrides=[override("failure", color={"mode": "fixed", "fixedColor": "red"}),
                                override("success", color={"mode": "fixed", "fixedColor": "green"})]), 12, 8)
    L.add(timeseries("Failures by reason", "Failed probes per second by reason (webchecker_probes_total{result=\"failure\"}).",
                     targets(("sum by (namespace, name, reason) (rate(%s[%s]))" % (failures, RI), "{{reason}}")),
                     "reqps", stack=True, min_=0), 12, 8)
    L.add(table("Failure reasons", "Failed probes by reason over the dashboard's time range and in the last 15 minutes (increase of webchecker_probes_total{result=\"failure\"}, all owners added up). Empty: no failure in the range.",
                targets("sort_desc(sum by (namespace, name, reason) (increase(%s[$__range])) > 0)" % failures,
                        "sum by (namespace, name, reason) (increase(%s[15m]))" % failures,
                        instant=True, fmt="table"),
                "short", rename={"reason": "Reason", "Value #A": "Failures (range)", "Value #B": "Failures (15m)"},
                exclude=("Time", "namespace", "name"), sort_by=("Failures (range)", True)), 24, 6)

    L.row("Latency")
    L.add(timeseries("Probe duration percentiles", "p50, p90 and p99 of the whole probe duration (webchecker_probe_duration_seconds, the buckets of all owners added up; empty with --per-checker-histogram=false).",
                     targets(*[(osel_quantile(q, "rate", RI), "p%d" % round(q * 100))
                               for q in (0.5, 0.9, 0.99)]),
                     "s", min_=0), 12, 8)
    L.add(timeseries("Probe phases", "Duration of each phase of the last probe: resolve (DNS), connect (TCP), tls (handshake), processing (request sent to first response byte), transfer (body read) (webchecker_probe_phase_duration_seconds, a gauge: the last probe's, not a distribution).",
                     targets(("max by (namespace, name, phase) (%s)" % osel("webchecker_probe_phase_duration_seconds"), "{{phase}}")),
                     "s", stack=True, min_=0), 12, 8)

    L.row("Zones (spec.locations)")
    zone_note = (" Checkers with spec.locations only; the owner exports every zone's series (zone: the zone of the replica "
                 "that probed), and a zone no longer asked loses its series at the next round.")
    L.add(state_timeline("Zone results", "Outcome of the last probe from each zone (webchecker_zone_probe_success). A gap: that zone's replica "
                         "gave no result (status.zones[] says Unknown, reason NoAnswer), or no owner exported the checker." + zone_note,
                         targets(("max by (namespace, name, zone) (%s)" % osel("webchecker_zone_probe_success"), "{{zone}}")),
                         mapping([(0, "failed", "red"), (1, "succeeded", "green")])), 24, 5)
    L.add(timeseries("Zone probe duration", "Duration of the last probe from each zone (webchecker_zone_probe_duration_seconds, a gauge: "
                     "the last probe's, not a distribution)." + zone_note,
                     targets(("max by (namespace, name, zone) (%s)" % osel("webchecker_zone_probe_duration_seconds"), "{{zone}}")),
                     "s", min_=0), 12, 8)
    L.add(timeseries("Zone failures per second", "Failed probes per second from each zone (rate of webchecker_zone_probes_total{result=\"failure\"}, "
                     "all owners added up). Ready turns False when at least spec.locations.quorum zones fail failureThreshold times in a row." + zone_note,
                     targets(("sum by (namespace, name, zone) (rate(%s[%s]))"
                              % (osel("webchecker_zone_probes_total", 'result="failure"'), RI), "{{zone}}")),
                     "reqps", min_=0), 12, 8)

    L.row("Error budget (spec.slo)")
    slo_note = (" Checkers with spec.slo only; counted probes are good ones and confirmed failures (docs/slo.md). "
                "status.slo (kubectl describe wc) has the same figures over the whole window.")
    good = osel("webchecker_slo_good_probes_total")
    counted = osel("webchecker_slo_probes_total")
    allowed = "(1 - max by (namespace, name) (%s))" % osel("webchecker_slo_objective")

    def bad_share(window):
        return ("(1 - sum by (namespace, name) (increase(%s[%s])) / sum by (namespace, name) (increase(%s[%s])))"
                % (good, window, counted, window))

    L.add(stat("Objective", "spec.slo.objective (webchecker_slo_objective)." + slo_note,
               targets(one % osel("webchecker_slo_objective"), instant=True), "percentunit", decimals=3), 4, 6)
    L.add(stat("Error budget left over the range", "1 - (bad share of counted probes over the dashboard's time range) / "
               "(1 - objective): 100% untouched, 0 spent, negative overspent." + slo_note,
               targets("1 - %s / on (namespace, name) %s" % (bad_share("$__range"), allowed), instant=True),
               "percentunit", thr=thresholds("red", 0, "orange", 0.25, "green"), decimals=1), 4, 6)
    L.add(timeseries("Burn rate", "Bad share of counted probes over the last hour and six hours, over the allowed share "
                     "(1: the budget lasts exactly the window). WebCheckerErrorBudgetBurn pages above 14.4 (1h) and 6 (6h)." + slo_note,
                     targets(("%s / on (namespace, name) %s" % (bad_share("1h"), allowed), "1h"),
                             ("%s / on (namespace, name) %s" % (bad_share("6h"), allowed), "6h")),
                     "none", min_=0), 16, 6)

    L.row("TLS")
    L.add(timeseries("Certificate days left", "Days until the earliest notAfter of the chain over time; a renewal shows as a jump. https checkers only.",
                     targets((expiry, "days left")), "d"), 8, 8)
    L.add(table("Certificate chain", "The certificates of the chain at the last TLS handshake (webchecker_certificate_info): position 0 is the leaf, then the intermediates. https checkers only.",
                targets("max by (namespace, name, position, subject, issuer, serial, not_after) (%s)"
                        % osel("webchecker_certificate_info"), instant=True, fmt="table"),
                "none", rename={"position": "Position", "subject": "Subject", "issuer": "Issuer", "serial": "Serial",
                                "not_after": "Not after"},
                exclude=("Time", "namespace", "name", "Value"), sort_by=("Position", False)), 16, 8)
    return dashboard(CHECKER_UID, "WebChecker / Checker",
                     "One WebChecker across the replicas that owned it: Ready, HTTP status, failures, latency, zones, error budget, certificate and owner.",
                     L, one_checker=True)


def render(d):
    return json.dumps(d, indent=2, ensure_ascii=False) + "\n"


def main():
    check = "--check" in sys.argv[1:]
    stale = []
    for name, d in (("fleet-overview.json", fleet()), ("operator-health.json", operator()), ("checker.json", checker())):
        path = os.path.join(HERE, name)
        text = render(d)
        old = open(path, encoding="utf-8").read() if os.path.exists(path) else None
        if old == text:
            continue
        if check:
            stale.append(name)
        else:
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
            print("wrote", path)
    if stale:
        print("out of date (run python3 dashboards/generate.py): " + ", ".join(stale), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
