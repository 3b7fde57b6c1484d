#!/usr/bin/env bash
# A throw-away PostgreSQL 15 + pgvector 0.8 on loopback, for trying Spine's PostgreSQL backend,
# for development and for CI. On Debian bookworm it installs what is missing (postgresql-15,
# postgresql-server-dev-15; bookworm has no pgvector, so it builds Debian trixie's pgvector
# source package), starts a cluster in a new /tmp/spine-pg.XXXXXX and prints only its URL on
# stdout; progress goes to stderr. A second run skips the install and the build.
#
#   export SPINE_DATABASE_URL=$(bash scripts/postgres.sh)   # postgres://postgres@127.0.0.1:PORT/spine
#   bash scripts/postgres.sh --port 55432                    # a given port (or SPINE_PG_PORT=55432)
#   bash scripts/postgres.sh stop [URL | DIR]                # stop that cluster (none given: all of them)
#
# The cluster trusts loopback connections (it is for tests only) and keeps fsync on.
set -euo pipefail

PG=15
BIN=/usr/lib/postgresql/$PG/bin
say() { echo "postgres.sh: $*" >&2; }
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
# PostgreSQL refuses to run as root: root runs it as the postgres user.
as_postgres() { (cd / && if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi); }

if [ "${1:-}" = stop ]; then
  target=${2:-}; target=${target%/}; target=${target%/data}
  for root in /tmp/spine-pg.*; do
    [ -d "$root/data" ] || continue
    if [ -z "$target" ] || [ "$target" = "$root" ] || [ "$target" = "$(cat "$root/url" 2>/dev/null)" ]; then
      as_postgres "$BIN/pg_ctl" -D "$root/data" -m fast stop >&2 || true
      rm -rf "$root"
    fi
  done
  exit 0
fi
port=${SPINE_PG_PORT:-}
if [ "${1:-}" = --port ]; then port=${2:?--port needs a number}; fi

# 1. PostgreSQL 15 and what building an extension needs.
missing=()
for pkg in postgresql-$PG postgresql-server-dev-$PG make gcc dpkg-dev; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
  say "installing ${missing[*]}"
  as_root apt-get update -qq >&2
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi

# 2. pgvector, built from Debian trixie's source package (deb-src only: no trixie binaries).
if [ ! -f "$($BIN/pg_config --pkglibdir)/vector.so" ] ||
   [ ! -f "$($BIN/pg_config --sharedir)/extension/vector.control" ]; then
  say "building pgvector from Debian trixie's source package"
  # The archive bookworm's own packages come from (not the security one), from apt's sources.
  uri=$(cat /etc/apt/sources.list.d/*.sources /etc/apt/sources.list 2>/dev/null | awk '
    /^(URIs:|deb )/ { for (i = 2; i <= NF; i++) if ($i ~ /^https?:\/\/.*\/debian\/?$/) { print $i; exit } }' || true)
  [ -n "$uri" ] || { say "no Debian archive found in apt's sources"; exit 1; }
  list=/etc/apt/sources.list.d/spine-pgvector-src.sources
  work=$(mktemp -d)
  if [ "$(id -u)" = 0 ]; then chown _apt "$work"; fi  # apt downloads as _apt
  trap 'as_root rm -f "$list"; rm -rf "$work"' EXIT
  printf 'Types: deb-src\nURIs: %s\nSuites: trixie\nComponents: main\nSigned-By: %s\n' \
    "$uri" /usr/share/keyrings/debian-archive-keyring.gpg | as_root tee "$list" >/dev/null
  # Refresh only that source; the other lists stay as they are.
  as_root apt-get update -qq -o Dir::Etc::SourceList="$list" -o Dir::Etc::SourceParts=- \
    -o APT::Get::List-Cleanup=0 >&2
  (cd "$work" && apt-get source --download-only -qq pgvector >&2)
  as_root rm -f "$list"
  dsc=$(ls "$work"/pgvector_*.dsc)
  version=$(basename "$dsc" .dsc); version=${version#pgvector_}; version=${version%-*}
  if dpkg --compare-versions "$version" lt 0.8; then say "pgvector $version is older than 0.8"; exit 1; fi
  mkdir "$work/src"
  tar -xf "$work"/pgvector_*.orig.tar.[gx]z -C "$work/src" --strip-components=1
  # OPTFLAGS="" leaves out -march=native: the build runs on any x86-64 machine.
  make -s -C "$work/src" OPTFLAGS="" PG_CONFIG="$BIN/pg_config" >&2
  as_root make -s -C "$work/src" OPTFLAGS="" PG_CONFIG="$BIN/pg_config" install >&2
  say "pgvector $version installed"
fi

# 3. A cluster in a new temporary directory, on 127.0.0.1 only.
if [ -z "$port" ]; then
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' 2>/dev/null) ||
    { port=55432; while (: <"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do port=$((port + 1)); done; }
fi
root=$(mktemp -d /tmp/spine-pg.XXXXXX)
chmod 755 "$root"
if [ "$(id -u)" = 0 ]; then chown postgres: "$root"; fi
as_postgres "$BIN/initdb" -D "$root/data" -U postgres --auth=trust -E UTF8 --locale=C.UTF-8 >/dev/null
as_postgres "$BIN/pg_ctl" -D "$root/data" -l "$root/log" -w -o "-c listen_addresses=127.0.0.1 -p $port \
  -k $root -c fsync=on -c max_connections=200" start >&2
as_postgres "$BIN/psql" -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$port" -U postgres -c "CREATE DATABASE spine" >&2
as_postgres "$BIN/psql" -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$port" -U postgres -d spine \
  -c "CREATE EXTENSION vector" >&2
url="postgres://postgres@127.0.0.1:$port/spine"
echo "$url" >"$root/url"
say "data directory: $root/data (log: $root/log)"
as=""; if [ "$(id -u)" = 0 ]; then as="runuser -u postgres -- "; fi
say "stop it with: bash scripts/postgres.sh stop $root   (or: $as$BIN/pg_ctl -D $root/data stop)"
echo "$url"
