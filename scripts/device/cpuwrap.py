"""cpuwrap.py PID -- CMD...: runs CMD, prints the server's CPU seconds by thread group over it
(from /proc/PID/task/*/stat), the children's (client) CPU, CPU-ms per call, and the server's
context switches per call (/proc/PID/task/*/status): voluntary ones are waits (a lock, a
channel, I/O), involuntary ones preemptions; and its page faults per call (/proc/PID/stat:
a reader that maps the database refaults its pages after every commit it sees)."""
import json, os, re, resource, subprocess, sys, time
pid = int(sys.argv[1]); cmd = sys.argv[sys.argv.index("--") + 1:]
tick = os.sysconf("SC_CLK_TCK")
def snap():
    out = {}
    for t in os.listdir(f"/proc/{pid}/task"):
        try:
            s = open(f"/proc/{pid}/task/{t}/stat").read()
        except OSError:
            continue
        comm = s[s.index("(") + 1:s.rindex(")")]
        f = s[s.rindex(")") + 2:].split()
        out[t] = (re.sub(r"[-_]?\d+$", "", comm), int(f[11]) + int(f[12]))
    return out
def switches():
    out = [0, 0]
    for t in os.listdir(f"/proc/{pid}/task"):
        try:
            for l in open(f"/proc/{pid}/task/{t}/status"):
                if l.startswith("voluntary_ctxt_switches:"):
                    out[0] += int(l.split()[1])
                elif l.startswith("nonvoluntary_ctxt_switches:"):
                    out[1] += int(l.split()[1])
        except OSError:
            continue
    return out
def faults():
    s = open(f"/proc/{pid}/stat").read()
    f = s[s.rindex(")") + 2:].split()
    return int(f[7]) + int(f[9])
w0, f0 = switches(), faults()
a, t0 = snap(), time.time()
c0 = resource.getrusage(resource.RUSAGE_CHILDREN)
p = subprocess.run(cmd, capture_output=True, text=True)
b, t1 = snap(), time.time()
w1, f1 = switches(), faults()
c1 = resource.getrusage(resource.RUSAGE_CHILDREN)
groups = {}
for t, (name, v) in b.items():
    groups[name] = groups.get(name, 0) + v - a.get(t, (name, 0))[1]
# threads that ended during the run are lost; count what we can
line = p.stdout.strip().splitlines()[-1] if p.stdout.strip() else "{}"
print(line)
try:
    r = json.loads(line); calls = sum(x["n"] for x in r["tools"].values())
except Exception:
    calls = 0
wall = t1 - t0
srv = sum(groups.values()) / tick
cli = (c1.ru_utime + c1.ru_stime) - (c0.ru_utime + c0.ru_stime)
g = {k: round(v / tick, 2) for k, v in sorted(groups.items(), key=lambda kv: -kv[1]) if v > 0}
print(json.dumps({"wall_s": round(wall, 1), "server_cpu_s": round(srv, 2), "server_cores": round(srv / wall, 2),
  "client_cpu_s": round(cli, 2), "calls": calls,
  "server_cpu_ms_per_call": round(1000 * srv / calls, 2) if calls else None,
  "cpu_ms_per_call_by_group": {k: round(1000 * v / calls, 2) for k, v in g.items()} if calls else g,
  # threads that ended during the run are lost here too
  "switches_per_call": {"voluntary": round((w1[0] - w0[0]) / calls, 1),
                        "involuntary": round((w1[1] - w0[1]) / calls, 1)} if calls else None,
  "faults_per_call": round((f1 - f0) / calls, 1) if calls else None}))
if p.returncode: print(p.stderr[-2000:])
