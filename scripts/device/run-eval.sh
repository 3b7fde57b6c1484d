#!/usr/bin/env bash
# Recall at f32 and int8 on the eval corpora (code and prose), from .devq/ (pack-eval.sh). Run it
# in a call carrying [".devq"] right after run-two.sh on the same warm machine: it reads the
# model run-two.sh left in /tmp/spw/model (.device/ itself is removed there by such a call).
set -u
OUT=${OUT:-$(mktemp -d)}; mkdir -p "$OUT"; exec > >(tee "$OUT/eval.txt") 2>&1
Q=.devq; P=.device; W=/tmp/spq; M=$W/model; mkdir -p $W/bin $M $W/cargo/registry/src/local
python3 -c "import lzma,shutil; shutil.copyfileobj(lzma.open('$Q/spine-bench.xz'), open('$W/bin/spine-bench','wb'))" && chmod +x $W/bin/spine-bench
[ -f /tmp/spw/model/model.safetensors ] && M=/tmp/spw/model || exit 3
ls -la $M
tar -xJf $Q/crates.tar.xz -C $W/cargo/registry/src/local
python3 -c "import lzma,shutil; shutil.copyfileobj(lzma.open('$Q/translations.xz'), open('$W/tr','wb'))"
D=${EVAL_LOCK_DIR:-/work/main}; mkdir -p $D/crates/spine-bench; [ -f $D/Cargo.lock ] || cp Cargo.lock $D/
export SPINE_MODEL_DIR=$M CARGO_HOME=$W/cargo SPINE_BENCH_TRANSLATIONS=$W/tr SPINE_LOG=warn
for p in int8 f32; do for c in code prose; do
  echo "#### $p $c"; a=; [ $c = prose ] && a=prose
  SPINE_EMBED_PRECISION=$p timeout 200 $W/bin/spine-bench eval $a ${EVAL_N:-} 2>&1 | grep -v "^\s*$" | tail -12
done; done
