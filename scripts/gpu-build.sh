#!/usr/bin/env bash
# Build the release binary and the test executables into gpu/ (git-ignored), to carry
# to a GPU host that has no Rust: `gpu/keisan ...`, `gpu/tests/<name>`.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release
rm -rf gpu && mkdir -p gpu/tests
cp target/release/keisan gpu/
cargo test --release --no-run --message-format=json 2>/dev/null |
  python3 -c '
import json, sys, shutil
for line in sys.stdin:
    m = json.loads(line)
    exe = m.get("executable")
    if m.get("reason") == "compiler-artifact" and exe and m["profile"]["test"]:
        name = m["target"]["name"] if m["target"]["kind"] != ["lib"] else "lib"
        shutil.copy(exe, "gpu/tests/" + name)
'
cp scripts/gpu-*.sh gpu/
ls -la gpu gpu/tests
