//! The OCI image (issue 68): `scripts/image.sh --binary <this build's spine>` builds it with
//! buildah; the archive's index, manifest and config are read back, its one layer unpacked,
//! and the unpacked tree run as the image would run it — `chroot` as uid 10001 with the
//! image's environment — so the libraries, the model path, `/data` and `/tmp` are proven to
//! be what the binary needs, and the secure default is proven to hold inside the image.
//! Needs root (chroot) and buildah (scripts/test.sh installs it); CI has both.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::Value;
use tempfile::TempDir;

use crate::common::*;

fn json_file(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

fn blob(dir: &Path, digest: &str) -> std::path::PathBuf {
    dir.join("blobs/sha256").join(digest.strip_prefix("sha256:").unwrap())
}

/// `spine serve` as the image runs it: the unpacked tree as root directory, uid 10001, only
/// the image's environment (plus `extra`).
fn run_as_image(root: &Path, env: &[String], extra: &[(&str, String)]) -> Command {
    let mut cmd = Command::new("/usr/sbin/chroot");
    cmd.arg("--userspec=10001:10001").arg(root).args(["/usr/local/bin/spine", "serve"]);
    cmd.env_clear();
    for kv in env {
        let (k, v) = kv.split_once('=').unwrap();
        cmd.env(k, v);
    }
    for (k, v) in extra {
        cmd.env(k, v);
    }
    cmd
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_image_holds_what_spine_needs_and_runs_as_10001() {
    if embedded_only() {
        return;
    }
    // SAFETY: geteuid has no preconditions.
    let root_user = unsafe { libc::geteuid() } == 0;
    let buildah = Command::new("buildah").arg("--version").output().is_ok();
    if !root_user || !buildah {
        assert!(std::env::var_os("CI").is_none(), "CI runs as root with buildah installed");
        eprintln!("skipped: building and running the image needs root and buildah");
        return;
    }
    let dir = TempDir::new().unwrap();
    let archive = dir.path().join("spine.oci.tar");
    let repo = crate::common::repo();
    let out = Command::new("bash")
        .arg(repo.join("scripts/image.sh"))
        .args(["--binary", SPINE, "--tag", "test-tag", "--output"])
        .arg(&archive)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("digest: sha256:") && stdout.contains("size: "), "{stdout}");

    let oci = dir.path().join("oci");
    std::fs::create_dir(&oci).unwrap();
    assert!(
        Command::new("tar")
            .arg("-xf")
            .arg(&archive)
            .arg("-C")
            .arg(&oci)
            .status()
            .unwrap()
            .success()
    );
    let index = json_file(&oci.join("index.json"));
    let entry = &index["manifests"][0];
    assert_eq!(entry["annotations"]["org.opencontainers.image.ref.name"], "test-tag");
    let digest = entry["digest"].as_str().unwrap();
    assert!(stdout.contains(digest), "the printed digest is the manifest's: {stdout}");
    let manifest = json_file(&blob(&oci, digest));
    let config = json_file(&blob(&oci, manifest["config"]["digest"].as_str().unwrap()));
    let c = &config["config"];
    assert_eq!(c["User"], "10001:10001");
    assert_eq!(c["Entrypoint"], serde_json::json!(["/usr/local/bin/spine"]));
    assert_eq!(c["Cmd"], serde_json::json!(["serve"]));
    assert!(c["ExposedPorts"].get("8080/tcp").is_some(), "{c}");
    let env: Vec<String> =
        c["Env"].as_array().unwrap().iter().map(|e| e.as_str().unwrap().to_owned()).collect();
    for want in [
        "SPINE_LISTEN=0.0.0.0:8080",
        "SPINE_DATA_DIR=/data",
        "SPINE_MODEL_DIR=/usr/share/spine/models/all-MiniLM-L6-v2",
    ] {
        assert!(env.iter().any(|e| e == want), "{want} in {env:?}");
    }
    let labels = &c["Labels"];
    for label in ["title", "version", "revision", "source", "licenses"] {
        let key = format!("org.opencontainers.image.{label}");
        assert!(labels[&key].as_str().is_some_and(|v| !v.is_empty()), "{key}: {labels}");
    }
    assert_eq!(labels["org.opencontainers.image.licenses"], "Apache-2.0");

    // The one layer, unpacked as the runtime would (owners kept: we are root).
    let layers = manifest["layers"].as_array().unwrap();
    assert_eq!(layers.len(), 1, "{manifest}");
    let rootfs = dir.path().join("rootfs");
    std::fs::create_dir(&rootfs).unwrap();
    let layer = blob(&oci, layers[0]["digest"].as_str().unwrap());
    assert!(
        Command::new("tar")
            .arg("-xf")
            .arg(&layer)
            .arg("-C")
            .arg(&rootfs)
            .status()
            .unwrap()
            .success()
    );
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let data = std::fs::metadata(rootfs.join("data")).unwrap();
    assert_eq!((data.uid(), data.gid()), (10001, 10001), "/data belongs to spine");
    assert!(!rootfs.join("bin/sh").exists() && !rootfs.join("usr/bin").exists(), "no shell");
    let model = rootfs.join("usr/share/spine/models/all-MiniLM-L6-v2");
    for f in ["config.json", "tokenizer.json", "model.safetensors", "LICENSE"] {
        assert!(model.join(f).is_file(), "{f} in the model directory");
    }
    let passwd = std::fs::read_to_string(rootfs.join("etc/passwd")).unwrap();
    assert!(passwd.contains("spine:x:10001:10001:"), "{passwd}");
    assert!(rootfs.join("etc/ssl/certs/ca-certificates.crt").is_file());

    // A read-only root, as `readOnlyRootFilesystem` makes it: for uid 10001 every directory
    // but /data is root's and not writable once /tmp is too (temporary files then go to the
    // working directory, /data).
    std::fs::set_permissions(rootfs.join("tmp"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let outside_data = || -> Vec<(String, i64, u64)> {
        let mut files = Vec::new();
        let mut dirs = vec![rootfs.clone()];
        while let Some(d) = dirs.pop() {
            for e in std::fs::read_dir(&d).unwrap() {
                let e = e.unwrap();
                let m = e.metadata().unwrap();
                if e.path() == rootfs.join("data") {
                    continue;
                }
                if m.is_dir() {
                    dirs.push(e.path());
                }
                files.push((e.path().display().to_string(), m.mtime(), m.len()));
            }
        }
        files.sort();
        files
    };
    let before = outside_data();

    // The secure default holds in the image: a non-loopback listen without OIDC refuses to
    // start and says what to set.
    let refused = run_as_image(&rootfs, &env, &[]).output().unwrap();
    assert!(!refused.status.success());
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(
        said.contains("--oidc-issuer") && said.contains("SPINE_ALLOW_UNAUTHENTICATED=true"),
        "{said}"
    );

    // Allowed, it serves from the image's own tree: ready means the model loaded from the
    // image's path and the store answered from /data.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut child = tokio::process::Command::from(run_as_image(
        &rootfs,
        &env,
        &[
            ("SPINE_ALLOW_UNAUTHENTICATED", "true".into()),
            ("SPINE_LISTEN", format!("0.0.0.0:{port}")),
        ],
    ));
    let mut child = child.kill_on_drop(true).stderr(std::process::Stdio::piped()).spawn().unwrap();
    let http = reqwest::Client::new();
    let ready = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            if let Ok(r) = http.get(format!("http://127.0.0.1:{port}/readyz")).send().await
                && r.status() == 200
            {
                return;
            }
            if let Ok(Some(status)) = child.try_wait() {
                panic!("spine serve in the image exited: {status}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    ready.await.expect("the image's server is ready within a minute");
    assert!(rootfs.join("data/spine.db").is_file(), "the store lives in /data");
    // A store and a search over MCP, embedded by the model inside the image.
    let transport = rmcp::transport::StreamableHttpClientTransport::from_uri(format!(
        "http://127.0.0.1:{port}/mcp"
    ));
    let client = rmcp::ServiceExt::serve((), transport).await.unwrap();
    let stored = ok(call(
        &client,
        "store_memory",
        serde_json::json!({"content": "Deploys happen on Thursdays.", "scope": "dev:project:image",
            "source": "user-said", "category": "convention"}),
    )
    .await);
    let hits = ok(call(
        &client,
        "search_memory",
        serde_json::json!({"query": "which weekday do we ship", "scope": "dev:project:image"}),
    )
    .await);
    assert_eq!(hits["memories"][0]["id"], stored["id"], "{hits}");
    client.cancel().await.unwrap();
    child.start_kill().unwrap();
    child.wait().await.unwrap();
    assert_eq!(outside_data(), before, "nothing is written outside /data");
}
