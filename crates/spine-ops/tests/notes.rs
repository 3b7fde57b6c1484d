//! `import-notes` in-process: the markdown split, the default files and their sources and
//! categories, the scope choice, the dry run and the second run that imports nothing twice,
//! through a real service on a SQLite store.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::json;
use spine_core::{Caller, Category, Limits, ManualClock, Source};
use spine_embed::{EmbedError, Embedder};
use spine_ops::Error;
use spine_ops::notes::{
    Request, category_of_kind, claude_project_dir, import_notes, split_markdown,
};
use spine_service::Service;
use spine_service::args::parse_args;
use spine_store::SqliteStore;

use super::{NOW, at};

/// A deterministic embedder: no model needed to store a note.
struct Letters;

impl Embedder for Letters {
    fn model_id(&self) -> &str {
        "letters"
    }
    fn dims(&self) -> usize {
        4
    }
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        Ok(texts
            .iter()
            .map(|t| {
                let n = t.len() as f32;
                vec![1.0, n.sin(), n.cos(), (t.bytes().map(f32::from).sum::<f32>()).sin()]
            })
            .collect())
    }
}

fn service(dir: &Path) -> Service {
    let store = Arc::new(SqliteStore::open(&dir.join("data")).unwrap());
    Service::new(store, Arc::new(Letters), Arc::new(ManualClock::new(at(NOW))), Limits::default())
}

/// A repository `spine` with CLAUDE.md, AGENTS.md and a Claude Code memory file in `home`.
fn repo(dir: &Path) -> (PathBuf, PathBuf) {
    let repo = dir.join("spine");
    std::fs::create_dir_all(repo.join(".git")).unwrap();
    std::fs::write(
        repo.join("CLAUDE.md"),
        "# Spine\n\n## Conventions\n- Run cargo fmt and clippy before every commit.\n- Never \
         commit generated protobuf code.\n",
    )
    .unwrap();
    std::fs::write(repo.join("AGENTS.md"), "Tests use the real model, never a stub.\n").unwrap();
    let home = dir.join("home");
    let top = std::fs::canonicalize(&repo).unwrap();
    let memory = home.join(".claude/projects").join(claude_project_dir(&top)).join("memory");
    std::fs::create_dir_all(&memory).unwrap();
    std::fs::write(
        memory.join("release.md"),
        "---\nname: release\ntype: project\n---\nReleases are cut from main every Tuesday.\n",
    )
    .unwrap();
    (repo, home)
}

fn request(repo: &Path, home: &Path, scope: Option<&str>) -> Request {
    Request {
        cwd: repo.to_path_buf(),
        home: Some(home.to_path_buf()),
        scope: scope.map(str::to_owned),
        claude_memory: true,
        ..Request::default()
    }
}

fn invalid(r: Result<impl std::fmt::Debug, Error>) -> String {
    match r {
        Err(Error::Invalid(m)) => m,
        other => panic!("expected Invalid, got {other:?}"),
    }
}

#[test]
fn bullets_and_paragraphs_become_self_contained_notes() {
    let md = "---\nname: x\ntype: feedback\n---\n# Project\n\nIntro paragraph about the \
              whole project.\n\n## Testing\n- Run cargo test before every commit.\n  \
              Including the doc tests.\n  - nested detail line here\n- Short\n1. Use the \
              staging database for integration tests.\n\n## Build\n```sh\ncargo build \
              --release\n```\nThen copy the binary.\n";
    let p = split_markdown(md);
    assert_eq!(p.kind.as_deref(), Some("feedback"));
    let contents: Vec<&str> = p.notes.iter().map(|n| n.content.as_str()).collect();
    assert_eq!(contents[0], "Project — Intro paragraph about the whole project.");
    assert_eq!(
        contents[1],
        "Testing — Run cargo test before every commit.\nIncluding the doc tests.\n- nested detail line here"
    );
    assert_eq!(contents[2], "Testing — Use the staging database for integration tests.");
    assert!(
        contents[3].starts_with("Build — ```sh\ncargo build --release\n```"),
        "{}",
        contents[3]
    );
    assert_eq!(contents.len(), 4, "\"Short\" has too few words: {contents:?}");
    assert_eq!(p.notes[1].line, 10, "the line of the bullet, front matter counted");
}

#[test]
fn claude_code_names_project_directories_by_their_path() {
    assert_eq!(claude_project_dir(Path::new("/home/a/my.app")), "-home-a-my-app");
}

#[test]
fn claude_code_memory_types_map_to_categories() {
    assert_eq!(category_of_kind(Some("user")), Category::Preference);
    assert_eq!(category_of_kind(Some("feedback")), Category::Preference);
    assert_eq!(category_of_kind(Some("project")), Category::Decision);
    assert_eq!(category_of_kind(Some("reference")), Category::Convention);
    assert_eq!(category_of_kind(None), Category::Convention);
}

#[test]
fn notes_import_once_with_honest_sources_and_their_file_as_tag() {
    let dir = tempfile::tempdir().unwrap();
    let (repo, home) = repo(dir.path());
    let service = service(dir.path());
    let caller = Caller::anonymous();

    // No scope yet: the refusal says how to choose one.
    let refused = invalid(import_notes(&service, &caller, &request(&repo, &home, None)));
    assert!(refused.contains("--scope local:project:spine"), "{refused}");

    let scoped = request(&repo, &home, Some("acme:project:spine"));
    let dry =
        import_notes(&service, &caller, &Request { dry_run: true, ..scoped.clone() }).unwrap();
    let would: usize = dry.files.iter().map(|f| f.would_import.len()).sum();
    assert_eq!(would, 4, "{dry:?}");
    assert!(dry.files.iter().all(|f| f.imported == 0));
    let scope = dry.scope.clone();
    assert!(
        service.own_contents_tagged(&caller, &scope, "imported").unwrap().is_empty(),
        "a dry run stores nothing"
    );

    let run = import_notes(&service, &caller, &scoped).unwrap();
    let by_name = |name: &str| run.files.iter().find(|f| f.file.ends_with(name)).unwrap();
    assert_eq!(by_name("CLAUDE.md").imported, 2);
    assert_eq!(by_name("CLAUDE.md").source, Source::UserSaid);
    assert_eq!(by_name("CLAUDE.md").category, Category::Convention);
    assert_eq!(by_name("release.md").source, Source::AgentInferred);
    assert_eq!(by_name("release.md").category, Category::Decision);

    let again = import_notes(&service, &caller, &scoped).unwrap();
    assert_eq!(again.files.iter().map(|f| f.imported).sum::<usize>(), 0, "nothing twice");
    assert_eq!(again.files.iter().map(|f| f.already_present).sum::<usize>(), 4);

    let from_claude = service.own_contents_tagged(&caller, &scope, "from:CLAUDE.md").unwrap();
    assert!(from_claude.contains("Conventions — Never commit generated protobuf code."));
    assert_eq!(service.own_contents_tagged(&caller, &scope, "imported").unwrap().len(), 4);
    let listed = service
        .list_memory(
            &caller,
            parse_args(
                json!({"scope": "acme:project:spine", "tags": ["from:release.md"]})
                    .as_object()
                    .cloned()
                    .unwrap(),
            )
            .unwrap(),
        )
        .unwrap();
    let listed = serde_json::to_value(listed).unwrap();
    assert_eq!(listed["memories"][0]["source"], "agent-inferred", "{listed}");
    assert_eq!(listed["memories"][0]["category"], "decision", "{listed}");

    // Once the scope exists it is the repository's one scope: no --scope needed.
    let found = import_notes(&service, &caller, &request(&repo, &home, None)).unwrap();
    assert_eq!(found.scope.as_str(), "acme:project:spine");
}

#[test]
fn flags_override_source_and_category_and_memory_files_can_be_left_out() {
    let dir = tempfile::tempdir().unwrap();
    let (repo, home) = repo(dir.path());
    let service = service(dir.path());
    let req = Request {
        source: Some("agent-inferred".into()),
        category: Some("decision".into()),
        claude_memory: false,
        dry_run: true,
        ..request(&repo, &home, Some("acme:project:spine"))
    };
    let report = import_notes(&service, &Caller::anonymous(), &req).unwrap();
    assert_eq!(report.files.len(), 2, "CLAUDE.md and AGENTS.md only: {report:?}");
    assert!(report.files.iter().all(|f| f.source == Source::AgentInferred));
    assert!(report.files.iter().all(|f| f.category == Category::Decision));
    let bad = Request { source: Some("rumour".into()), ..req.clone() };
    assert!(invalid(import_notes(&service, &Caller::anonymous(), &bad)).contains("--source"));
    let bad = Request { category: Some("gossip".into()), ..req };
    assert!(invalid(import_notes(&service, &Caller::anonymous(), &bad)).contains("--category"));
}

#[test]
fn the_scope_comes_from_the_flag_then_spine_toml_then_the_one_existing_scope() {
    let dir = tempfile::tempdir().unwrap();
    let (repo, home) = repo(dir.path());
    let service = service(dir.path());
    let caller = Caller::anonymous();
    let dry = |scope: Option<&str>| {
        import_notes(&service, &caller, &Request { dry_run: true, ..request(&repo, &home, scope) })
    };
    assert!(
        invalid(dry(Some("rule:repo:spine"))).contains("rule: scopes hold rule records"),
        "a rule scope is no memory scope"
    );
    std::fs::write(repo.join(".spine.toml"), "scope = \"team:project:spine\"\n").unwrap();
    assert_eq!(dry(None).unwrap().scope.as_str(), "team:project:spine");
    assert_eq!(dry(Some("acme:project:spine")).unwrap().scope.as_str(), "acme:project:spine");
    std::fs::remove_file(repo.join(".spine.toml")).unwrap();

    // Two existing scopes of the repository: the operator chooses.
    for scope in ["acme:project:spine", "team:project:spine"] {
        let one =
            Request { files: vec![repo.join("AGENTS.md")], ..request(&repo, &home, Some(scope)) };
        import_notes(&service, &caller, &one).unwrap();
    }
    let many = invalid(dry(None));
    assert!(many.contains("several scopes") && many.contains("team:project:spine"), "{many}");
}

#[test]
fn outside_a_repository_the_files_must_be_named() {
    let dir = tempfile::tempdir().unwrap();
    let service = service(dir.path());
    let outside = Request { cwd: dir.path().to_path_buf(), ..Request::default() };
    let refused = invalid(import_notes(&service, &Caller::anonymous(), &outside));
    assert!(refused.contains("not in a git repository"), "{refused}");
    let empty = dir.path().join("empty");
    std::fs::create_dir_all(empty.join(".git")).unwrap();
    let nothing = Request { cwd: empty, ..Request::default() };
    let refused = invalid(import_notes(&service, &Caller::anonymous(), &nothing));
    assert!(refused.contains("nothing to import"), "{refused}");
    let missing = Request {
        files: vec![dir.path().join("absent.md")],
        scope: Some("acme:project:x".into()),
        ..nothing
    };
    match import_notes(&service, &Caller::anonymous(), &missing) {
        Err(Error::Io { context, .. }) => assert!(context.contains("absent.md"), "{context}"),
        other => panic!("expected Io, got {other:?}"),
    }
}
