#!/usr/bin/env bash
# A throw-away PostgreSQL 15 + pgvector 0.8 on loopback, for trying Spine's PostgreSQL backend,
# for development and for CI. Installs what is missing (Debian bookworm: postgresql-15 and
# postgresql-server-dev-15; pgvector is built from Debian's source package, which bookworm
# lacks, so the trixie source is fetched), starts a cluster in a temporary directory and
# prints its URL on stdout — everything else goes to stderr:
#
#   export SPINE_DATABASE_URL=$(bash scripts/postgres.sh)     # postgres://postgres@127.0.0.1:PORT/spine
#   bash scripts/postgres.sh stop [URL]                        # stops that cluster (or all it started)
#
# The cluster trusts loopback connections (it is for tests), keeps fsync on, and lives in
# /tmp/spine-pg.*; `--port N` (or SPINE_PG_PORT) picks the port, otherwise a free one.
set -euo pipefail

PG=15
BIN=/usr/lib/postgresql/$PG/bin
say() { echo "postgres.sh: $*" >&2; }
as_postgres() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }

if [ "${1:-}" = stop ]; then
  for root in /tmp/spine-pg.*; do
    [ -d "$root/data" ] || continue
    if [ -z "${2:-}" ] || [ "$(cat "$root/url" 2>/dev/null)" = "$2" ]; then
      as_postgres "$BIN/pg_ctl" -D "$root/data" -m fast stop >&2 || true
      rm -rf "$root"
    fi
  done
  exit 0
fi
port=${SPINE_PG_PORT:-}
if [ "${1:-}" = --port ]; then port=$2; fi

sudo_apt() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
missing=()
for pkg in postgresql-$PG postgresql-server-dev-$PG make gcc; do
  dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
  say "installing ${missing[*]}"
  sudo_apt apt-get update -qq >&2
  sudo_apt env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi

if [ ! -f "/usr/share/postgresql/$PG/extension/vector.control" ]; then
  say "building pgvector from Debian's source package"
  # The archive URI bookworm's packages come from, used for one trixie deb-src line.
  uri=$(grep -hoE '^URIs: *[^ ]+' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -1 | awk '{print $2}')
  [ -n "$uri" ] || uri=$(grep -hoE '^deb +[^ ]+' /etc/apt/sources.list 2>/dev/null | head -1 | awk '{print $2}')
  list=/etc/apt/sources.list.d/spine-pgvector-src.list
  echo "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $uri trixie main" | sudo_apt tee "$list" >/dev/null
  sudo_apt apt-get update -qq >&2
  work=$(mktemp -d)
  (cd "$work" && apt-get source --download-only -qq pgvector >&2)
  sudo_apt rm -f "$list"
  sudo_apt apt-get update -qq >&2 || true
  tarball=$(ls "$work"/pgvector_*.orig.tar.* | head -1)
  mkdir "$work/src" && tar -xf "$tarball" -C "$work/src" --strip-components=1
  version=$(basename "$tarball" | sed -E 's/pgvector_([0-9.]+)\.orig.*/\1/')
  case "$version" in 0.[0-7].*) say "pgvector $version is older than 0.8"; exit 1 ;; esac
  make -s -C "$work/src" OPTFLAGS="" PG_CONFIG="$BIN/pg_config" >&2
  sudo_apt make -s -C "$work/src" OPTFLAGS="" PG_CONFIG="$BIN/pg_config" install >&2
  rm -rf "$work"
  say "pgvector $version installed"
fi

if [ -z "$port" ]; then
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
fi
root=$(mktemp -d /tmp/spine-pg.XXXXXX)
chmod 755 "$root"
[ "$(id -u)" = 0 ] && chown postgres: "$root"
as_postgres "$BIN/initdb" -D "$root/data" -U postgres --auth=trust -E UTF8 --locale=C.UTF-8 >/dev/null
as_postgres "$BIN/pg_ctl" -D "$root/data" -l "$root/log" -w \
  -o "-c listen_addresses=127.0.0.1 -p $port -k $root -c max_connections=200" start >&2
as_postgres "$BIN/psql" -q -h 127.0.0.1 -p "$port" -U postgres -c "CREATE DATABASE spine" >&2
as_postgres "$BIN/psql" -q -h 127.0.0.1 -p "$port" -U postgres -d spine -c "CREATE EXTENSION vector" >&2
url="postgres://postgres@127.0.0.1:$port/spine"
echo "$url" >"$root/url"
say "data in $root/data (log: $root/log); stop with: bash scripts/postgres.sh stop $url"
echo "$url"
