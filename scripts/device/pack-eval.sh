#!/usr/bin/env bash
# Packs .devq/ for `spine-bench eval` on the 16-core device machine (no Rust, no apt lists,
# no crate sources there): the stripped spine-bench (xz), the code corpus's crate sources at
# their Cargo.lock versions, and Debian's English descriptions, uncompressed then xz'd.
# From the project root: bash scripts/device/pack-eval.sh; then, right after a run that
# carried .device (its model is read from /tmp/spw/model, which run-two.sh leaves there):
# run `bash .devq/run-eval.sh` carrying [".devq"]. Each piece is too big to travel with
# .device in one call (64 MiB), hence two calls on one warm machine.
set -euo pipefail
Q=.devq
grep -qx '/.devq/' .git/info/exclude 2>/dev/null || echo '/.devq/' >> .git/info/exclude
mkdir -p "$Q"
cargo build --release -q -p spine-bench
strip -o "$Q/spine-bench" target/release/spine-bench && xz -T0 -6 -f "$Q/spine-bench"
crates=$(sed -n '/^pub const CRATES/,/^];/p' crates/spine-bench/src/corpus/mod.rs | grep -o '"[^"]*"' | tr -d '"')
(cd "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/ && for c in $crates; do
   v=$(awk -v n="$c" '$0=="name = \""n"\"" {getline; gsub(/version = |"/, ""); print; exit}' "$OLDPWD/Cargo.lock")
   echo "$c-$v/src"; done | xargs tar -cf - ) | xz -T0 -9 > "$Q/crates.tar.xz"
f=$(ls -S /var/lib/apt/lists/*_main_i18n_Translation-en* | grep -v -e security -e -updates | head -1)
/usr/lib/apt/apt-helper cat-file "$f" | xz -T0 -6 > "$Q/translations.xz"
cp scripts/device/run-eval.sh "$Q/"
du -sh "$Q"
