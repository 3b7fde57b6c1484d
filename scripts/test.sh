#!/usr/bin/env bash
# Runs every test: fetches the model weights if missing, installs the Python MCP SDK used by
# the client conformance test into target/pyenv, then runs the Rust tests (unit, service,
# end-to-end over stdio and HTTP) and the Python SDK test.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/fetch-model.sh
if [ ! -x target/pyenv/bin/python ] || ! target/pyenv/bin/python -c 'import mcp' 2>/dev/null; then
  python3 -m venv target/pyenv
  target/pyenv/bin/pip install --quiet --disable-pip-version-check mcp==2.3.0
fi
cargo build --bin spine
SPINE_REQUIRE_PYTHON=1 cargo test --workspace
target/pyenv/bin/python tests/python/sdk_client.py target/debug/spine
