//! The MCP tool surface: names, descriptions, annotations and schemas of SPEC "Tool
//! annotations", each delegating to one service operation.

use std::sync::{Arc, LazyLock};

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{
    CallToolResult, ContentBlock, Extensions, GetPromptRequestParams, GetPromptResponse,
    Implementation, JsonObject, ListPromptsResult, ListResourceTemplatesResult,
    ListResourcesResult, PaginatedRequestParams, ReadResourceRequestParams, ReadResourceResponse,
    ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler, tool, tool_handler, tool_router};
use schemars::JsonSchema;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;
use spine_core::Error;
use spine_service::args::{
    BatchIdsArgs, DeleteAllArgs, IdArgs, ListMemoryArgs, ListRulesArgs, ListScheduledArgs,
    ListTagsArgs, RelatedMemoriesArgs, ScheduleMemoryArgs, SearchDiscoveryArgs, SearchMemoryArgs,
    SetVisibilityArgs, StoreDiscoveryArgs, StoreMemoryArgs, StoreRuleArgs, SupersedeMemoryArgs,
    UpdateMemoryArgs, parse_args,
};
use spine_service::views::{
    BatchResult, DiscoveryResult, ListResult, MemoryView, RelatedResult, RulesResult, SearchResult,
    Status, Stored, SupersedeResult, TagsResult,
};
use spine_service::{Caller, Service};

use crate::auth::Verifier;
use crate::prompts;
use crate::schema::{input, output};

/// Renders a service error as a tool error result: `isError: true` and one text block holding
/// `{"error": {code, field, hint, message}}` (docs/errors.md).
///
/// No `structuredContent`: MCP says structured content must conform to the tool's
/// `outputSchema`, which describes the success result, and the TypeScript SDK validates it
/// on error results too, so an envelope there made the client throw instead of showing the
/// agent what to fix.
pub fn error_result(e: &Error) -> CallToolResult {
    let mut body = serde_json::Map::new();
    body.insert("code".into(), json!(e.code.as_str()));
    if let Some(field) = &e.field {
        body.insert("field".into(), json!(field));
    }
    if let Some(hint) = e.hint {
        body.insert("hint".into(), json!(hint.as_str()));
    }
    body.insert("message".into(), json!(e.message));
    CallToolResult::error(vec![ContentBlock::text(json!({ "error": body }).to_string())])
}

/// Where the identity of a tool call comes from (SPEC Authentication).
#[derive(Clone)]
pub enum Identity {
    /// OIDC disabled: every caller is the anonymous bucket (empty actor and owner).
    Anonymous,
    /// Streamable HTTP with OIDC: the HTTP layer verified this request's bearer token and
    /// put the [`Caller`] in the request's extensions (per call, not per session).
    PerRequest,
    /// stdio with OIDC: the token from the environment, verified again on every call so an
    /// expired token stops working.
    Token {
        /// The verifier.
        verifier: Verifier,
        /// The bearer token.
        token: Arc<str>,
    },
}

/// The MCP server: one instance per session, all sharing one [`Service`].
#[derive(Clone)]
pub struct SpineMcp {
    service: Service,
    identity: Identity,
    tool_router: ToolRouter<SpineMcp>,
}

impl SpineMcp {
    /// A server over `service` for anonymous callers (OIDC disabled).
    pub fn new(service: Service) -> Self {
        Self::with_identity(service, Identity::Anonymous)
    }

    /// A server over `service` taking each call's identity from `identity`.
    pub fn with_identity(service: Service, identity: Identity) -> Self {
        // Built once per process: a session clones the routes (Arcs and static strings).
        static ROUTER: LazyLock<ToolRouter<SpineMcp>> = LazyLock::new(SpineMcp::tool_router);
        SpineMcp { service, identity, tool_router: ROUTER.clone() }
    }

    /// The verified caller of one call.
    async fn caller(&self, ext: &Extensions) -> Result<Caller, Error> {
        match &self.identity {
            Identity::Anonymous => Ok(Caller::anonymous()),
            Identity::PerRequest => ext
                .get::<axum::http::request::Parts>()
                .and_then(|parts| parts.extensions.get::<Caller>())
                .cloned()
                .ok_or_else(|| {
                    Error::unauthenticated("this request carries no verified bearer token")
                }),
            Identity::Token { verifier, token } => verifier
                .verify(token)
                .await
                .map_err(|e| Error::unauthenticated(format!("SPINE_TOKEN was rejected: {e}"))),
        }
    }

    /// Parses `args` as `A`, runs `op` on a blocking thread, renders the outcome.
    async fn run<A, R>(
        &self,
        args: JsonObject,
        ext: &Extensions,
        op: fn(&Service, &Caller, A) -> Result<R, Error>,
    ) -> CallToolResult
    where
        A: DeserializeOwned + JsonSchema + Send + 'static,
        R: Serialize + Send + 'static,
    {
        let caller = match self.caller(ext).await {
            Ok(caller) => caller,
            Err(e) => return error_result(&e),
        };
        let service = self.service.clone();
        let outcome = tokio::task::spawn_blocking(move || {
            let a = parse_args::<A>(args)?;
            op(&service, &caller, a)
        })
        .await;
        let result = match outcome {
            Ok(r) => r,
            Err(join) => {
                tracing::error!(error = %join, "tool task failed");
                Err(Error::internal("the operation failed unexpectedly"))
            }
        };
        match result.and_then(|r| {
            serde_json::to_value(r)
                .map_err(|e| Error::internal(format!("cannot encode result: {e}")))
        }) {
            Ok(value) => CallToolResult::structured(value),
            Err(e) => {
                if e.code == spine_core::ErrorCode::Internal {
                    tracing::error!(error = %e, "tool failed");
                }
                error_result(&e)
            }
        }
    }
}

#[tool_router(router = tool_router)]
impl SpineMcp {
    #[tool(
        name = "store_memory",
        description = "Persists a deliberate memory (not transient state, secrets or timestamps): a decision, preference, convention or gotcha worth recalling in a later session. Returns the new record's id and short_id.",
        input_schema = input::<StoreMemoryArgs>(),
        output_schema = output::<Stored>(),
        annotations(read_only_hint = false, destructive_hint = false, idempotent_hint = false, open_world_hint = false)
    )]
    async fn store_memory(
        &self,
        Parameters(args): Parameters<JsonObject>,
        ext: Extensions,
    ) -> CallToolResult {
        self.run(args, &ext, Service::store_memory).await
    }

    #[tool(
        name = "schedule_memory",
        description = "Persists a memory that only applies within a time window: hidden from recall until not_before, dropped from recall at not_after (RFC 3339; at least one). Use for temporary freezes, upcoming changes, expiring workarounds. Returns id and short_id.",
        input_schema = input::<ScheduleMemoryArgs>(),
        output_schema = output::<Stored>(),
        annotations(read_only_hint = false, destructive_hint = false, idempotent_hint = false, open_world_hint = false)
    )]
    async fn schedule_memory(
        &self,
        Parameters(args): Parameters<JsonObject>,
        ext: Extensions,
    ) -> CallToolResult {
        self.run(args, &ext, Service::schedule_memory).await
    }

    #[tool(
        name = "search_memory",
        description = "Finds the memories nearest in meaning to a natural-language query within a scope (or every readable scope with cross_spine). Call before deciding something the user or a past session may already have settled. Compact results by default (summary, no citations); full=true for everything. Archived, superseded, expired and scheduled records are hidden (counted in recall_gate_hidden).",
        input_schema = input::<SearchMemoryArgs>(),
        output_schema = output::<SearchResult>(),
        annotations(read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn search_memory(
        &self,
        Parameters(args): Parameters<JsonObject>,
        ext: Extensions,
    ) -> CallToolResult {
        self.run(args, &ext, Service::search_memory).await
    }

    #[tool(
        name = "list_memory",
        description = "Lists memories most recent first without a query: the session bootstrap. Page with next_cursor (or offset). Discoveries are never listed; hidden states are counted in recall_gate_hidden.",
        input_schema = input::<ListMemoryArgs>(),
        output_schema = output::<ListResult>(),
        annotations(read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn list_memory(
        &self,
        Parameters(args): Parameters<JsonObject>,
        ext: Extensions,
    ) -> CallToolResult {
        self.run(args, &ext, Service::list_memory).await
    }

    #[tool(
        name = "list_scheduled",
        description = "Lists your own windowed memories that recall is hiding: state=scheduled (not active yet, the default), expired (window ended) or all. Only ever your own records.",
        input_schema = input::<ListScheduledArgs>(),
        output_schema = output::<ListResult>(),
        annotations(read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn list_scheduled(
        &self,
        Parameters(args): Parameters<JsonObject>,
        ext: Extensions,
    ) -> CallToolResult {
        self.run(args, &ext, Service::list_scheduled).await
    }

    #[tool(
        name = "get_memory",
        description = "Fetches one record in full by id or short_id, in any state (archived, superseded, expired and scheduled included). Use when a recall result's summary is not enough.",
        input_schema = input::<IdArgs>(),
        output_schema = output::<MemoryView>(),
        annotations(read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn get_memory(
        &self,
        Parameters(args): Parameters<JsonObject>,
        ext: Extensions,
    ) -> CallToolResult {
        self.run(args, &ext, Service::get_memory).await
    }

    #[tool(
        name = "update_memory",
        description = "Rewrites one of your memories in place: new content (re-embedded), and optionally tags (replace the set), summary, and shared. If you wrote the record's summary and change the content, send summary too. Prefer supersede_memory when the old fact was wrong and its history matters.",
        input_schema = input::<UpdateMemoryArgs>(),
        output_schema = output::<Status>(),
        annotations(read_only_hint = false, destructive_hint = true, idempotent_hint = true, open_world_hint = false)
    )]
    async fn update_memory(
        &self,
        Parameters(args): Parameters<JsonObject>,
        ext: Extensions,
    ) -> CallToolResult {
        self.run(args, &ext, Service::update_memory).await
    }

    #[tool(
        name = "delete_memory",
        description = "Permanently deletes one of your records by id or short_id (rules included: the only way to retire one). Prefer archive when the user may want it back.",
        input_schema = input::<IdArgs>(),
        output_schema = output::<Status>(),
        annotations(read_only_hint = false, destructive_hint = true, idempotent_hint = true, open_world_hint = false)
    )]
    async fn delete_memory(
        &self,
        Parameters(args): Parameters<JsonObject>,
        ext: Extensions,
    ) -> CallToolResult {
        self.run(args, &ext, Service::delete_memory).await
    }

    #[tool(
        name = "delete_all",
        description = "Permanently deletes every one of your own records in one scope (others' records are untouched). Only when the user asks to wipe a scope.",
        input_schema = input::<DeleteAllArgs>(),
        output_schema = output::<Status>(),
        annotations(read_only_hint = false, destructive_hint = true, idempotent_hint = true, open_world_hint = false)
    )]
    async fn delete_all(
        &self,
        Parameters(args): Parameters<JsonObject>,
        ext: Extensions,
    ) -> CallToolResult {
        self.run(args, &ext, Service::delete_all).await
    }

    #[tool(
        name = "set_visibility",
        description = "Shares one of your records with every authenticated caller (shared=true) or makes it private again (shared=false). Sharing grants read only. Not for rules, which are always shared.",
        input_schema = input::<SetVisibilityArgs>(),
        output_schema = output::<Status>(),
        annotations(read_only_hint = false, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn set_visibility(
        &self,
        Parameters(args): Parameters<JsonObject>,
        ext: Extensions,
    ) -> CallToolResult {
        self.run(args, &ext, Service::set_visibility).await
    }

    #[tool(
        name = "list_tags",
        description = "Lists the tags in use with how many recall-visible records carry each, most used first; use it to pick tag filters for search_memory and list_memory.",
        input_schema = input::<ListTagsArgs>(),
        output_schema = output::<TagsResult>(),
        annotations(read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn list_tags(
        &self,
        Parameters(args): Parameters<JsonObject>,
        ext: Extensions,
    ) -> CallToolResult {
        self.run(args, &ext, Service::list_tags).await
    }

    #[tool(
        name = "supersede_memory",
        description = "Corrects memories: stores a new record (same arguments as store_memory) that replaces one or more of your records listed in supersedes (UUIDs or short_ids). The old records stay fetchable by get_memory but leave recall. Each target must be the live head of its chain and not a rule; otherwise nothing is written and every offending target is named. validate_only=true checks without writing; idempotency_key makes retries safe. Never automatic: call it when a stored memory turned out wrong or outdated.",
        input_schema = input::<SupersedeMemoryArgs>(),
        output_schema = output::<SupersedeResult>(),
        annotations(read_only_hint = false, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn supersede_memory(
        &self,
        Parameters(args): Parameters<JsonObject>,
        ext: Extensions,
    ) -> CallToolResult {
        self.run(args, &ext, Service::supersede_memory).await
    }

    #[tool(
        name = "archive_memory",
        description = "Archives 1 to 1000 of your records (ids or short_ids): they leave recall but stay fetchable with get_memory and can be restored. One outcome per id in input order: archived, already_archived or not_found. Use only after the user has agreed.",
        input_schema = input::<BatchIdsArgs>(),
        output_schema = output::<BatchResult>(),
        annotations(read_only_hint = false, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn archive_memory(
        &self,
        Parameters(args): Parameters<JsonObject>,
        ext: Extensions,
    ) -> CallToolResult {
        self.run(args, &ext, Service::archive_memory).await
    }

    #[tool(
        name = "restore_memory",
        description = "Restores 1 to 1000 archived records of yours (ids or short_ids) to recall. One outcome per id in input order: restored, not_archived or not_found. Supersession and expiry are not affected.",
        input_schema = input::<BatchIdsArgs>(),
        output_schema = output::<BatchResult>(),
        annotations(read_only_hint = false, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn restore_memory(
        &self,
        Parameters(args): Parameters<JsonObject>,
        ext: Extensions,
    ) -> CallToolResult {
        self.run(args, &ext, Service::restore_memory).await
    }

    #[tool(
        name = "related_memories",
        description = "On demand, shows what is connected to one memory: its supersession chain (predecessors and successors with depth), records citing the same files, commits or URLs, records sharing tags (with a Jaccard tag_weight), and the nearest records by meaning in its scope (k widens only this last group). Each related record appears once with every edge type linking it.",
        input_schema = input::<RelatedMemoriesArgs>(),
        output_schema = output::<RelatedResult>(),
        annotations(read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn related_memories(
        &self,
        Parameters(args): Parameters<JsonObject>,
        ext: Extensions,
    ) -> CallToolResult {
        self.run(args, &ext, Service::related_memories).await
    }

    #[tool(
        name = "store_discovery",
        description = "Persists citation-backed understanding of a codebase in a discovery:<...> scope (typically discovery:repo:<repo>): kind map (orientation, structure) or fact (a pinned, checkable claim), with 1 to 50 citations (file, commit, url, repo). Recalled on demand with search_discovery, never in list_memory. Pass id to replace one of your discoveries in place. Returns id and short_id.",
        input_schema = input::<StoreDiscoveryArgs>(),
        output_schema = output::<Stored>(),
        annotations(read_only_hint = false, destructive_hint = false, idempotent_hint = false, open_world_hint = false)
    )]
    async fn store_discovery(
        &self,
        Parameters(args): Parameters<JsonObject>,
        ext: Extensions,
    ) -> CallToolResult {
        self.run(args, &ext, Service::store_discovery).await
    }

    #[tool(
        name = "search_discovery",
        description = "Finds discoveries (citation-backed codebase understanding) nearest in meaning to a query, in one discovery scope or all (cross_spine), optionally only maps or only facts. Each hit carries its citations and created_at; check pins before relying on a fact.",
        input_schema = input::<SearchDiscoveryArgs>(),
        output_schema = output::<DiscoveryResult>(),
        annotations(read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn search_discovery(
        &self,
        Parameters(args): Parameters<JsonObject>,
        ext: Extensions,
    ) -> CallToolResult {
        self.run(args, &ext, Service::search_discovery).await
    }

    #[tool(
        name = "store_rule",
        description = "Persists a normative rule the user approved (only after the user approves it) in rule:repo:<repo> or rule:project:<project>, with a required one-line summary (at most 256 bytes). Rules are always shared and cannot be superseded; pass id to replace one of your rules in place (its short_id is kept). Returns id and short_id.",
        input_schema = input::<StoreRuleArgs>(),
        output_schema = output::<Stored>(),
        annotations(read_only_hint = false, destructive_hint = false, idempotent_hint = false, open_world_hint = false)
    )]
    async fn store_rule(
        &self,
        Parameters(args): Parameters<JsonObject>,
        ext: Extensions,
    ) -> CallToolResult {
        self.run(args, &ext, Service::store_rule).await
    }

    #[tool(
        name = "list_rules",
        description = "Lists the rules in force, oldest first, for the given rule scopes or every readable rule scope: load them at the start of a session and follow them. Compact (summary, no content) unless full=true; an advisory appears when a scope holds more than 50 rules.",
        input_schema = input::<ListRulesArgs>(),
        output_schema = output::<RulesResult>(),
        annotations(read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn list_rules(
        &self,
        Parameters(args): Parameters<JsonObject>,
        ext: Extensions,
    ) -> CallToolResult {
        self.run(args, &ext, Service::list_rules).await
    }
}

/// What the server tells an agent at connection time.
const INSTRUCTIONS: &str = "Spine is your long-term memory across sessions. At the start of \
a session call list_memory for the scope (<run>:<tier>:<repo>) to load recent context; before \
deciding something, search_memory for what was already settled. Store only deliberate, durable \
knowledge (decisions, preferences, conventions, gotchas) with store_memory; never secrets or \
transient state. Fetch a record in full with get_memory. When a memory turns out wrong, \
supersede_memory it rather than storing a contradiction. Load the user's rules with list_rules \
and follow them; search_discovery recalls cited facts about the codebase.";

impl SpineMcp {
    /// Runs `op` for the verified caller of `ctx` on a blocking thread, with Spine's error
    /// envelope in the MCP error's `data`.
    async fn with_caller<T: Send + 'static>(
        &self,
        ctx: &RequestContext<RoleServer>,
        op: impl FnOnce(&Service, &Caller) -> Result<T, Error> + Send + 'static,
    ) -> Result<T, McpError> {
        let caller = self.caller(&ctx.extensions).await.map_err(|e| prompts::mcp_error(&e))?;
        let service = self.service.clone();
        tokio::task::spawn_blocking(move || op(&service, &caller))
            .await
            .map_err(|e| McpError::internal_error(format!("the operation failed: {e}"), None))?
            .map_err(|e| prompts::mcp_error(&e))
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for SpineMcp {
    fn get_info(&self) -> ServerConfig {
        let capabilities = ServerCapabilities::builder()
            .enable_tools()
            .enable_prompts()
            .enable_resources()
            .build();
        ServerConfig::new(capabilities)
            .with_server_info(Implementation::new("spine", env!("CARGO_PKG_VERSION")))
            .with_instructions(INSTRUCTIONS)
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, McpError> {
        Ok(ListPromptsResult::with_all_items(prompts::prompts()))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, McpError> {
        if request.name != prompts::BOOTSTRAP {
            return Err(McpError::invalid_params(
                format!("no prompt {:?}; Spine offers {:?}", request.name, prompts::BOOTSTRAP),
                None,
            ));
        }
        let args = request.arguments;
        let result = self
            .with_caller(&ctx, move |service, caller| {
                prompts::bootstrap(service, caller, args.as_ref())
            })
            .await?;
        Ok(result.into())
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        let listed = self.with_caller(&ctx, prompts::resources).await?;
        Ok(ListResourcesResult::with_all_items(listed))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        Ok(ListResourceTemplatesResult::with_all_items(prompts::templates()))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        let uri = request.uri;
        let result = self
            .with_caller(&ctx, move |service, caller| prompts::read(service, caller, &uri))
            .await?;
        Ok(result.into())
    }
}
