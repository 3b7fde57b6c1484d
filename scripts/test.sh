#!/usr/bin/env bash
# Runs every test: fetches the model weights if missing, installs the client SDKs the
# conformance tests drive (the Python MCP SDK and Helm's SDK into target/pyenv; the
# TypeScript MCP SDK, the MCP Inspector, the Connect client with buf and protoc-gen-es, and
# playwright-core from tests/typescript/package-lock.json) and Debian's chromium, generates
# the Connect client's code from proto/, then starts a throw-away PostgreSQL + pgvector
# (scripts/postgres.sh), then runs the Rust tests (unit, service, end-to-end over stdio and
# HTTP, the Connect client, the web console in Chromium, two nodes on one PostgreSQL), both
# MCP SDK tests against the real binary and the Helm chart's tests (tests/helm, rendered by
# Helm's SDK); then the service tests and the end-to-end and both SDK tests once more on
# PostgreSQL.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/fetch-model.sh
# The chart's tests render it with Helm's Go SDK (helm-python-sdk: Debian has no helm binary)
# and validate the manifests against the Kubernetes schemas (kubernetes-validate).
if [ ! -x target/pyenv/bin/python ] \
    || ! target/pyenv/bin/python -c 'import mcp, helm_python, kubernetes_validate' 2>/dev/null; then
  python3 -m venv target/pyenv
  target/pyenv/bin/pip install --quiet --disable-pip-version-check \
    mcp==2.3.0 helm-python-sdk==0.2.2 kubernetes-validate==1.37.0
fi
if ! cmp -s tests/typescript/package-lock.json tests/typescript/node_modules/.installed-lock.json; then
  (cd tests/typescript && npm ci --no-audit --no-fund --loglevel=error \
    && cp package-lock.json node_modules/.installed-lock.json)
fi
(cd tests/typescript && rm -rf gen && PATH="$PWD/node_modules/.bin:$PATH" buf generate ../../proto)
# The console's browser tests drive Debian's Chromium with playwright-core (its own browser
# download cannot work here).
# The image test (crates/spine/tests/image.rs) builds the OCI image with Debian's buildah.
missing=()
[ -x "${SPINE_CHROMIUM:-/usr/bin/chromium}" ] || missing+=(chromium)
command -v buildah >/dev/null || missing+=(buildah)
# The server's allocator (jemalloc, built from its crate's sources) runs its configure
# script and make.
command -v make >/dev/null || missing+=(make)
if [ ${#missing[@]} -gt 0 ]; then
  sudo=(); [ "$(id -u)" = 0 ] || sudo=(sudo)
  "${sudo[@]}" apt-get update -qq
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi
# The PostgreSQL backend's tests need a server: a throw-away one (scripts/postgres.sh) unless
# SPINE_TEST_DATABASE_URL names one. SPINE_SKIP_POSTGRES=1 skips them (never in CI).
if [ -z "${SPINE_TEST_DATABASE_URL:-}" ] && [ -z "${SPINE_SKIP_POSTGRES:-}" ]; then
  SPINE_TEST_DATABASE_URL=$(bash scripts/postgres.sh)
  export SPINE_TEST_DATABASE_URL
  trap 'bash scripts/postgres.sh stop "$SPINE_TEST_DATABASE_URL"' EXIT
fi
# `cargo test` builds target/debug/spine too (the end-to-end tests run it); a separate
# `cargo build` first would compile the binary and its dependencies twice, once without the
# test build's dev-dependency features.
SPINE_REQUIRE_PYTHON=1 SPINE_REQUIRE_NODE=1 cargo test --workspace
target/pyenv/bin/python tests/python/sdk_client.py target/debug/spine
node tests/typescript/sdk_client.mjs target/debug/spine
target/pyenv/bin/python tests/helm/chart_test.py target/debug/spine
# run_integration CRATE [ARGS…]: runs CRATE's integration-test binary from the workspace
# build (no rebuild), in the crate's directory as `cargo test` does.
run_integration() {
  local crate=$1 exe
  shift
  exe=$(cargo test --workspace --no-run --message-format=json 2>/dev/null | python3 -c '
import json, os, sys
for line in sys.stdin:
    m = json.loads(line)
    t = m.get("target", {})
    if m.get("reason") == "compiler-artifact" and t.get("name") == "integration" \
            and os.path.basename(os.path.dirname(m["manifest_path"])) == sys.argv[1]:
        print(m["executable"])
' "$crate")
  [ -n "$exe" ] || { echo "no integration-test binary for $crate" >&2; return 1; }
  (cd "crates/$crate" && "$exe" "$@")
}
# A second build of the same tree compiles nothing: a build script that declares a file it
# writes itself as an input re-runs every time, and everything above its crate recompiles
# (spine-server's did, until 2026-12-01).
stale=$(cargo test --workspace --no-run --message-format=json 2>/dev/null | python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and not m.get("fresh"):
        print(m["target"]["name"])
')
if [ -n "$stale" ]; then
  echo "a second build of an unchanged tree compiled again:" $stale >&2
  exit 1
fi
if [ -n "${SPINE_TEST_DATABASE_URL:-}" ]; then
  # The service tests again, as the store contract's conformance suite on PostgreSQL, the
  # end-to-end suite, and both SDK suites with every server they start on PostgreSQL.
  # They run the test binaries the workspace build above made: `cargo test -p <crate>` would
  # resolve features for that crate alone and compile shared dependencies a second time.
  SPINE_TEST_BACKEND=postgres run_integration spine-service
  # The binary's end-to-end suite with every data directory standing for a fresh database
  # (the two-node tests in it already ran on PostgreSQL above).
  SPINE_TEST_BACKEND=postgres run_integration spine --skip postgres::
  SPINE_DATABASE_URL=$SPINE_TEST_DATABASE_URL target/pyenv/bin/python tests/python/sdk_client.py target/debug/spine
  SPINE_DATABASE_URL=$SPINE_TEST_DATABASE_URL node tests/typescript/sdk_client.mjs target/debug/spine
fi
