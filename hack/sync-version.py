#!/usr/bin/env python3
"""Writes the operator's version (Cargo.toml, [package] version) where other
files state it: one version for the crate, the chart and the images.

- deploy/helm/webchecker-operator/Chart.yaml: `version` and `appVersion`
  (the chart's image.tag defaults to appVersion);
- Dockerfile: every `org.opencontainers.image.version` label (hack/image.sh
  labels and tags its images with the same version);
- README.md: every `--version <version>` (the chart that `make push`
  pushes; tests/node/main.rs runs the `## Install` section's commands);
- examples/README.md and examples/values-*.yaml: every `--version <version>`
  of their install commands.

    python3 hack/sync-version.py           # rewrite them
    python3 hack/sync-version.py --check   # exit 1 if one is out of date

`make chart-sync` runs it; tests/generated/main.rs checks the result with real
parsers. Standard library only.
"""
import os
import re
import sys
import tomllib

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CARGO = os.path.join(REPO, "Cargo.toml")
CHART = os.path.join(REPO, "deploy", "helm", "webchecker-operator", "Chart.yaml")
DOCKERFILE = os.path.join(REPO, "Dockerfile")
README = os.path.join(REPO, "README.md")
EXAMPLES = os.path.join(REPO, "examples")
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


def chart(text, v):
    """Chart.yaml with its top-level version and appVersion lines set to v
    (comments and everything else as they are)."""
    for key, value in (("version", v), ("appVersion", '"%s"' % v)):
        line = re.compile(r"^%s:[^\n]*$" % key, re.M)
        if len(line.findall(text)) != 1:
            raise Bad("Chart.yaml must have exactly one top-level `%s:` line" % key)
        text = line.sub("%s: %s" % (key, value), text)
    return text


def dockerfile(text, v):
    label = re.compile(r'org\.opencontainers\.image\.version="[^"]*"')
    if not label.search(text):
        raise Bad('the Dockerfile has no org.opencontainers.image.version="..." label')
    return label.sub('org.opencontainers.image.version="%s"' % v, text)


def readme(text, v):
    """README.md with each `--version <semver>` set to v; its `## Install`
    section (up to the next `## ` heading) must have one."""
    start = text.find("\n## Install\n")
    if start < 0:
        raise Bad("README.md has no `## Install` section")
    end = text.find("\n## ", start + 1)
    end = len(text) if end < 0 else end
    section = text[start:end]
    flag = re.compile(r"--version " + SEMVER.pattern + r"(?![0-9A-Za-z.+-])")
    if not flag.search(section):
        raise Bad("README.md's Install section names no `--version <version>`")
    # The Install section must name it; every other command follows it.
    return anywhere(text, v)


def anywhere(text, v):
    """Every `--version <semver>` of the text set to v."""
    flag = re.compile(r"--version " + SEMVER.pattern + r"(?![0-9A-Za-z.+-])")
    return flag.sub("--version " + v, text)


def example_files():
    names = sorted(n for n in os.listdir(EXAMPLES)
                   if n == "README.md" or (n.startswith("values-") and n.endswith(".yaml")))
    return [(os.path.join(EXAMPLES, n), anywhere) for n in names]


def main(argv):
    check = argv[1:] == ["--check"]
    if argv[1:] and not check:
        sys.stderr.write("usage: %s [--check]\n" % argv[0])
        return 2
    try:
        v = crate_version()
        stale = []
        files = [(CHART, chart), (DOCKERFILE, dockerfile), (README, readme)] + example_files()
        for path, update in files:
            with open(path, encoding="utf-8") as f:
                old = f.read()
            new = update(old, v)
            if new != old:
                stale.append((path, new))
    except Bad as e:
        sys.stderr.write("sync-version: %s\n" % e)
        return 1
    for path, new in stale:
        rel = os.path.relpath(path, REPO)
        if check:
            sys.stderr.write("%s does not state Cargo.toml's version %s\n" % (rel, v))
        else:
            with open(path, "w", encoding="utf-8") as f:
                f.write(new)
            print("wrote %s (version %s)" % (rel, v))
    if check and stale:
        sys.stderr.write("run `make chart-sync` and commit the result\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
