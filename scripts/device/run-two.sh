#!/usr/bin/env bash
# Load runs on the 16-core device machine, per configuration (env and spine serve flags),
# each wrapped by cpuwrap.py (the server's CPU per thread group). Copy this and cpuwrap.py
# into .device/ after `bash ../shared/device/pack.sh`, then run `bash .device/run-two.sh [SECONDS]`
# carrying [".device"]. CFGS="ENV=V --flag …;ENV=V --flag …" chooses the configurations
# (default: `auto` and `--embed-precision f32`). After each run it prints what the run's writes
# waited for and held the embedded store's write connection (from /metrics).
set -u
OUT=${OUT:-$(mktemp -d)}; mkdir -p "$OUT"; exec > >(tee "$OUT/load.txt") 2>&1
S=${1:-10}
P=.device; W=/tmp/spw; B=$W/bin; M=$W/model; mkdir -p $B $M
python3 -c "import lzma,shutil; shutil.copyfileobj(lzma.open('$P/spine.xz'), open('$B/spine','wb'))" && chmod +x $B/spine
python3 - <<PY
import numpy as np
from safetensors.numpy import load_file, save_file
t = load_file("$P/model16.safetensors")
save_file({k: (v.astype(np.float32) if v.dtype == np.float16 else v) for k, v in t.items()}, "$M/model.safetensors")
PY
cp $P/config.json $P/tokenizer.json $M/
nproc; lscpu | grep 'Model name'; grep -o -w -E 'avx512_vnni|avx_vnni|amx_int8' /proc/cpuinfo | sort | uniq -c
L() { echo "== $*"; timeout 120 python3 $P/cpuwrap.py $SP -- python3 $P/rawload.py http://127.0.0.1:18080/mcp $P/docs.jsonl $P/queries.jsonl "$@"; W; }
# The write connection over the run just made, from /metrics: calls, mean wait and hold, in ms,
# and writes per committed batch.
W() { python3 - "$W/metrics.prev" <<'PY'
import json, re, sys, urllib.request
text = urllib.request.urlopen("http://127.0.0.1:18080/metrics").read().decode()
now = {f"{m[0]}_{m[2]}_{m[1]}": float(m[3]) for m in re.findall(
    r'^spine_store_write_(wait|hold)_seconds_(sum|count)\{kind="(\w+)"\} (\S+)$', text, re.M)}
now["batches"] = sum(float(v) for v in re.findall(r'^spine_store_write_batches_total (\S+)$', text, re.M))
try: prev = json.load(open(sys.argv[1]))
except OSError: prev = {}
json.dump(now, open(sys.argv[1], "w"))
d = lambda k: now.get(k, 0) - prev.get(k, 0)
out = {}
for kind in ("write", "touch"):
    n = d(f"wait_{kind}_count")
    if n:
        out[kind] = {"n": int(n), "wait_ms": round(d(f"wait_{kind}_sum") / n * 1e3, 3),
                     "hold_ms": round(d(f"hold_{kind}_sum") / n * 1e3, 3)}
if d("batches"):
    out["writes_per_batch"] = round(sum(o["n"] for o in out.values()) / d("batches"), 2)
print("write connection:", json.dumps(out))
PY
}
start() { rm -rf $W/data $W/metrics.prev; SPINE_LOG=info $B/spine serve --data-dir $W/data --listen 127.0.0.1:18080 --model-dir $M "$@" > $OUT/serve-$N.log 2>&1 & SP=$!
  python3 -c "
import time, urllib.request
for i in range(300):
    try: urllib.request.urlopen('http://127.0.0.1:18080/healthz'); break
    except Exception: time.sleep(0.2)"; grep -i "precision" $OUT/serve-$N.log | head -2; }
IFS=';' read -ra CFG <<< "${CFGS:-X=1 --embed-precision=auto;X=1 --embed-precision=f32}"
N=0; for cfg in "${CFG[@]}"; do
  N=$((N+1)); echo "#### $cfg"; export ${cfg%% *}; start ${cfg#* }
  T0=$(awk '{print $14+$15}' /proc/$SP/stat)
  L store1 1 $S; L store1 32 $S 4; L search1 1 $S; L search1 50 $S 4; L mix 50 $((2*S)) 4
  echo "server CPU ticks: $(( $(awk '{print $14+$15}' /proc/$SP/stat) - T0 ))"
  kill $SP; wait $SP 2>/dev/null; unset "${cfg%%=*}"
done
