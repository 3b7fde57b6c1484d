//! `spine doctor` end to end: one test per problem it reports (missing model, foreign
//! embedder stamp, hooks missing, unsafe bind) and the all-good case, each with its own
//! temporary home, project and data directory.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::common::*;
use serde_json::Value;

/// The model directory the tests use, whatever HOME the command gets.
fn model_dir() -> PathBuf {
    spine_embed::default_model_dir()
}

/// A home, a project (the working directory) and a data directory holding a store.
struct Place {
    _dir: tempfile::TempDir,
    home: PathBuf,
    project: PathBuf,
    data: PathBuf,
}

impl Place {
    fn new() -> Place {
        let dir = tempfile::tempdir().unwrap();
        let (home, project, data) =
            (dir.path().join("home"), dir.path().join("proj"), dir.path().join("data"));
        for d in [&home, &project, &data] {
            std::fs::create_dir_all(d).unwrap();
        }
        // An empty store, as the first `spine mcp` leaves it.
        drop(spine_store::SqliteStore::open(&data).unwrap());
        Place { _dir: dir, home, project, data }
    }

    /// `spine <args>` here: the model of the tests unless `SPINE_MODEL_DIR` is in `env`.
    fn spine(&self, args: &[&str], env: &[(&str, &Path)]) -> Run {
        let mut cmd = std::process::Command::new(SPINE);
        cmd.args(args)
            .arg("--data-dir")
            .arg(&self.data)
            .current_dir(&self.project)
            .env("HOME", &self.home)
            .env("SPINE_MODEL_DIR", model_dir())
            .env("SPINE_LOG", "error");
        for var in [
            "XDG_CONFIG_HOME",
            "XDG_DATA_HOME",
            "CODEX_HOME",
            "SPINE_DATA_DIR",
            "SPINE_DATABASE_URL",
            "SPINE_EMBEDDER",
            "SPINE_EMBED_URL",
            "SPINE_EMBED_MODEL",
            "SPINE_OIDC_ISSUER",
        ] {
            cmd.env_remove(var);
        }
        for (k, v) in env {
            cmd.env(k, v);
        }
        Run::of(cmd.output().expect("spine ran"))
    }

    fn doctor(&self, extra: &[&str], env: &[(&str, &Path)]) -> Run {
        let mut args = vec!["doctor"];
        args.extend(extra);
        self.spine(&args, env)
    }

    /// Claude Code configured user-wide, hooks included.
    fn install_claude_code(&self) {
        let r = self.spine(&["install", "claude-code"], &[]);
        assert!(r.ok, "{}{}", r.stdout, r.stderr);
    }
}

/// The one check of `report` (`--json`) in `area` named `name`.
fn check<'a>(report: &'a Value, area: &str, name: &str) -> &'a Value {
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["area"] == area && c["name"] == name)
        .unwrap_or_else(|| panic!("no {area}/{name} check: {report:#}"))
}

fn problems(report: &Value) -> Vec<String> {
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["status"] == "problem")
        .map(|c| format!("{}/{}", c["area"].as_str().unwrap(), c["name"].as_str().unwrap()))
        .collect()
}

#[tokio::test]
async fn all_good_exits_zero_and_says_so() {
    let place = Place::new();
    place.install_claude_code();
    let server = start_http().await;
    let url = format!("http://{}", server.addr);
    let r = place.doctor(&["--url", &url], &[]);
    assert!(r.ok, "exit {}: {}{}", r.code, r.stdout, r.stderr);
    assert!(r.stdout.contains("no problems found"), "{}", r.stdout);
    assert!(r.stdout.contains("model.safetensors") && r.stdout.contains("sha256 as expected"));
    assert!(r.stdout.contains("claude-code (user)") && r.stdout.contains("hooks in place"));
    assert!(r.stdout.contains("loopback only"), "{}", r.stdout);

    let report = place.doctor(&["--url", &url, "--json"], &[]).json();
    assert_eq!(report["ok"], true);
    assert_eq!(report["problems"], 0);
    assert_eq!(check(&report, "store", "embedder")["status"], "ok");
    assert_eq!(check(&report, "server", "health")["status"], "ok");
    assert!(check(&report, "server", "auth")["detail"].as_str().unwrap().starts_with("none"));
}

#[test]
fn a_missing_model_is_a_problem_with_the_fetch_command() {
    let place = Place::new();
    place.install_claude_code();
    let empty = tempfile::tempdir().unwrap();
    let r = place.doctor(&[], &[("SPINE_MODEL_DIR", empty.path())]);
    assert_eq!(r.code, 1, "{}{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("PROBLEM model.safetensors"), "{}", r.stdout);
    assert!(r.stdout.contains("scripts/fetch-model.sh"), "{}", r.stdout);

    let report = place.doctor(&["--json"], &[("SPINE_MODEL_DIR", empty.path())]).json();
    assert_eq!(report["ok"], false);
    assert_eq!(
        problems(&report),
        ["model/config.json", "model/tokenizer.json", "model/model.safetensors"]
    );
    let fix = check(&report, "model", "config.json")["fix"].as_str().unwrap();
    assert!(fix.contains(&empty.path().display().to_string()), "{fix}");
}

#[test]
fn vectors_of_another_embedder_are_a_problem_and_another_embedder_skips_the_model() {
    let place = Place::new();
    place.install_claude_code();
    // Records embedded with the built-in model.
    let notes = place.project.join("NOTES.md");
    std::fs::write(&notes, "# Conventions\n\n- Run the whole test suite before every commit.\n")
        .unwrap();
    let imported = place
        .spine(&["import-notes", "--scope", "acme:project:proj", notes.to_str().unwrap()], &[]);
    assert!(imported.ok, "{}{}", imported.stdout, imported.stderr);

    let other =
        ["--embedder", "openai", "--embed-url", "http://127.0.0.1:9", "--embed-model", "other"];
    let mut args = other.to_vec();
    args.push("--json");
    let r = place.doctor(&args, &[]);
    assert_eq!(r.code, 1, "{}{}", r.stdout, r.stderr);
    let report = r.json();
    assert_eq!(problems(&report), ["store/embedder"]);
    let embedder = check(&report, "store", "embedder");
    let detail = embedder["detail"].as_str().unwrap();
    assert!(detail.contains("builtin:all-MiniLM-L6-v2 (1 vector)"), "{detail}");
    assert!(detail.contains("configured: openai:other"), "{detail}");
    let fix = embedder["fix"].as_str().unwrap();
    assert!(fix.contains("spine reindex") && fix.contains("--embedder builtin"), "{fix}");
    // The built-in model is not needed with another embedder: a note, no file checks.
    assert_eq!(check(&report, "model", "embedder")["status"], "note");
    assert!(
        check(&report, "store", "records")["detail"].as_str().unwrap().starts_with("1 in 1 scope")
    );

    // With the embedder the data was written with, all is well.
    assert!(place.doctor(&[], &[]).ok);
}

#[test]
fn hooks_removed_from_a_client_with_its_server_still_there_are_a_problem() {
    let place = Place::new();
    place.install_claude_code();
    let settings = place.home.join(".claude/settings.json");
    std::fs::write(&settings, "{\"model\": \"opus\"}\n").unwrap();
    let r = place.doctor(&[], &[]);
    assert_eq!(r.code, 1, "{}{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("hooks are missing"), "{}", r.stdout);
    assert!(r.stdout.contains("fix: spine install claude-code"), "{}", r.stdout);
    let report = place.doctor(&["--json"], &[]).json();
    assert_eq!(problems(&report), ["clients/claude-code (user)"]);
    let detail = check(&report, "clients", "claude-code (user)")["detail"].as_str().unwrap();
    assert!(detail.contains("SessionStart, UserPromptSubmit"), "{detail}");

    // An entry whose executable is gone is a problem too.
    let mut claude: Value =
        serde_json::from_str(&std::fs::read_to_string(place.home.join(".claude.json")).unwrap())
            .unwrap();
    claude["mcpServers"]["spine"]["command"] = "/nowhere/spine".into();
    std::fs::write(place.home.join(".claude.json"), claude.to_string()).unwrap();
    let r = place.doctor(&[], &[]);
    assert!(r.stdout.contains("runs /nowhere/spine, which does not exist"), "{}", r.stdout);
}

/// `spine serve` listening on every address without authentication, as an operator who
/// passed --allow-unauthenticated runs it.
async fn serve_on_every_address(data: &Path) -> (tokio::process::Child, u16) {
    let port = std::net::TcpListener::bind("0.0.0.0:0").unwrap().local_addr().unwrap().port();
    let mut child = tokio::process::Command::new(SPINE)
        .args(["serve", "--allow-unauthenticated", "--listen", &format!("0.0.0.0:{port}")])
        .arg("--data-dir")
        .arg(data)
        .env_remove("SPINE_OIDC_ISSUER")
        .env_remove("SPINE_DATABASE_URL")
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let http = reqwest::Client::new();
    for _ in 0..300 {
        if let Ok(r) = http.get(format!("http://127.0.0.1:{port}/healthz")).send().await
            && r.status().is_success()
        {
            return (child, port);
        }
        if let Ok(Some(status)) = child.try_wait() {
            panic!("spine serve exited early: {status}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("spine serve did not become healthy");
}

#[tokio::test]
async fn a_server_answering_without_auth_beyond_loopback_is_an_unsafe_bind() {
    let place = Place::new();
    place.install_claude_code();
    let served = tempfile::tempdir().unwrap();
    let (_server, port) = serve_on_every_address(served.path()).await;
    let url = format!("http://127.0.0.1:{port}");
    let r = place.doctor(&["--url", &url], &[]);
    assert_eq!(r.code, 1, "{}{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("PROBLEM bind"), "{}", r.stdout);
    assert!(r.stdout.contains("a non-loopback address"), "{}", r.stdout);

    let report = place.doctor(&["--url", &url, "--json"], &[]).json();
    assert_eq!(report["ok"], false);
    assert_eq!(problems(&report), ["server/bind"]);
    let bind = check(&report, "server", "bind");
    assert!(bind["fix"].as_str().unwrap().contains("--oidc-issuer"), "{bind}");
    // The shape scripts read: every check has area, name, status and detail.
    for c in report["checks"].as_array().unwrap() {
        for key in ["area", "name", "status", "detail"] {
            assert!(c[key].is_string(), "{key} in {c}");
        }
        assert!(["ok", "note", "problem"].contains(&c["status"].as_str().unwrap()), "{c}");
        assert_eq!(c["fix"].is_string(), c["status"] == "problem", "{c}");
    }
    assert_eq!(report["problems"], 1);
}

/// A store whose database is at layout step `step` (and holds nothing else).
fn store_at_step(data: &Path, step: i64) {
    let db = data.join("spine.db");
    std::fs::remove_file(&db).unwrap();
    for side in ["spine.db-wal", "spine.db-shm"] {
        let _ = std::fs::remove_file(data.join(side));
    }
    let conn = rusqlite::Connection::open(&db).unwrap();
    conn.pragma_update(None, "user_version", step).unwrap();
}

#[test]
fn checking_a_store_never_upgrades_it() {
    let place = Place::new();
    let current = spine_store::SqliteStore::layout(&place.data).unwrap().current;

    // An older layout: a note, nothing changed (a migrating open would create the tables
    // and move the step to `current`).
    store_at_step(&place.data, 1);
    let report = place.doctor(&["--json"], &[]).json();
    let open = check(&report, "store", "open");
    assert_eq!(open["status"], "note", "{report:#}");
    assert!(open["detail"].as_str().unwrap().contains("upgrades it"), "{open}");
    assert_eq!(spine_store::SqliteStore::layout(&place.data).unwrap().at, 1);
    let conn = rusqlite::Connection::open(place.data.join("spine.db")).unwrap();
    let tables: i64 =
        conn.query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get(0)).unwrap();
    assert_eq!(tables, 0, "doctor created tables");

    // A newer one: a problem.
    store_at_step(&place.data, current as i64 + 1);
    let report = place.doctor(&["--json"], &[]).json();
    assert_eq!(check(&report, "store", "open")["status"], "problem", "{report:#}");
    assert_eq!(spine_store::SqliteStore::layout(&place.data).unwrap().at, current + 1);
}
