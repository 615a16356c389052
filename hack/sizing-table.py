#!/usr/bin/env python3
"""Writes the chart README's sizing table from the scale bench's figures.

Memory per replica is modelled as a baseline plus a cost per owned checker,
both from docs/benchmarks.md (part 3, written by `make bench`):
- the cost: "Marginal memory per checker owned (1,000 -> 10,000): ... KiB
  after scrapes" (RSS with the per-checker histogram, /metrics scraped);
- the baseline: the largest "RSS end" of a replica in the memory table,
  less its share of checkers at that cost (the worst replica of every run).
- the leader's sharder: the largest "the leader's sharder ... (X KiB per
  checker)" of the rebalancing simulation (`make sim`), per checker of the
  whole fleet, held by the leader only.
With R replicas sharing T checkers, the leader holds baseline + (T / R) x
cost + T x sharder, which must stay below the ratio of the limit at which
WebCheckerReplicaMemoryHigh fires; the table gives the largest T for 3
replicas, and for 2 (3 replicas, one lost).

The table between `<!-- sizing:begin ... -->` and `<!-- sizing:end -->` of
deploy/helm/webchecker-operator/README.md is generated; tests/generated
fails on drift. Standard library only.

    python3 hack/sizing-table.py           # rewrite the table
    python3 hack/sizing-table.py --check   # exit 1 if it is out of date
"""
import os
import re
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.path.join(REPO, "docs", "benchmarks.md")
README = os.path.join(REPO, "deploy", "helm", "webchecker-operator", "README.md")
RULES = os.path.join(REPO, "alerts", "webchecker.rules.yaml")
BEGIN = "<!-- sizing:begin: generated from docs/benchmarks.md by hack/sizing-table.py (make chart-sync) -->"
END = "<!-- sizing:end -->"
LIMITS = [("128Mi", 128), ("256Mi", 256), ("512Mi", 512), ("1Gi", 1024), ("2Gi", 2048)]
DEFAULT = "256Mi"


def number(s):
    return float(s.replace(",", ""))


def figures(text):
    m = re.search(r"Marginal memory per checker owned \([^)]*\): [\d.]+ KiB before any scrape, ([\d.]+) KiB after scrapes", text)
    if not m:
        sys.exit("sizing-table: no marginal memory per checker in docs/benchmarks.md")
    cost = float(m.group(1))
    # Memory table rows: | checkers | per replica | RSS before | RSS end | ...
    rows = re.findall(r"^\| ([\d,]+) \| ([\d,]+) \| [^|]+ \| [\d.]+–([\d.]+) MiB \|", text, re.M)
    if not rows:
        sys.exit("sizing-table: no memory table rows in docs/benchmarks.md")
    baseline = max(number(end) - number(per) * cost / 1024 for _, per, end in rows)
    sharder = [float(x) for x in re.findall(r"the leader's sharder [\d.]+ MiB \(([\d.]+) KiB per checker\)", text)]
    if not sharder:
        sys.exit("sizing-table: no figure of the leader's sharder in docs/benchmarks.md")
    return cost, baseline, max(sharder)


def alert_ratio(rules):
    m = re.search(r"alert: WebCheckerReplicaMemoryHigh.*?> ([\d.]+) # threshold: ratio", rules, re.S)
    if not m:
        sys.exit("sizing-table: no ratio threshold of WebCheckerReplicaMemoryHigh in alerts/webchecker.rules.yaml")
    return float(m.group(1))


def fleet(mib, ratio, cost, baseline, sharder, replicas):
    """The most checkers `replicas` replicas hold with the leader below the
    alert, rounded down to hundreds."""
    kib = (mib * ratio - baseline) * 1024
    return max(0, int(kib / (cost / replicas + sharder)) // 100 * 100)


def table(cost, baseline, sharder, ratio):
    out = [
        BEGIN,
        "",
        "| `resources.limits.memory` | checkers, 3 replicas | per replica | checkers, 3 replicas with one lost |",
        "|---|---:|---:|---:|",
    ]
    for name, mib in LIMITS:
        three = fleet(mib, ratio, cost, baseline, sharder, 3)
        two = fleet(mib, ratio, cost, baseline, sharder, 2)
        label = "`%s`%s" % (name, " (default)" if name == DEFAULT else "")
        out.append("| %s | %s | %s | %s |" % (label, f"{three:,}", f"{three // 3 // 100 * 100:,}", f"{two:,}"))
    out += [
        "",
        "The model: the leader, the largest replica, holds %.1f MiB, %.1f KiB per checker it owns and %.2f KiB per checker of the fleet (its sharder); the table keeps it below %d%% of its limit."
        % (baseline, cost, sharder, round(ratio * 100)),
        "",
        END,
    ]
    return "\n".join(out)


def main():
    check = sys.argv[1:] == ["--check"]
    cost, baseline, sharder = figures(open(BENCH).read())
    new = table(cost, baseline, sharder, alert_ratio(open(RULES).read()))
    readme = open(README).read()
    start, end = readme.find(BEGIN), readme.find(END)
    if start < 0 or end < 0:
        sys.exit("sizing-table: the markers are missing in " + README)
    updated = readme[:start] + new + readme[end + len(END):]
    if check:
        if updated != readme:
            sys.exit("sizing-table: the chart README's sizing table is out of date: run make chart-sync")
        return
    if updated != readme:
        open(README, "w").write(updated)
        print("wrote " + README)


if __name__ == "__main__":
    main()
