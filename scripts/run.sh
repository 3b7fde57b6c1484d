#!/usr/bin/env bash
# Fetches what is missing (model weights), builds spine and starts it on the embedded
# store: streamable HTTP MCP at http://127.0.0.1:8080/mcp. Extra arguments go to
# `spine serve` (e.g. --listen 127.0.0.1:9000, --data-dir ./data).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/fetch-model.sh
cargo build --release --bin spine
exec target/release/spine serve "$@"
