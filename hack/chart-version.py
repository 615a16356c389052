#!/usr/bin/env python3
"""Writes the operator's version (Cargo.toml, [package] version) into the
chart's Chart.yaml as `version` and `appVersion`: one version for the crate,
the chart and the image (hack/image.sh tags and labels the image with it, and
the chart's image.tag defaults to appVersion). Standard library only.

    python3 hack/chart-version.py           # rewrite Chart.yaml
    python3 hack/chart-version.py --check   # exit 1 if Chart.yaml is out of date

tests/generated.rs checks the same with a real YAML parser.
"""
import os
import re
import sys
import tomllib

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CARGO = os.path.join(REPO, "Cargo.toml")
CHART = os.path.join(REPO, "deploy", "helm", "webchecker-operator", "Chart.yaml")
# SemVer 2 (semver.org), which Helm requires of a chart version.
SEMVER = re.compile(
    r"(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(-((0|[1-9]\d*|\d*[A-Za-z-][0-9A-Za-z-]*)(\.(0|[1-9]\d*|\d*[A-Za-z-][0-9A-Za-z-]*))*))?"
    r"(\+[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?")


class Bad(Exception):
    pass


def crate_version():
    with open(CARGO, "rb") as f:
        cargo = tomllib.load(f)
    v = cargo.get("package", {}).get("version")
    if not isinstance(v, str):
        raise Bad("Cargo.toml has no [package] version")
    if not SEMVER.fullmatch(v):
        raise Bad("Cargo.toml's version %r is not SemVer 2, which Helm requires of a chart" % v)
    return v


def with_version(chart, v):
    """Chart.yaml with its top-level version and appVersion lines set to v
    (comments and everything else as they are)."""
    out = chart
    for key, value in (("version", v), ("appVersion", '"%s"' % v)):
        line = re.compile(r"^%s:[^\n]*$" % key, re.M)
        if len(line.findall(out)) != 1:
            raise Bad("Chart.yaml must have exactly one top-level `%s:` line" % key)
        out = line.sub("%s: %s" % (key, value), out)
    return out


def main(argv):
    check = argv[1:] == ["--check"]
    if argv[1:] and not check:
        sys.stderr.write("usage: %s [--check]\n" % argv[0])
        return 2
    rel = os.path.relpath(CHART, REPO)
    try:
        v = crate_version()
        with open(CHART, encoding="utf-8") as f:
            old = f.read()
        new = with_version(old, v)
    except Bad as e:
        sys.stderr.write("chart-version: %s\n" % e)
        return 1
    if new == old:
        return 0
    if check:
        sys.stderr.write("%s: version/appVersion differ from Cargo.toml's %s; run `make chart-sync` "
                         "and commit the result\n" % (rel, v))
        return 1
    with open(CHART, "w", encoding="utf-8") as f:
        f.write(new)
    print("wrote %s (version %s)" % (rel, v))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
