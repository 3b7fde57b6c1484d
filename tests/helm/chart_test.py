"""The Helm chart (deploy/helm/spine), rendered by Helm's own Go SDK.

Usage: python chart_test.py path/to/spine

Renders the chart with `helm_python` (Helm's SDK behind a C ABI: Debian has no helm binary)
for each mode and the value sets below, lints it, validates every manifest against the
Kubernetes schemas (`kubernetes_validate`, 1.30 and the newest it knows), and asserts the
chart's rules: probes, security contexts, one replica on the embedded store, an auth choice,
the database Secret reference, PDB/HPA/ServiceMonitor/Ingress only when asked. Every
`helm install` / `helm upgrade` command in docs/deploy.md is rendered too. Last, the rendered
container is started as a process (its args and env, with the test's data directory, port
and database): its probes answer, the Service's name passes the Host check and another does
not, and the metrics port serves Prometheus text to a scraper addressing the pod by IP — on
SQLite, and on PostgreSQL when SPINE_TEST_DATABASE_URL is set (required when CI is set).
"""

import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
import tomllib
import unittest
import urllib.error
import urllib.request
from pathlib import Path

import helm_python as helm
import kubernetes_validate
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "spine"
SPINE = None  # the binary, from argv
RELEASE, NAMESPACE = "spine", "memory"
PG = {"database": {"existingSecret": "spine-db", "secretKey": "url"}}
OPEN = {"allowUnauthenticated": True}
OIDC = {"oidc": {"issuer": "https://id.example.com", "audience": "spine"}}
# The value sets every general check runs over: name → values.
VALUE_SETS = {
    "embedded": OPEN,
    "embedded-oidc-everything": {
        **OIDC,
        "persistence": {"size": "50Gi", "storageClass": "fast"},
        "ingress": {"enabled": True, "className": "nginx", "hosts": [{"host": "spine.corp.example", "paths": [{"path": "/", "pathType": "Prefix"}]}], "tls": [{"hosts": ["spine.corp.example"], "secretName": "spine-tls"}]},
        "metrics": {"serviceMonitor": {"enabled": True, "labels": {"release": "prom"}}},
        "extraEnv": [{"name": "RUST_LOG", "value": "info"}],
        "otel": {"endpoint": "http://otel-collector.observability:4318"},
    },
    "postgres": {**PG, **OPEN},
    "postgres-three": {**PG, **OIDC, "replicaCount": 3},
    "postgres-one": {**PG, **OPEN, "replicaCount": 1},
    "postgres-autoscaling": {**PG, **OIDC, "autoscaling": {"enabled": True, "minReplicas": 2, "maxReplicas": 5}, "metrics": {"serviceMonitor": {"enabled": True}}},
}
KUBE_VERSIONS = ["1.30", kubernetes_validate.utils.latest_version()]


def render(values, name=RELEASE):
    """The chart rendered offline: ({kind/name: manifest}, NOTES.txt)."""
    chart = helm.Chart.load(CHART)
    out = chart.render(values, name=name, namespace=NAMESPACE, is_install=True)
    manifests, notes = {}, ""
    for path, text in out.items():
        if path.endswith("NOTES.txt"):
            notes = text
            continue
        for doc in yaml.safe_load_all(text):
            if doc:
                key = f"{doc['kind']}/{doc['metadata']['name']}"
                assert key not in manifests, f"{key} rendered twice"
                manifests[key] = doc
    return manifests, notes


def render_error(values):
    try:
        render(values)
    except helm.HelmError as e:
        return str(e)
    raise AssertionError(f"rendering {values} succeeded")


def kinds(manifests):
    return sorted(k.split("/")[0] for k in manifests)


def workload(manifests):
    (w,) = [m for m in manifests.values() if m["kind"] in ("StatefulSet", "Deployment")]
    return w


def container(manifests):
    (c,) = workload(manifests)["spec"]["template"]["spec"]["containers"]
    return c


def env(c):
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in c["env"]}


def merge(*dicts):
    out = {}
    for d in dicts:
        for k, v in d.items():
            out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def docs_commands():
    """(command line, values) for every `helm install`/`helm upgrade` in docs/deploy.md."""
    text = (ROOT / "docs" / "deploy.md").read_text()
    lines = re.sub(r"\\\n\s*", " ", text).splitlines()
    out = []
    for line in lines:
        line = line.split("#", 1)[0].strip()
        if not re.match(r"^helm (install|upgrade)\b", line):
            continue
        words = shlex.split(line)
        values = {}
        i = 0
        while i < len(words):
            w = words[i]
            if w in ("--set", "--set-string", "-f", "--values"):
                arg = words[i + 1]
                if w == "--set":
                    values = merge(values, helm.parse_set_string(arg))
                elif w == "--set-string":
                    values = merge(values, helm.parse_set_string_values(arg))
                else:
                    values = merge(values, yaml.safe_load((ROOT / arg).read_text()))
                i += 2
                continue
            i += 1
        assert "deploy/helm/spine" in words, f"{line}: not the chart at deploy/helm/spine"
        out.append((line, values))
    return out


class Chart(unittest.TestCase):
    def test_metadata_names_the_crate_version(self):
        meta = yaml.safe_load((CHART / "Chart.yaml").read_text())
        crate = tomllib.loads((ROOT / "Cargo.toml").read_text())["workspace"]["package"]["version"]
        self.assertEqual(meta["name"], "spine")
        self.assertEqual(meta["apiVersion"], "v2")
        self.assertEqual(meta["appVersion"], crate)
        for f in ("values.schema.json", "templates/NOTES.txt"):
            self.assertTrue((CHART / f).is_file(), f)

    def test_lint_finds_nothing_wrong(self):
        for name, values in VALUE_SETS.items():
            with self.subTest(name):
                report = helm.lint(CHART, values, strict=True, kube_version="v1.30.0")
                self.assertEqual(report["errors"], [])
                serious = [m for m in report["messages"] if m["severity"] >= 2]
                self.assertEqual(serious, [])

    def test_every_manifest_is_valid_kubernetes(self):
        for name, values in VALUE_SETS.items():
            manifests, _ = render(values)
            services = [m for m in manifests.values() if m["kind"] == "Service"]
            for key, m in manifests.items():
                with self.subTest(name=name, manifest=key):
                    self.assertEqual(m["metadata"]["labels"]["app.kubernetes.io/name"], "spine")
                    if m["kind"] == "ServiceMonitor":
                        # A CRD (the Prometheus Operator's): no schema in the Kubernetes set.
                        self.assertEqual(m["apiVersion"], "monitoring.coreos.com/v1")
                        (ep,) = m["spec"]["endpoints"]
                        self.assertEqual(ep["path"], "/metrics")
                        ports = [p["name"] for s in services for p in s["spec"]["ports"]]
                        self.assertIn(ep["port"], ports)
                        selector = m["spec"]["selector"]["matchLabels"]
                        self.assertTrue(any(selector.items() <= s["metadata"]["labels"].items() for s in services))
                        continue
                    for v in KUBE_VERSIONS:
                        kubernetes_validate.validate(m, v, strict=True)

    def test_embedded_is_one_statefulset_pod_with_its_volume(self):
        manifests, notes = render(OPEN)
        self.assertEqual(kinds(manifests), ["Service", "Service", "ServiceAccount", "StatefulSet"])
        sts = manifests["StatefulSet/spine"]
        self.assertEqual(sts["spec"]["replicas"], 1)
        self.assertEqual(sts["spec"]["serviceName"], "spine-headless")
        self.assertIn("Service/spine-headless", manifests)
        (claim,) = sts["spec"]["volumeClaimTemplates"]
        self.assertEqual(claim["spec"]["resources"]["requests"]["storage"], "10Gi")
        self.assertNotIn("storageClassName", claim["spec"])
        c = container(manifests)
        self.assertEqual(c["args"], ["serve"])
        self.assertEqual(env(c)["SPINE_DATA_DIR"], "/data")
        self.assertNotIn("SPINE_DATABASE_URL", env(c))
        self.assertEqual(c["volumeMounts"], [{"name": claim["metadata"]["name"], "mountPath": "/data"}])
        self.assertIn("embedded mode", notes)

        manifests, _ = render(merge(OPEN, {"persistence": {"size": "3Gi", "storageClass": "local-ssd"}, "replicaCount": 1}))
        (claim,) = manifests["StatefulSet/spine"]["spec"]["volumeClaimTemplates"]
        self.assertEqual(claim["spec"]["resources"]["requests"]["storage"], "3Gi")
        self.assertEqual(claim["spec"]["storageClassName"], "local-ssd")

    def test_embedded_refuses_more_than_one_replica(self):
        for extra in ({"replicaCount": 2}, {"replicaCount": 5}, {"autoscaling": {"enabled": True}}):
            with self.subTest(extra):
                message = render_error(merge(OPEN, extra))
                self.assertIn("PostgreSQL", message)
                self.assertIn("exactly 1 replica", message)

    def test_an_auth_choice_is_required(self):
        for values in ({}, {"allowUnauthenticated": False}, PG):
            with self.subTest(values):
                message = render_error(values)
                self.assertIn("oidc.issuer", message)
                self.assertIn("allowUnauthenticated=true", message)
        self.assertIn("oidc.audience is required", render_error({"oidc": {"issuer": "https://id.example.com"}}))
        self.assertIn("oidc.issuer is required", render_error(merge(OPEN, {"oidc": {"audience": "spine"}})))

        e = env(container(render(merge(OIDC, {"oidc": {"ownerClaim": "sub", "consoleClientId": "console"}}))[0]))
        self.assertEqual(e["SPINE_OIDC_ISSUER"], "https://id.example.com")
        self.assertEqual(e["SPINE_OIDC_AUDIENCE"], "spine")
        self.assertEqual(e["SPINE_OWNER_CLAIM"], "sub")
        self.assertEqual(e["SPINE_CONSOLE_CLIENT_ID"], "console")
        self.assertNotIn("SPINE_ALLOW_UNAUTHENTICATED", e)
        e = env(container(render(OPEN)[0]))
        self.assertEqual(e["SPINE_ALLOW_UNAUTHENTICATED"], "true")
        self.assertNotIn("SPINE_OIDC_ISSUER", e)

    def test_postgres_is_a_deployment_of_stateless_nodes(self):
        manifests, notes = render(merge(PG, OPEN))
        self.assertEqual(kinds(manifests), ["Deployment", "PodDisruptionBudget", "Service", "ServiceAccount"])
        dep = manifests["Deployment/spine"]
        self.assertEqual(dep["spec"]["replicas"], 2)
        c = container(manifests)
        self.assertEqual(c["args"], ["serve", "--stateless"])
        self.assertEqual(env(c)["SPINE_DATABASE_URL"], {"secretKeyRef": {"name": "spine-db", "key": "url"}})
        self.assertNotIn("SPINE_DATA_DIR", env(c))
        self.assertNotIn("volumeMounts", c)
        self.assertNotIn("volumes", dep["spec"]["template"]["spec"])
        pdb = manifests["PodDisruptionBudget/spine"]
        self.assertEqual(pdb["spec"]["minAvailable"], 1)
        self.assertEqual(pdb["spec"]["selector"]["matchLabels"], dep["spec"]["selector"]["matchLabels"])
        self.assertIn("PostgreSQL mode, 2 stateless node(s)", notes)

        manifests, _ = render(merge(PG, OPEN, {"database": {"secretKey": "dsn"}, "replicaCount": 3}))
        self.assertEqual(manifests["Deployment/spine"]["spec"]["replicas"], 3)
        self.assertEqual(env(container(manifests))["SPINE_DATABASE_URL"]["secretKeyRef"]["key"], "dsn")
        manifests, _ = render(merge(PG, OPEN, {"replicaCount": 1}))
        self.assertEqual(kinds(manifests), ["Deployment", "Service", "ServiceAccount"])
        self.assertIn("database.secretKey", render_error(merge(PG, OPEN, {"database": {"secretKey": ""}})))

    def test_autoscaling_is_an_hpa_on_postgres(self):
        values = merge(PG, OPEN, {"autoscaling": {"enabled": True, "minReplicas": 2, "maxReplicas": 7, "targetCPUUtilizationPercentage": 60}})
        manifests, _ = render(values)
        self.assertEqual(kinds(manifests), ["Deployment", "HorizontalPodAutoscaler", "PodDisruptionBudget", "Service", "ServiceAccount"])
        hpa = manifests["HorizontalPodAutoscaler/spine"]["spec"]
        self.assertEqual((hpa["minReplicas"], hpa["maxReplicas"]), (2, 7))
        self.assertEqual(hpa["scaleTargetRef"], {"apiVersion": "apps/v1", "kind": "Deployment", "name": "spine"})
        self.assertEqual(hpa["metrics"][0]["resource"]["target"]["averageUtilization"], 60)
        # The HPA owns the size: a fixed replicas field would fight it on every upgrade.
        self.assertNotIn("replicas", manifests["Deployment/spine"]["spec"])
        manifests, _ = render(merge(values, {"autoscaling": {"minReplicas": 1}}))
        self.assertNotIn("PodDisruptionBudget/spine", manifests)
        self.assertIn("must not exceed", render_error(merge(values, {"autoscaling": {"minReplicas": 8}})))

    def test_security_context_probes_and_resources(self):
        for name, values in VALUE_SETS.items():
            with self.subTest(name):
                manifests, _ = render(values)
                pod = workload(manifests)["spec"]["template"]["spec"]
                psc = pod["securityContext"]
                self.assertIs(psc["runAsNonRoot"], True)
                self.assertEqual((psc["runAsUser"], psc["runAsGroup"], psc["fsGroup"]), (10001, 10001, 10001))
                self.assertEqual(psc["seccompProfile"], {"type": "RuntimeDefault"})
                self.assertIs(pod["automountServiceAccountToken"], False)
                c = container(manifests)
                sc = c["securityContext"]
                self.assertIs(sc["runAsNonRoot"], True)
                self.assertEqual(sc["runAsUser"], 10001)
                self.assertIs(sc["readOnlyRootFilesystem"], True)
                self.assertIs(sc["allowPrivilegeEscalation"], False)
                self.assertEqual(sc["capabilities"], {"drop": ["ALL"]})
                self.assertEqual(sc["seccompProfile"], {"type": "RuntimeDefault"})
                ports = {p["name"]: p["containerPort"] for p in c["ports"]}
                self.assertEqual(ports["http"], 8080)
                self.assertEqual(env(c)["SPINE_LISTEN"], "0.0.0.0:8080")
                self.assertEqual(env(c)["SPINE_METRICS_LISTEN"], f"0.0.0.0:{ports['metrics']}")
                self.assertEqual(c["livenessProbe"]["httpGet"], {"path": "/healthz", "port": "http"})
                self.assertEqual(c["readinessProbe"]["httpGet"], {"path": "/readyz", "port": "http"})
                self.assertEqual(c["startupProbe"]["httpGet"], {"path": "/readyz", "port": "http"})
                startup = c["startupProbe"]["periodSeconds"] * c["startupProbe"]["failureThreshold"]
                self.assertGreaterEqual(startup, 60, "the model must have a minute to load")
                self.assertIn("memory", c["resources"]["requests"])
                self.assertIn("cpu", c["resources"]["requests"])
                self.assertIn("memory", c["resources"]["limits"])
                self.assertGreater(pod["terminationGracePeriodSeconds"], 10, "Spine drains for up to 10 s")
                image = c["image"]
                self.assertEqual(image, "spine:0.1.0" if "image" not in values else image)

    def test_ingress_service_monitor_only_when_asked(self):
        manifests, _ = render(OPEN)
        self.assertFalse([k for k in manifests if k.split("/")[0] in ("Ingress", "ServiceMonitor", "HorizontalPodAutoscaler", "PodDisruptionBudget")])
        manifests, notes = render(VALUE_SETS["embedded-oidc-everything"])
        ing = manifests["Ingress/spine"]["spec"]
        self.assertEqual(ing["ingressClassName"], "nginx")
        self.assertEqual(ing["tls"], [{"hosts": ["spine.corp.example"], "secretName": "spine-tls"}])
        backend = ing["rules"][0]["http"]["paths"][0]["backend"]["service"]
        self.assertEqual(backend, {"name": "spine", "port": {"name": "http"}})
        hosts = env(container(manifests))["SPINE_ALLOWED_HOSTS"].split(",")
        self.assertEqual(hosts, ["spine", "spine.memory", "spine.memory.svc", "spine.memory.svc.cluster.local", "spine.corp.example"])
        self.assertIn("https://spine.corp.example/mcp", notes)
        sm = manifests["ServiceMonitor/spine"]
        self.assertEqual(sm["metadata"]["labels"]["release"], "prom")
        self.assertEqual(sm["spec"]["namespaceSelector"], {"matchNames": [NAMESPACE]})
        self.assertEqual(env(container(manifests))["RUST_LOG"], "info")
        e = env(container(render(merge(OPEN, {"allowedHosts": ["mem.internal"], "allowedOrigins": ["https://app.example"]}))[0]))
        self.assertTrue(e["SPINE_ALLOWED_HOSTS"].endswith(",mem.internal"))
        self.assertEqual(e["SPINE_ALLOWED_ORIGINS"], "https://app.example")

    def test_otel_export_names_the_pod_only_when_asked(self):
        manifests, _ = render(OPEN)
        self.assertFalse([k for k in env(container(manifests)) if k.startswith("OTEL_")])
        values = merge(OPEN, {"otel": {"endpoint": "http://collector.obs:4317", "protocol": "grpc",
                                       "resourceAttributes": {"deployment.environment.name": "prod"}}})
        manifests, _ = render(values)
        e = env(container(manifests))
        self.assertEqual(e["OTEL_EXPORTER_OTLP_ENDPOINT"], "http://collector.obs:4317")
        self.assertEqual(e["OTEL_EXPORTER_OTLP_PROTOCOL"], "grpc")
        self.assertEqual(e["OTEL_SERVICE_NAME"], "spine")
        self.assertEqual(e["SPINE_POD_NAME"], {"fieldRef": {"fieldPath": "metadata.name"}})
        self.assertEqual(
            e["OTEL_RESOURCE_ATTRIBUTES"],
            "k8s.pod.name=$(SPINE_POD_NAME),k8s.namespace.name=$(SPINE_POD_NAMESPACE),"
            "k8s.node.name=$(SPINE_NODE_NAME),service.instance.id=$(SPINE_POD_NAME),"
            "deployment.environment.name=prod",
        )
        # Kubernetes expands $(VAR) only from variables defined before it.
        names = [v["name"] for v in container(manifests)["env"]]
        self.assertLess(names.index("SPINE_NODE_NAME"), names.index("OTEL_RESOURCE_ATTRIBUTES"))
        self.assertIn("otel", render_error(merge(OPEN, {"otel": {"protocol": "http/json"}})))

    def test_names_follow_the_release(self):
        manifests, _ = render(OPEN, name="team-a")
        self.assertIn("StatefulSet/team-a-spine", manifests)
        manifests, _ = render(merge(OPEN, {"fullnameOverride": "memory"}), name="x")
        self.assertIn("Service/memory", manifests)
        self.assertTrue(env(container(manifests))["SPINE_ALLOWED_HOSTS"].startswith("memory,memory.memory,"))

    def test_schema_refuses_bad_values(self):
        for bad, where in (
            ({"replicaCount": "two"}, "/replicaCount"),
            ({"replicaCount": 0}, "/replicaCount"),
            ({"replicaCuont": 2}, "replicaCuont"),
            ({"persistence": {"size": "lots"}}, "/persistence/size"),
            ({"metrics": {"port": 8080}}, "/metrics/port"),
            ({"oidc": {"issuer": "id.example.com", "audience": "a"}}, "/oidc/issuer"),
            ({"allowUnauthenticated": "yes"}, "/allowUnauthenticated"),
            ({"image": {"pullPolicy": "Sometimes"}}, "/image/pullPolicy"),
            ({"extraEnv": [{"value": "x"}]}, "/extraEnv/0"),
        ):
            with self.subTest(bad):
                message = render_error(merge(OPEN, bad))
                self.assertIn("schema", message)
                self.assertIn(where, message)

    def test_the_commands_in_docs_deploy_md_render(self):
        commands = docs_commands()
        self.assertGreaterEqual(len(commands), 2, "docs/deploy.md installs each mode")
        modes = set()
        for line, values in commands:
            with self.subTest(line):
                manifests, _ = render(values)
                modes.add(workload(manifests)["kind"])
                report = helm.lint(CHART, values, strict=True, kube_version="v1.30.0")
                self.assertEqual(report["errors"], [])
        self.assertEqual(modes, {"StatefulSet", "Deployment"})


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(method, url, host=None, body=None, headers=None):
    req = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    if host:
        req.add_header("Host", host)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


class Pod(unittest.TestCase):
    """The rendered container, started as the kubelet would start it."""

    def run_pod(self, values, secrets):
        manifests, _ = render(values)
        c = container(manifests)
        pod = workload(manifests)["spec"]["template"]["spec"]
        data = tempfile.mkdtemp(prefix="spine-chart-")
        mounts = {m["mountPath"]: data for m in c.get("volumeMounts", [])}
        port, metrics = free_port(), free_port()
        environ = {"PATH": os.environ.get("PATH", ""), "HOME": data}
        # What the image's config supplies (docs/deploy.md): the model inside it.
        model = os.environ.get("SPINE_MODEL_DIR") or str(Path.home() / ".cache/spine/models/all-MiniLM-L6-v2")
        environ["SPINE_MODEL_DIR"] = model
        for e in c["env"]:
            if "valueFrom" in e:
                ref = e["valueFrom"]["secretKeyRef"]
                value = secrets[ref["name"]][ref["key"]]
            else:
                value = e["value"]
            environ[e["name"]] = mounts.get(value, value)
        # The pod's own network namespace has its ports free; the test's machine may not.
        environ["SPINE_LISTEN"] = environ["SPINE_LISTEN"].replace(":8080", f":{port}")
        environ["SPINE_METRICS_LISTEN"] = re.sub(r":\d+$", f":{metrics}", environ["SPINE_METRICS_LISTEN"])
        log = tempfile.TemporaryFile()
        self.addCleanup(log.close)
        proc = subprocess.Popen([SPINE] + c["args"], env=environ, stdout=subprocess.DEVNULL, stderr=log)
        self.addCleanup(lambda: proc.poll() is None and proc.kill())

        def stderr():
            log.seek(0)
            return log.read().decode(errors="replace")

        base = f"http://127.0.0.1:{port}"
        probe = c["startupProbe"]
        deadline = time.monotonic() + probe["periodSeconds"] * probe["failureThreshold"]
        while True:
            if proc.poll() is not None:
                self.fail(f"spine exited {proc.returncode}: {stderr()}")
            try:
                if http("GET", base + probe["httpGet"]["path"], host=f"10.1.2.3:{port}")[0] == 200:
                    break
            except OSError:
                pass
            self.assertLess(time.monotonic(), deadline, "not ready within the startup probe's budget")
            time.sleep(0.1)
        self.assertEqual(http("GET", base + c["livenessProbe"]["httpGet"]["path"], host=f"10.1.2.3:{port}"), (200, "ok\n"))
        self.assertEqual(http("GET", base + c["readinessProbe"]["httpGet"]["path"])[0], 200)

        init = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "chart-test", "version": "1"}}}).encode()
        mcp = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
        service = f"spine.{NAMESPACE}.svc.cluster.local:8080"
        status, body = http("POST", base + "/mcp", host=service, body=init, headers=mcp)
        self.assertEqual(status, 200, body)
        self.assertIn('"serverInfo"', body)
        status, _ = http("POST", base + "/mcp", host="rebound.example:8080", body=init, headers=mcp)
        self.assertEqual(status, 403)
        status, text = http("GET", f"http://127.0.0.1:{metrics}/metrics", host=f"10.1.2.3:{metrics}")
        self.assertEqual(status, 200)
        self.assertIn("# TYPE", text)

        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=pod["terminationGracePeriodSeconds"])
        self.assertEqual(code, 0, stderr())
        return data

    def test_embedded_pod_serves(self):
        data = self.run_pod(OPEN, {})
        self.assertTrue((Path(data) / "spine.db").is_file(), "the store lives on the volume")

    def test_postgres_pod_serves(self):
        url = os.environ.get("SPINE_TEST_DATABASE_URL")
        if not url:
            if os.environ.get("CI"):
                self.fail("SPINE_TEST_DATABASE_URL is not set (CI runs the PostgreSQL tests)")
            self.skipTest("SPINE_TEST_DATABASE_URL is not set")
        self.run_pod(merge(PG, OPEN), {"spine-db": {"url": url}})


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    SPINE = os.path.abspath(sys.argv.pop(1))
    unittest.main(verbosity=2)
