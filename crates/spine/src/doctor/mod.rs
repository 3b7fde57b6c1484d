//! `spine doctor`: checks what Spine needs and says what to do about each problem — the
//! built-in model's files, the store (schema, records by state, embedder stamps), every
//! client configured by `spine install`, and a running `spine serve` given with `--url`
//! (health, authentication, and whether it answers without authentication beyond
//! loopback).
//!
//! Exit status 0 only when no check found a problem; `--json` prints one object:
//! `{"ok": bool, "problems": n, "checks": [{"area", "name", "status", "detail", "fix"?}]}`
//! with `status` one of `ok`, `note` (worth knowing, not wrong) or `problem`.

use std::io::Read as _;
use std::path::Path;

use anyhow::Result;
use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::cli::{Common, DoctorArgs};
use crate::embedder::EmbedderKind;
use crate::install::{self, Client};

mod server;

/// The sha256 of each built-in model file: the sums scripts/fetch-model.sh verifies (a unit
/// test below keeps the two equal).
const MODEL_SHA256: [(&str, &str); 3] = [
    ("config.json", "953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41"),
    ("tokenizer.json", "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"),
    ("model.safetensors", "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"),
];

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
enum Status {
    Ok,
    Note,
    Problem,
}

/// One finding.
#[derive(Debug, Serialize)]
struct Check {
    area: &'static str,
    name: String,
    status: Status,
    detail: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    fix: Option<String>,
}

#[derive(Default)]
struct Report {
    checks: Vec<Check>,
}

impl Report {
    fn add(
        &mut self,
        area: &'static str,
        name: impl Into<String>,
        status: Status,
        detail: impl Into<String>,
    ) {
        self.checks.push(Check {
            area,
            name: name.into(),
            status,
            detail: detail.into(),
            fix: None,
        });
    }

    fn problem(
        &mut self,
        area: &'static str,
        name: impl Into<String>,
        detail: impl Into<String>,
        fix: impl Into<String>,
    ) {
        self.checks.push(Check {
            area,
            name: name.into(),
            status: Status::Problem,
            detail: detail.into(),
            fix: Some(fix.into()),
        });
    }

    fn problems(&self) -> usize {
        self.checks.iter().filter(|c| c.status == Status::Problem).count()
    }
}

/// Runs every check and prints the report; true when nothing is wrong.
pub async fn run(common: &Common, args: &DoctorArgs) -> Result<bool> {
    let mut report = Report::default();
    check_model(common, &mut report);
    check_store(common, &mut report);
    check_clients(&mut report);
    if let Some(url) = &args.url {
        server::check_server(url, common, &mut report).await;
    }
    let ok = report.problems() == 0;
    if args.json {
        let out =
            serde_json::json!({"ok": ok, "problems": report.problems(), "checks": report.checks});
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        print_text(&report);
    }
    Ok(ok)
}

fn print_text(report: &Report) {
    let mut area = "";
    for c in &report.checks {
        if c.area != area {
            area = c.area;
            println!("{area}");
        }
        let mark = match c.status {
            Status::Ok => "ok     ",
            Status::Note => "note   ",
            Status::Problem => "PROBLEM",
        };
        println!("  {mark} {}: {}", c.name, c.detail);
        if let Some(fix) = &c.fix {
            println!("          fix: {fix}");
        }
    }
    match report.problems() {
        0 => println!("\nno problems found"),
        n => println!("\n{n} problem(s) found"),
    }
}

/// The identity stamped on the vectors the configured embedder writes.
fn configured_embedder(common: &Common) -> String {
    match common.embedder.embedder {
        EmbedderKind::Builtin => spine_embed::Identity::Builtin.to_string(),
        EmbedderKind::Openai => spine_embed::Identity::OpenAi(
            common.embedder.embed_model.as_deref().unwrap_or("<no --embed-model>"),
        )
        .to_string(),
    }
}

fn sha256_of(path: &Path) -> std::io::Result<String> {
    let mut file = std::fs::File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hasher.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

fn check_model(common: &Common, report: &mut Report) {
    const AREA: &str = "model";
    if common.embedder.embedder != EmbedderKind::Builtin {
        report.add(
            AREA,
            "embedder",
            Status::Note,
            format!(
                "{} is configured: the built-in model's files are not needed",
                configured_embedder(common)
            ),
        );
        return;
    }
    let dir = crate::engines::model_dir(common);
    let fetch = format!("SPINE_MODEL_DIR={} scripts/fetch-model.sh", dir.display());
    for (file, want) in MODEL_SHA256 {
        let path = dir.join(file);
        match sha256_of(&path) {
            Ok(sum) if sum == want => report.add(
                AREA,
                file,
                Status::Ok,
                format!("{} (sha256 as expected)", path.display()),
            ),
            Ok(sum) => report.problem(
                AREA,
                file,
                format!("{} has sha256 {sum}, expected {want}", path.display()),
                format!("fetch the model again: {fetch}"),
            ),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => report.problem(
                AREA,
                file,
                format!("{} is missing", path.display()),
                format!("fetch the model: {fetch} (or point --model-dir / SPINE_MODEL_DIR at it)"),
            ),
            Err(e) => report.problem(
                AREA,
                file,
                format!("cannot read {}: {e}", path.display()),
                "check the file's permissions",
            ),
        }
    }
}

fn check_store(common: &Common, report: &mut Report) {
    const AREA: &str = "store";
    let postgres = crate::engines::database_url(common).is_some();
    if !postgres {
        let dir = crate::engines::data_dir(common, false).unwrap_or_default();
        if !dir.join(spine_store::DB_FILE).is_file() {
            report.add(
                AREA,
                "open",
                Status::Note,
                format!(
                    "no store in {} yet: the first `spine mcp` or `spine serve` creates it \
                         (if you have one elsewhere, pass --data-dir)",
                    dir.display()
                ),
            );
            return;
        }
        // Checking never upgrades: a store at an older layout is left for the next start.
        match spine_store::SqliteStore::layout(&dir) {
            Ok(layout) if layout.at < layout.current => {
                report.add(
                    AREA,
                    "open",
                    Status::Note,
                    format!(
                        "{}: the store's layout is at step {} and this spine's at {}; the next \
                         `spine mcp` or `spine serve` upgrades it (doctor changes nothing, so \
                         the record checks run after that)",
                        dir.display(),
                        layout.at,
                        layout.current
                    ),
                );
                return;
            }
            Ok(layout) if layout.at > layout.current => {
                report.problem(
                    AREA,
                    "open",
                    format!(
                        "{}: the store's layout is at step {}, newer than this spine's {}",
                        dir.display(),
                        layout.at,
                        layout.current
                    ),
                    "it was written by a newer spine: upgrade this one",
                );
                return;
            }
            Ok(_) => {}
            Err(e) => {
                report.problem(
                    AREA,
                    "open",
                    format!("cannot open the store in {}: {e:#}", dir.display()),
                    "check the directory's permissions; `spine spine-review verify` checks the records",
                );
                return;
            }
        }
    }
    // The one opener the commands use (existence and layout were checked above: doctor never
    // creates or upgrades a store).
    let (store, crate::engines::Place { name: place, flag }) =
        match crate::engines::operator_store_at(common, true) {
            Ok(opened) => opened,
            Err(e) => {
                let fix = if postgres {
                    "check --database-url / SPINE_DATABASE_URL and that the server is up"
                } else {
                    "check the directory's permissions and free space; `spine spine-review \
                     verify` checks the records"
                };
                report.problem(AREA, "open", format!("{e:#}"), fix);
                return;
            }
        };
    report.add(AREA, "open", Status::Ok, place.clone());
    match store.schema_versions() {
        Ok(versions) => {
            let current = spine_core::SCHEMA_VERSION;
            let listed: Vec<String> = versions.iter().map(|(v, n)| format!("v{v}: {n}")).collect();
            let detail = format!(
                "records by schema version: {} (this spine writes v{current})",
                if listed.is_empty() { "none".into() } else { listed.join(", ") }
            );
            if versions.iter().any(|(v, _)| *v > current) {
                report.problem(
                    AREA,
                    "schema",
                    detail,
                    "records were written by a newer spine: upgrade this one",
                );
            } else if versions.iter().any(|(v, _)| *v < current) {
                report.add(
                    AREA,
                    "schema",
                    Status::Note,
                    format!("{detail}; `spine migrate` brings the older ones up to date"),
                );
            } else {
                report.add(AREA, "schema", Status::Ok, detail);
            }
        }
        Err(e) => report.problem(
            AREA,
            "schema",
            format!("cannot read schema versions: {e:#}"),
            "run `spine spine-review verify --all-scopes`",
        ),
    }
    use spine_core::Clock as _;
    match store.state_counts(None, spine_core::SystemClock.now()) {
        Ok(scopes) => {
            let sum = |f: fn(&spine_store::StateCounts) -> u64| scopes.iter().map(f).sum::<u64>();
            report.add(
                AREA,
                "records",
                Status::Ok,
                format!(
                    "{} in {} scope(s): {} active, {} archived, {} superseded, {} expired",
                    sum(|c| c.records),
                    scopes.len(),
                    sum(|c| c.active),
                    sum(|c| c.archived),
                    sum(|c| c.superseded),
                    sum(|c| c.expired)
                ),
            );
        }
        Err(e) => report.problem(
            AREA,
            "records",
            format!("cannot count records: {e:#}"),
            "run `spine spine-review verify --all-scopes`",
        ),
    }
    let configured = configured_embedder(common);
    match store.embedder_models() {
        Ok(models) => {
            let stamps = spine_embed::Stamps::of(&models, &configured);
            if stamps.compatible() {
                report.add(
                    AREA,
                    "embedder",
                    Status::Ok,
                    format!("every vector is from {configured}, the configured embedder"),
                );
            } else {
                let old: Vec<String> =
                    stamps.others.iter().map(|(m, _)| crate::embedder::flags_for(m)).collect();
                report.problem(
                    AREA,
                    "embedder",
                    format!(
                        "the store holds vectors of another embedder: {}; configured: {configured}",
                        stamps.listed()
                    ),
                    format!(
                        "re-embed with the configured embedder (`spine reindex {flag}` with the \
                         embedder flags you run spine with), or run spine with the embedder the \
                         data was written with ({})",
                        old.join(" or ")
                    ),
                );
            }
        }
        Err(e) => report.problem(
            AREA,
            "embedder",
            format!("cannot read the embedder stamps: {e:#}"),
            "run `spine spine-review verify --all-scopes`",
        ),
    }
}

fn check_clients(report: &mut Report) {
    const AREA: &str = "clients";
    let this = std::env::current_exe().ok().and_then(|p| p.canonicalize().ok());
    let cwd = std::env::current_dir().ok();
    let mut found = 0;
    for client in Client::ALL {
        let mut scopes: Vec<Option<&Path>> = vec![None];
        if install::has_project_scope(client)
            && let Some(cwd) = cwd.as_deref()
        {
            scopes.push(Some(cwd));
        }
        for project in scopes {
            let installed = match install::inspect(client, project) {
                Ok(Some(i)) => i,
                Ok(None) => continue,
                Err(e) => {
                    report.problem(
                        AREA,
                        client.name(),
                        format!("{e:#}"),
                        "fix the file, then run `spine doctor` again",
                    );
                    continue;
                }
            };
            found += 1;
            check_client(report, &installed, this.as_deref());
        }
    }
    if found == 0 {
        report.add(
            AREA,
            "none",
            Status::Note,
            "no client has Spine configured: `spine install <client>` or `spine install --all`",
        );
    }
}

fn check_client(report: &mut Report, i: &install::Installed, this: Option<&Path>) {
    const AREA: &str = "clients";
    let name = format!("{} ({})", i.client.name(), i.scope);
    let flag = if i.scope == "project" { " --project" } else { "" };
    let reinstall = format!("spine install {}{flag}", i.client.name());
    let Some(command) = &i.command else {
        report.problem(
            AREA,
            name,
            format!("{}: Spine's entry names no command", i.path.display()),
            reinstall,
        );
        return;
    };
    let exe = Path::new(command);
    if !exe.is_file() {
        report.problem(
            AREA,
            name,
            format!("{} runs {command}, which does not exist", i.path.display()),
            format!("{reinstall} (from the spine you want the client to run)"),
        );
        return;
    }
    let same = exe.canonicalize().ok().as_deref() == this;
    let mut detail = match same {
        true => format!("{} runs this spine", i.path.display()),
        false => {
            format!("{} runs {command} (another spine than this one; it exists)", i.path.display())
        }
    };
    if let Some((path, events)) = &i.hooks {
        let missing: Vec<&str> =
            events.iter().filter(|(_, there)| !there).map(|(e, _)| *e).collect();
        if !missing.is_empty() {
            report.problem(
                AREA,
                name,
                format!("{detail}, but Spine's hooks are missing in {} ({})", path.display(), missing.join(", ")),
                format!("{reinstall} (or, for the MCP server alone on purpose, `{reinstall} --no-hooks` and ignore this)"),
            );
            return;
        }
        detail.push_str(&format!("; hooks in place ({})", path.display()));
    }
    report.add(AREA, name, if same { Status::Ok } else { Status::Note }, detail);
}

#[cfg(test)]
mod tests;
