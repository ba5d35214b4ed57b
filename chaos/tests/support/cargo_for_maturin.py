#!/usr/bin/env python3
"""cargo, as maturin runs it ($CARGO) in chaos/tests/python_wheel.rs.

maturin compiles a binary with `cargo rustc`, and `cargo rustc --profile
test` builds the binary's unit tests (rustc's test harness), not the
binary. So `rustc` here builds nothing: it describes the binary `cargo
test` built (a copy: $AGENTCHAOS_BINARY) in the message cargo prints for a fresh
binary, with the package and target `cargo metadata` gives, and maturin
packs that. No cargo build runs while the tests do: a build re-links
target/debug's binaries, and a test starting one in that moment finds no
file. Any other command (`cargo metadata`) is cargo's ($AGENTCHAOS_CARGO).
"""

import json
import os
import subprocess
import sys

cargo = os.environ["AGENTCHAOS_CARGO"]
args = sys.argv[1:]
if args[:1] != ["rustc"]:
    os.execv(cargo, [cargo, *args])


def value(flag: str) -> str:
    if flag not in args or args.index(flag) + 1 == len(args):
        sys.exit(f"cargo_for_maturin.py: maturin ran `cargo rustc` without {flag}: {args}")
    return args[args.index(flag) + 1]


if value("--profile") != "test" or value("--bin") != "agentchaos":
    sys.exit(f"cargo_for_maturin.py: only `--profile test --bin agentchaos` is the tests' build: {args}")
# chaos/pyproject.toml's `strip = true`: the tests' binary is packed as it
# is (the test profile has no debug info to strip). Any other rustc flag
# would change the binary: refused, not ignored.
rustc_flags = args[args.index("--") + 1 :] if "--" in args else []
if rustc_flags not in ([], ["-C", "strip=symbols"]):
    sys.exit(f"cargo_for_maturin.py: rustc flags the tests' build was not made with: {rustc_flags}")
manifest = value("--manifest-path")
metadata = json.loads(
    subprocess.check_output([cargo, "metadata", "--format-version", "1", "--no-deps", "--manifest-path", manifest])
)
(package,) = (p for p in metadata["packages"] if p["manifest_path"] == os.path.realpath(manifest))
(target,) = (t for t in package["targets"] if (t["name"], t["kind"]) == ("agentchaos", ["bin"]))
binary = os.environ["AGENTCHAOS_BINARY"]
for message in (
    {
        "reason": "compiler-artifact",
        "package_id": package["id"],
        "manifest_path": package["manifest_path"],
        "target": target,
        "profile": {"opt_level": "1", "debuginfo": 0, "debug_assertions": True, "overflow_checks": True, "test": False},
        "features": [],
        "filenames": [binary],
        "executable": binary,
        "fresh": True,
    },
    {"reason": "build-finished", "success": True},
):
    print(json.dumps(message))
