#!/usr/bin/env bash
# Builds Spine's OCI image with Debian's buildah (installed when missing), FROM scratch: no
# shell, no package manager — the `spine` binary, exactly the shared libraries it links, CA
# certificates, /etc/passwd and /etc/group naming user `spine` (10001:10001), the built-in
# model with its licence, an empty /data and /tmp. Nothing is pulled: a scratch image needs
# no base image.
#
# usage: bash scripts/image.sh [--binary PATH] [--tag TAG] [--output FILE]
#   --binary  the spine binary to ship (default: target/release/spine, built first)
#   --tag     the image's ref name in the archive (default: the crate version)
#   --output  the oci-archive to write (default: target/image/spine.oci.tar)
# The source label is $SPINE_IMAGE_SOURCE, else the git remote "origin".
# Prints the manifest digest and the archive's size. Load it with e.g.
#   skopeo copy oci-archive:target/image/spine.oci.tar docker-daemon:spine:0.1.0
#   podman load -i target/image/spine.oci.tar
set -euo pipefail
cd "$(dirname "$0")/.."

binary="" tag="" output="target/image/spine.oci.tar"
while [ $# -gt 0 ]; do
  case "$1" in
    --binary) binary=$2; shift 2 ;;
    --tag) tag=$2; shift 2 ;;
    --output) output=$2; shift 2 ;;
    -h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "image.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

version=$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' Cargo.toml)
tag=${tag:-$version}
if [ -z "$binary" ]; then
  cargo build --release -p spine
  binary=target/release/spine
fi
[ -x "$binary" ] || { echo "image.sh: $binary is not an executable" >&2; exit 1; }

if ! command -v buildah >/dev/null; then
  sudo=(); [ "$(id -u)" = 0 ] || sudo=(sudo)
  "${sudo[@]}" apt-get update -qq
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq buildah >/dev/null
fi
# vfs: works in any container or VM, without overlay mounts or privileges beyond root's.
export STORAGE_DRIVER=${STORAGE_DRIVER:-vfs}

model_dir="${SPINE_MODEL_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/spine/models/all-MiniLM-L6-v2}"
SPINE_MODEL_DIR=$model_dir bash scripts/fetch-model.sh >/dev/null

root=$(mktemp -d)
ctr=""
cleanup() {
  [ -n "$ctr" ] && buildah rm "$ctr" >/dev/null 2>&1 || true
  rm -rf "$root" "$root.owned"
}
trap cleanup EXIT

# The file tree, assembled here and copied in once.
install -D -m 0755 "$binary" "$root/usr/local/bin/spine"
# Exactly the shared libraries the binary links (ldd's resolved paths, the loader included).
ldd "$binary" | awk '/=> \//{print $3} /^[ \t]*\/[^ ]+ \(/{print $1}' | sort -u | while read -r lib; do
  install -D -m 0755 "$(readlink -f "$lib")" "$root$lib"
done
install -D -m 0644 /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt"
printf 'root:x:0:0:root:/root:/sbin/nologin\nspine:x:10001:10001:spine:/data:/sbin/nologin\n' \
  >"$root/etc/passwd"
printf 'root:x:0:\nspine:x:10001:\n' >"$root/etc/group"
chmod 0644 "$root/etc/passwd" "$root/etc/group"
model=/usr/share/spine/models/all-MiniLM-L6-v2
for f in config.json tokenizer.json model.safetensors; do
  install -D -m 0644 "$model_dir/$f" "$root$model/$f"
done
install -D -m 0644 /usr/share/common-licenses/Apache-2.0 "$root$model/LICENSE"
cat >"$root$model/NOTICE" <<'EOF'
all-MiniLM-L6-v2 (sentence-transformers), licensed under the Apache License 2.0 (LICENSE).
EOF
install -d -m 1777 "$root/tmp"
# /data apart: copied with its owner set to spine (buildah copy makes everything else root's).
owned=$root.owned
install -d -m 0750 "$owned/data"

revision=$(git rev-parse HEAD 2>/dev/null || echo unknown)
source_url=${SPINE_IMAGE_SOURCE:-$(git remote get-url origin 2>/dev/null || echo unknown)}
ctr=$(buildah from scratch)
buildah copy --quiet "$ctr" "$root" / >/dev/null
buildah copy --quiet --chown 10001:10001 "$ctr" "$owned" / >/dev/null
buildah config \
  --user 10001:10001 \
  --workingdir /data \
  --entrypoint '["/usr/local/bin/spine"]' \
  --cmd serve \
  --env SPINE_LISTEN=0.0.0.0:8080 \
  --env SPINE_DATA_DIR=/data \
  --env SPINE_MODEL_DIR=$model \
  --env SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt \
  --port 8080/tcp \
  --label org.opencontainers.image.title=spine \
  --label "org.opencontainers.image.description=Spine, a memory service for software agents (MCP)" \
  --label "org.opencontainers.image.version=$version" \
  --label "org.opencontainers.image.revision=$revision" \
  --label "org.opencontainers.image.source=$source_url" \
  --label org.opencontainers.image.licenses=Apache-2.0 \
  "$ctr"
mkdir -p "$(dirname "$output")"
rm -f "$output"
buildah commit --quiet --format oci --disable-compression=false --rm "$ctr" "oci-archive:$output:$tag" >/dev/null
ctr=""
digest=$(tar -xOf "$output" index.json | python3 -c 'import json,sys; print(json.load(sys.stdin)["manifests"][0]["digest"])')
size=$(stat -c %s "$output")
echo "image: $output ($tag)"
echo "digest: $digest"
echo "size: $size bytes ($((size / 1024 / 1024)) MiB)"
