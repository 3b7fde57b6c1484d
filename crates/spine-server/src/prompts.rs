//! MCP prompts and resources: the session digest for clients that support prompts or
//! resources but run no hooks (`spine hook` is the other way in).
//!
//! - Prompt `bootstrap` (argument `repo`: a repository name or a scope) returns the digest
//!   `spine hook session-start` prints: the rules, then the most recent memories.
//! - Resources `spine://recent/<scope>` (a memory scope's most recent memories) and
//!   `spine://rules/<scope>` (a rule scope's rules), one per readable scope, and the
//!   templates for both.
//!
//! Errors use the MCP error object with Spine's envelope (`field`, `hint`) in `data`; a
//! scope the caller cannot read reads as empty, exactly like a scope without records.

use rmcp::ErrorData as McpError;
use rmcp::model::{
    GetPromptResult, Prompt, PromptArgument, PromptMessage, ReadResourceResult, Resource,
    ResourceContents, ResourceTemplate, Role,
};
use serde_json::json;
use spine_core::{Caller, Error, ErrorCode, Scope, ScopeKind};
use spine_service::Service;
use spine_service::digest::{DEFAULT_DIGEST_BUDGET, RepoScopes};

/// The one prompt.
pub const BOOTSTRAP: &str = "bootstrap";
const RECENT: &str = "spine://recent/";
const RULES: &str = "spine://rules/";
/// Resources listed at most (the templates reach every other scope).
const MAX_LISTED: usize = 200;

/// The prompts Spine offers.
pub fn prompts() -> Vec<Prompt> {
    let repo = PromptArgument::new("repo")
        .with_description(
            "The repository (its name, as in scopes <run>:<tier>:<repo>) or one scope to load",
        )
        .with_required(true);
    vec![Prompt::new(
        BOOTSTRAP,
        Some(
            "Load Spine memory for a repository at the start of a session: the rules the user \
             approved, then the most recent memories, each with its short_id.",
        ),
        Some(vec![repo]),
    )]
}

/// An MCP error carrying Spine's envelope.
pub fn mcp_error(e: &Error) -> McpError {
    let hint = e.hint.map(|h| h.as_str());
    let data =
        json!({"code": e.code.as_str(), "field": e.field, "hint": hint, "message": e.message});
    match e.code {
        ErrorCode::InvalidArgument => McpError::invalid_params(e.message.clone(), Some(data)),
        ErrorCode::NotFound => McpError::resource_not_found(e.message.clone(), Some(data)),
        _ => McpError::internal_error(e.message.clone(), Some(data)),
    }
}

fn text_of(service: &Service, caller: &Caller, scopes: &RepoScopes) -> Result<String, Error> {
    let digest = service.digest(caller, scopes, DEFAULT_DIGEST_BUDGET)?;
    Ok(match digest.text.is_empty() {
        true => format!(
            "Spine holds no rules or memories you can read for {:?} yet. Store what you learn \
             with store_memory (scope <run>:<tier>:{}).",
            scopes.repo,
            if scopes.repo.is_empty() { "<repo>" } else { &scopes.repo }
        ),
        false => digest.text,
    })
}

/// `prompts/get bootstrap {repo}`.
pub fn bootstrap(
    service: &Service,
    caller: &Caller,
    args: Option<&serde_json::Map<String, serde_json::Value>>,
) -> Result<GetPromptResult, Error> {
    let repo = args.and_then(|a| a.get("repo")).and_then(|v| v.as_str()).unwrap_or_default();
    let scopes = service.scopes_for(caller, repo)?;
    let text = text_of(service, caller, &scopes)?;
    Ok(GetPromptResult::new(vec![PromptMessage::new_text(Role::User, text)])
        .with_description(format!("Spine memory for {}", scopes.repo)))
}

/// The resources of the scopes `caller` can read.
pub fn resources(service: &Service, caller: &Caller) -> Result<Vec<Resource>, Error> {
    let mut out = Vec::new();
    for scope in service.readable_scopes(caller)?.into_iter().take(MAX_LISTED) {
        let (prefix, what) = match scope.kind() {
            ScopeKind::Memory => (RECENT, "most recent memories"),
            ScopeKind::Rule => (RULES, "rules"),
            ScopeKind::Discovery => continue,
        };
        out.push(
            Resource::new(format!("{prefix}{scope}"), format!("{what} of {scope}"))
                .with_description(format!("The {what} of {scope}, one line each with its short_id"))
                .with_mime_type("text/plain"),
        );
    }
    Ok(out)
}

/// The resource templates.
pub fn templates() -> Vec<ResourceTemplate> {
    vec![
        ResourceTemplate::new(format!("{RECENT}{{scope}}"), "recent")
            .with_description("The most recent memories of a memory scope <run>:<tier>:<repo>")
            .with_mime_type("text/plain"),
        ResourceTemplate::new(format!("{RULES}{{scope}}"), "rules")
            .with_description("The rules of rule:repo:<repo> or rule:project:<project>")
            .with_mime_type("text/plain"),
    ]
}

/// `resources/read uri`.
pub fn read(service: &Service, caller: &Caller, uri: &str) -> Result<ReadResourceResult, Error> {
    let bad = || {
        Error::invalid(
            "uri",
            spine_core::Hint::InvalidValue,
            format!("{uri:?} is not a Spine resource: use {RECENT}<scope> or {RULES}<scope>"),
        )
    };
    let (raw, want) = match (uri.strip_prefix(RECENT), uri.strip_prefix(RULES)) {
        (Some(s), _) => (s, ScopeKind::Memory),
        (_, Some(s)) => (s, ScopeKind::Rule),
        _ => return Err(bad()),
    };
    let scope = Scope::parse("uri", raw)?;
    if scope.kind() != want {
        return Err(bad());
    }
    let repo = scope.repo().to_owned();
    let scopes = match want {
        ScopeKind::Rule => RepoScopes { repo, memory: vec![], rules: vec![scope] },
        _ => RepoScopes { repo, memory: vec![scope], rules: vec![] },
    };
    let text = text_of(service, caller, &scopes)?;
    Ok(ReadResourceResult::new(vec![ResourceContents::text(text, uri)]))
}
