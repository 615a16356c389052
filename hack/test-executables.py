#!/usr/bin/env python3
"""Reads `cargo test --no-run --message-format=json-diagnostic-rendered-ansi`
on stdin: prints the compiler's messages as cargo would (stderr) and writes
the test executables to the file named by argv[1], one per line as
`<name> <package dir> <path>` where name is what hack/test.sh calls the
binary (lib, bins, kit, or a tests/ file's name); the kit's unit tests and
its own integration tests (kit/tests/) are all `kit`, run one after the
other."""
import json
import os
import sys

out = []
for line in sys.stdin:
    try:
        msg = json.loads(line)
    except ValueError:
        sys.stderr.write(line)
        continue
    reason = msg.get("reason")
    if reason == "compiler-message":
        rendered = msg.get("message", {}).get("rendered")
        if rendered:
            sys.stderr.write(rendered)
    elif reason == "compiler-artifact" and msg.get("executable") and msg["profile"]["test"]:
        target = msg["target"]
        kinds = target["kind"]
        pkg_dir = os.path.dirname(msg["manifest_path"])
        pkg = os.path.basename(pkg_dir) if pkg_dir != os.getcwd() else "."
        if pkg == "kit":
            name = "kit"
        elif "test" in kinds and pkg == ".":
            name = target["name"]
        elif "lib" in kinds:
            name = "lib" if pkg == "." else pkg + "-lib"
        elif "bin" in kinds and pkg == ".":
            name = "bins"
        else:
            name = pkg + "-" + target["name"]
        out.append(f"{name} {pkg_dir} {msg['executable']}")
    elif reason == "build-finished" and not msg.get("success"):
        sys.exit(1)
with open(sys.argv[1], "w") as f:
    f.write("\n".join(out) + "\n")
