//! The Connect API: `spine.v1.MemoryService` at `/spine.v1.MemoryService/<Method>` on the
//! port of `/mcp` (Connect protocol, unary, JSON and binary protobuf codecs).
//!
//! Key design decision: a request message converts into the arguments of the MCP tool it
//! mirrors (`TryFrom`, in `request.rs`, with the tool's checks and envelopes) and runs the
//! same `Service` function through the same call path (`crate::invoke`: the blocking
//! thread, metrics), so validation, the recall gate, owner gating and not-found
//! indistinguishability are the tools' by construction; the result converts into the
//! response message (`From` on the views, in `response.rs`). Neither direction goes
//! through JSON. Spine's error envelope becomes a Connect error: its code, and the message
//! naming the field and the hint.

use std::sync::Arc;

use connectrpc::{
    ConnectError, ErrorCode as ConnectCode, ErrorDetail, RequestContext, Response, ServiceRequest,
    ServiceResult,
};
use spine_core::audit::Lane;
use spine_core::{Caller, Error, ErrorCode, ListState};
use spine_service::Service;
use spine_service::views::Returned;

use crate::invoke::Origin;
use spine_service::args::{
    BatchIdsArgs, IdArgs, ListMemoryArgs, ListRulesArgs, ListTagsArgs, RelatedMemoriesArgs,
    SearchMemoryArgs,
};
use tracing::Instrument;

mod request;
mod response;

/// The generated messages and service trait.
#[allow(missing_docs, clippy::all, clippy::pedantic)]
pub mod proto {
    connectrpc::include_generated!();
}

use proto::spine::v1::*;

/// The Connect router serving `spine.v1.MemoryService` over `service`; with `authenticated`,
/// every call needs the [`Caller`] the bearer-token layer put in the request.
pub fn router(service: Service, authenticated: bool) -> connectrpc::Router {
    Arc::new(SpineConnect { service, authenticated }).register(connectrpc::Router::new())
}

struct SpineConnect {
    service: Service,
    authenticated: bool,
}

/// Spine's error as a Connect error: the same class; the field and hint as a
/// `spine.v1.ErrorInfo` detail, and in the message for people.
fn connect_error(e: &Error) -> ConnectError {
    let code = match e.code {
        ErrorCode::InvalidArgument => ConnectCode::InvalidArgument,
        ErrorCode::NotFound => ConnectCode::NotFound,
        ErrorCode::FailedPrecondition => ConnectCode::FailedPrecondition,
        ErrorCode::Conflict => ConnectCode::AlreadyExists,
        ErrorCode::Unauthenticated => ConnectCode::Unauthenticated,
        ErrorCode::Unavailable => ConnectCode::Unavailable,
        _ => ConnectCode::Internal,
    };
    let mut message = e.message.clone();
    match (&e.field, e.hint) {
        (Some(field), Some(hint)) => {
            message.push_str(&format!(" (field: {field}; hint: {})", hint.as_str()))
        }
        (Some(field), None) => message.push_str(&format!(" (field: {field})")),
        (None, Some(hint)) => message.push_str(&format!(" (hint: {})", hint.as_str())),
        (None, None) => {}
    }
    let mut error = ConnectError::new(code, message);
    if e.field.is_some() || e.hint.is_some() {
        let info = ErrorInfo {
            field: e.field.clone().unwrap_or_default(),
            hint: e.hint.map(|h| h.as_str().to_owned()).unwrap_or_default(),
            ..Default::default()
        };
        error = error.with_detail(ErrorDetail::from_message(ERROR_INFO, &info));
    }
    error
}

/// The type name of the error detail that carries a Spine error's field and hint.
pub const ERROR_INFO: &str = "spine.v1.ErrorInfo";

impl SpineConnect {
    fn caller(&self, ctx: &RequestContext) -> Result<Caller, Error> {
        if !self.authenticated {
            return Ok(Caller::anonymous());
        }
        ctx.extensions()
            .get::<Caller>()
            .cloned()
            .ok_or_else(|| Error::unauthenticated("this request carries no verified bearer token"))
    }

    /// Runs `op` for the caller with the arguments `message` converts into
    /// ([`crate::invoke::invoke`]), and converts its result into the response `P`.
    async fn call<M, A, R, P>(
        &self,
        method: &'static str,
        ctx: &RequestContext,
        message: M,
        op: impl FnOnce(&Service, &Caller, A) -> Result<R, Error> + Send + 'static,
    ) -> ServiceResult<P>
    where
        M: Send + 'static,
        A: TryFrom<M, Error = Error>,
        R: Into<P> + Returned + Send + 'static,
    {
        let caller = self.caller(ctx);
        let make = move || A::try_from(message);
        let encode = |r: R| Ok(r.into());
        // Connect has no handshake: the client is what its User-Agent says.
        let client = ctx
            .header(axum::http::header::USER_AGENT)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let origin = Origin { lane: Lane::Connect, client };
        let header = |name: &str| ctx.header(name).and_then(|v| v.to_str().ok());
        let span = crate::trace::connect_span(method, header("traceparent"), header("tracestate"));
        let call = crate::invoke::invoke(origin, method, &self.service, caller, make, op, encode);
        match call.instrument(span.clone()).await {
            Ok(p) => Response::ok(p),
            Err(e) => {
                crate::trace::record_error(&span, e.code.as_str());
                Err(connect_error(&e))
            }
        }
    }
}

/// Declares methods that convert their request into a tool's arguments and run the tool's
/// operation: `name(Request) -> Response = "Method", Arguments, operation;`.
macro_rules! methods {
    ($($name:ident($req:ty) -> $resp:ty = $method:literal, $args:ty, $op:expr;)*) => {$(
        async fn $name(
            &self,
            ctx: RequestContext,
            request: ServiceRequest<'_, $req>,
        ) -> ServiceResult<$resp> {
            let r = request.to_owned_message();
            self.call::<_, $args, _, _>($method, &ctx, r, $op).await
        }
    )*};
}

// The methods name their concrete response types (the trait allows any `Encodable`).
#[allow(refining_impl_trait)]
impl MemoryService for SpineConnect {
    methods! {
        search_memories(SearchMemoriesRequest) -> SearchMemoriesResponse =
            "SearchMemories", SearchMemoryArgs, Service::search_memory;
        get_memory(GetMemoryRequest) -> GetMemoryResponse =
            "GetMemory", IdArgs, Service::get_memory;
        archive_memory(ArchiveMemoryRequest) -> BatchResponse =
            "ArchiveMemory", BatchIdsArgs, Service::archive_memory;
        restore_memory(RestoreMemoryRequest) -> BatchResponse =
            "RestoreMemory", BatchIdsArgs, Service::restore_memory;
        list_scopes(ListScopesRequest) -> ListScopesResponse =
            "ListScopes", NoArgs, |s: &Service, c: &Caller, _| s.scope_counts(c);
        list_tags(ListTagsRequest) -> ListTagsResponse =
            "ListTags", ListTagsArgs, Service::list_tags;
        related_memories(RelatedMemoriesRequest) -> RelatedMemoriesResponse =
            "RelatedMemories", RelatedMemoriesArgs, Service::related_memories;
        list_rules(ListRulesRequest) -> ListRulesResponse =
            "ListRules", ListRulesArgs, Service::list_rules;
        get_memory_history(GetMemoryHistoryRequest) -> GetMemoryHistoryResponse =
            "GetMemoryHistory", IdArgs, Service::memory_history;
    }

    async fn list_memories(
        &self,
        ctx: RequestContext,
        request: ServiceRequest<'_, ListMemoriesRequest>,
    ) -> ServiceResult<ListMemoriesResponse> {
        let r = request.to_owned_message();
        // Without `state`, list_memory exactly; with it, the records in that state
        // (discoveries included), as the console browses them.
        match r.state.clone().filter(|s| !s.is_empty()) {
            None => {
                self.call::<_, ListMemoryArgs, _, _>("ListMemories", &ctx, r, Service::list_memory)
                    .await
            }
            Some(state) => {
                let op = move |s: &Service, c: &Caller, a: ListMemoryArgs| {
                    s.browse_memory(c, a, ListState::parse("state", &state)?)
                };
                self.call("ListMemories", &ctx, r, op).await
            }
        }
    }
}

/// ListScopes takes no arguments.
struct NoArgs;

impl TryFrom<ListScopesRequest> for NoArgs {
    type Error = Error;

    fn try_from(_: ListScopesRequest) -> Result<Self, Error> {
        Ok(NoArgs)
    }
}

#[cfg(test)]
mod tests;
