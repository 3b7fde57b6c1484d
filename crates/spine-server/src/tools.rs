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
use spine_core::audit::Lane;
use spine_service::args::{
    BatchIdsArgs, DeleteAllArgs, IdArgs, ListMemoryArgs, ListRulesArgs, ListScheduledArgs,
    ListTagsArgs, RelatedMemoriesArgs, ScheduleMemoryArgs, SearchDiscoveryArgs, SearchMemoryArgs,
    SetVisibilityArgs, StoreDiscoveryArgs, StoreMemoryArgs, StoreRuleArgs, SupersedeMemoryArgs,
    UpdateMemoryArgs, parse_args,
};
use spine_service::views::Returned;
use spine_service::views::{
    BatchResult, DiscoveryResult, ListResult, MemoryView, RelatedResult, RulesResult, SearchResult,
    Status, Stored, SupersedeResult, TagsResult,
};
use spine_service::{Caller, Service};

use crate::auth::Verifier;
use crate::invoke::Origin;
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

/// The client that sent a request, as it named itself: from the request's own `_meta`
/// (MCP 2026-07-28, which has no `initialize`), else from the session's `initialize`;
/// `name/version`, empty when neither says.
fn client_of(cx: &RequestContext<RoleServer>) -> String {
    let named =
        cx.meta.client_info().or_else(|| cx.peer.peer_info().map(|p| p.client_info.clone()));
    match named {
        Some(i) if i.version.is_empty() => i.name,
        Some(i) => format!("{}/{}", i.name, i.version),
        None => String::new(),
    }
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

    /// Runs the tool `op` with `args` for the call's caller ([`crate::invoke::invoke`]) and
    /// renders the outcome: the result as structured content, or Spine's error envelope.
    async fn run<A, R>(
        &self,
        tool: &'static str,
        args: JsonObject,
        cx: &RequestContext<RoleServer>,
        op: fn(&Service, &Caller, A) -> Result<R, Error>,
    ) -> CallToolResult
    where
        A: DeserializeOwned + JsonSchema + Send + 'static,
        R: Serialize + Returned + Send + 'static,
    {
        let caller = self.caller(&cx.extensions).await;
        let make = move || parse_args::<A>(args);
        let encode = |r: R| {
            serde_json::to_value(r)
                .map_err(|e| Error::internal(format!("cannot encode result: {e}")))
        };
        let origin = Origin { lane: Lane::Mcp, client: client_of(cx) };
        match crate::invoke::invoke(origin, tool, &self.service, caller, make, op, encode).await {
            Ok(value) => CallToolResult::structured(value),
            Err(e) => error_result(&e),
        }
    }
}

#[tool_router(router = tool_router)]
impl SpineMcp {
    #[tool(
        name = "store_memory",
        description = "Stores a deliberate memory worth recalling in a later session: a decision, preference, convention or gotcha. Never secrets or transient state.",
        input_schema = input::<StoreMemoryArgs>(),
        output_schema = output::<Stored>(),
        annotations(read_only_hint = false, destructive_hint = false, idempotent_hint = false, open_world_hint = false)
    )]
    async fn store_memory(
        &self,
        Parameters(args): Parameters<JsonObject>,
        cx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        self.run("store_memory", args, &cx, Service::store_memory).await
    }

    #[tool(
        name = "schedule_memory",
        description = "Stores a memory valid only in [not_before, not_after) (at least one bound): hidden before, dropped after. For freezes, upcoming changes, expiring workarounds.",
        input_schema = input::<ScheduleMemoryArgs>(),
        output_schema = output::<Stored>(),
        annotations(read_only_hint = false, destructive_hint = false, idempotent_hint = false, open_world_hint = false)
    )]
    async fn schedule_memory(
        &self,
        Parameters(args): Parameters<JsonObject>,
        cx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        self.run("schedule_memory", args, &cx, Service::schedule_memory).await
    }

    #[tool(
        name = "search_memory",
        description = "Finds the memories nearest in meaning to a query. Search before deciding what may already be settled. Hidden states are counted in recall_gate_hidden.",
        input_schema = input::<SearchMemoryArgs>(),
        output_schema = output::<SearchResult>(),
        annotations(read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn search_memory(
        &self,
        Parameters(args): Parameters<JsonObject>,
        cx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        self.run("search_memory", args, &cx, Service::search_memory).await
    }

    #[tool(
        name = "list_memory",
        description = "Lists memories newest first, no query: load a scope's context at session start. Discoveries are not listed.",
        input_schema = input::<ListMemoryArgs>(),
        output_schema = output::<ListResult>(),
        annotations(read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn list_memory(
        &self,
        Parameters(args): Parameters<JsonObject>,
        cx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        self.run("list_memory", args, &cx, Service::list_memory).await
    }

    #[tool(
        name = "list_scheduled",
        description = "Lists your own windowed memories that recall hides: scheduled (not yet active), expired, or all.",
        input_schema = input::<ListScheduledArgs>(),
        output_schema = output::<ListResult>(),
        annotations(read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn list_scheduled(
        &self,
        Parameters(args): Parameters<JsonObject>,
        cx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        self.run("list_scheduled", args, &cx, Service::list_scheduled).await
    }

    #[tool(
        name = "get_memory",
        description = "Fetches one record in full, in any state.",
        input_schema = input::<IdArgs>(),
        output_schema = output::<MemoryView>(),
        annotations(read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn get_memory(
        &self,
        Parameters(args): Parameters<JsonObject>,
        cx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        self.run("get_memory", args, &cx, Service::get_memory).await
    }

    #[tool(
        name = "update_memory",
        description = "Rewrites one of your memories in place. Prefer supersede_memory when the old fact was wrong.",
        input_schema = input::<UpdateMemoryArgs>(),
        output_schema = output::<Status>(),
        annotations(read_only_hint = false, destructive_hint = true, idempotent_hint = true, open_world_hint = false)
    )]
    async fn update_memory(
        &self,
        Parameters(args): Parameters<JsonObject>,
        cx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        self.run("update_memory", args, &cx, Service::update_memory).await
    }

    #[tool(
        name = "delete_memory",
        description = "Permanently deletes one of your records (the only way to retire a rule). Prefer archive_memory when it may be wanted back.",
        input_schema = input::<IdArgs>(),
        output_schema = output::<Status>(),
        annotations(read_only_hint = false, destructive_hint = true, idempotent_hint = true, open_world_hint = false)
    )]
    async fn delete_memory(
        &self,
        Parameters(args): Parameters<JsonObject>,
        cx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        self.run("delete_memory", args, &cx, Service::delete_memory).await
    }

    #[tool(
        name = "delete_all",
        description = "Permanently deletes all your records in one scope. Only when the user asks.",
        input_schema = input::<DeleteAllArgs>(),
        output_schema = output::<Status>(),
        annotations(read_only_hint = false, destructive_hint = true, idempotent_hint = true, open_world_hint = false)
    )]
    async fn delete_all(
        &self,
        Parameters(args): Parameters<JsonObject>,
        cx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        self.run("delete_all", args, &cx, Service::delete_all).await
    }

    #[tool(
        name = "set_visibility",
        description = "Shares one of your records read-only with every authenticated caller, or makes it private. Not for rules.",
        input_schema = input::<SetVisibilityArgs>(),
        output_schema = output::<Status>(),
        annotations(read_only_hint = false, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn set_visibility(
        &self,
        Parameters(args): Parameters<JsonObject>,
        cx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        self.run("set_visibility", args, &cx, Service::set_visibility).await
    }

    #[tool(
        name = "list_tags",
        description = "Tags in use with record counts, most used first.",
        input_schema = input::<ListTagsArgs>(),
        output_schema = output::<TagsResult>(),
        annotations(read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn list_tags(
        &self,
        Parameters(args): Parameters<JsonObject>,
        cx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        self.run("list_tags", args, &cx, Service::list_tags).await
    }

    #[tool(
        name = "supersede_memory",
        description = "Corrects memories: stores a new record (store_memory's arguments) that replaces the records in supersedes; they leave recall but stay fetchable. If a target is not yours, not the live head of its chain, or a rule, nothing is written and each offender is named.",
        input_schema = input::<SupersedeMemoryArgs>(),
        output_schema = output::<SupersedeResult>(),
        annotations(read_only_hint = false, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn supersede_memory(
        &self,
        Parameters(args): Parameters<JsonObject>,
        cx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        self.run("supersede_memory", args, &cx, Service::supersede_memory).await
    }

    #[tool(
        name = "archive_memory",
        description = "Archives your records: out of recall, still fetchable, restorable. Only after the user agrees.",
        input_schema = input::<BatchIdsArgs>(),
        output_schema = output::<BatchResult>(),
        annotations(read_only_hint = false, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn archive_memory(
        &self,
        Parameters(args): Parameters<JsonObject>,
        cx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        self.run("archive_memory", args, &cx, Service::archive_memory).await
    }

    #[tool(
        name = "restore_memory",
        description = "Restores archived records of yours to recall.",
        input_schema = input::<BatchIdsArgs>(),
        output_schema = output::<BatchResult>(),
        annotations(read_only_hint = false, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn restore_memory(
        &self,
        Parameters(args): Parameters<JsonObject>,
        cx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        self.run("restore_memory", args, &cx, Service::restore_memory).await
    }

    #[tool(
        name = "related_memories",
        description = "Shows what connects to one memory: its supersession chain, records citing the same sources, records sharing tags, and its nearest neighbours by meaning.",
        input_schema = input::<RelatedMemoriesArgs>(),
        output_schema = output::<RelatedResult>(),
        annotations(read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn related_memories(
        &self,
        Parameters(args): Parameters<JsonObject>,
        cx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        self.run("related_memories", args, &cx, Service::related_memories).await
    }

    #[tool(
        name = "store_discovery",
        description = "Stores citation-backed understanding of the codebase: a map (layout) or a fact (a pinned, checkable claim). Recalled by search_discovery, not list_memory.",
        input_schema = input::<StoreDiscoveryArgs>(),
        output_schema = output::<Stored>(),
        annotations(read_only_hint = false, destructive_hint = false, idempotent_hint = false, open_world_hint = false)
    )]
    async fn store_discovery(
        &self,
        Parameters(args): Parameters<JsonObject>,
        cx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        self.run("store_discovery", args, &cx, Service::store_discovery).await
    }

    #[tool(
        name = "search_discovery",
        description = "Finds discoveries nearest in meaning to a question. Check pins before relying on a fact.",
        input_schema = input::<SearchDiscoveryArgs>(),
        output_schema = output::<DiscoveryResult>(),
        annotations(read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn search_discovery(
        &self,
        Parameters(args): Parameters<JsonObject>,
        cx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        self.run("search_discovery", args, &cx, Service::search_discovery).await
    }

    #[tool(
        name = "store_rule",
        description = "Stores a rule, only after the user approved it. Rules are shared, never superseded; list_rules loads them.",
        input_schema = input::<StoreRuleArgs>(),
        output_schema = output::<Stored>(),
        annotations(read_only_hint = false, destructive_hint = false, idempotent_hint = false, open_world_hint = false)
    )]
    async fn store_rule(
        &self,
        Parameters(args): Parameters<JsonObject>,
        cx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        self.run("store_rule", args, &cx, Service::store_rule).await
    }

    #[tool(
        name = "list_rules",
        description = "Lists the rules in force, oldest first: load them at session start and follow them.",
        input_schema = input::<ListRulesArgs>(),
        output_schema = output::<RulesResult>(),
        annotations(read_only_hint = true, destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn list_rules(
        &self,
        Parameters(args): Parameters<JsonObject>,
        cx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        self.run("list_rules", args, &cx, Service::list_rules).await
    }
}

/// What the server tells an agent at connection time.
const INSTRUCTIONS: &str = "Spine is your long-term memory across sessions. At the start of \
a session load list_rules and list_memory for the scope; before deciding something, \
search_memory for what was already settled. Store only deliberate, durable knowledge \
(decisions, preferences, conventions, gotchas) with store_memory, never secrets or transient \
state; when a write reports `similar` records, supersede_memory the one it corrects. When a \
memory turns out wrong, supersede_memory it rather than storing a contradiction. \
Conventions shared by every tool: a scope is <run>:<tier>:<repo> (discovery:<name> and \
rule:repo:<repo> / rule:project:<project> hold discoveries and rules); an id is a record's \
UUID or its short_id; times are RFC 3339 (created_after inclusive, created_before \
exclusive); filters: tags = all of them, categories = any of them (omitted: every \
category); k defaults to 8 and limit to 20, at most 1000; scope is required unless \
cross_spine=true, which spans every scope you can read; results are compact (summary \
instead of content, no citations) unless full=true; max_chars caps the characters of the \
records returned (truncated_by_budget says it cut them; next_cursor resumes); page with \
next_cursor; batch tools answer one outcome per id, in order. Archived, superseded, expired and scheduled records \
leave recall (counted in recall_gate_hidden) but get_memory fetches any state.";

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
