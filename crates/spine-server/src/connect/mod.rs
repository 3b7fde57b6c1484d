//! The Connect API: `spine.v1.MemoryService` at `/spine.v1.MemoryService/<Method>` on the
//! port of `/mcp` (Connect protocol, unary, JSON and binary protobuf codecs).
//!
//! Key design decision: a request becomes the JSON arguments of the MCP tool it mirrors and
//! goes through the same call path as the tool (`crate::invoke`: `parse_args`, the blocking
//! thread, metrics) and the same `Service` function, so validation, the recall gate,
//! owner gating and not-found indistinguishability are the tools' by construction; the
//! tool's result is then read into the response message through proto3 JSON (whose parser
//! accepts the snake_case names the views use). Spine's error envelope becomes a Connect
//! error: its code, and the message naming the field and the hint.

use std::sync::Arc;

use connectrpc::{
    ConnectError, ErrorCode as ConnectCode, ErrorDetail, RequestContext, Response, ServiceRequest,
    ServiceResult,
};
use schemars::JsonSchema;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};
use spine_core::{Caller, Error, ErrorCode, ListState};
use spine_service::Service;

/// The generated messages and service trait.
#[allow(missing_docs, clippy::all, clippy::pedantic)]
pub mod proto {
    connectrpc::include_generated!();
}

use proto::spine::v1::*;

/// `ListMemories` without a limit lists this many (SPEC list_memory: the Connect API's
/// default).
const CONNECT_LIST_LIMIT: u64 = 1000;

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

/// A JSON object of the arguments that are set (absent and empty ones left out, as a tool
/// call would leave them out).
fn args(pairs: &[(&str, Value)]) -> Value {
    let mut m = Map::new();
    for (k, v) in pairs {
        let empty = match v {
            Value::Null => true,
            Value::Array(a) => a.is_empty(),
            Value::Bool(false) => true,
            _ => false,
        };
        if !empty {
            m.insert((*k).to_owned(), v.clone());
        }
    }
    Value::Object(m)
}

/// Moves the flattened cross-spine coverage keys of a result into a `coverage` object.
fn nest_coverage(mut v: Value) -> Value {
    if let Some(o) = v.as_object_mut() {
        let mut coverage = Map::new();
        for key in ["searched_scopes", "scopes_truncated", "scopes_unknown"] {
            if let Some(x) = o.remove(key) {
                coverage.insert(key.to_owned(), x);
            }
        }
        o.insert("coverage".into(), Value::Object(coverage));
    }
    v
}

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

    /// Runs the tool `op` with `arguments` for the caller ([`crate::invoke::invoke`]), and
    /// reads its result, reshaped by `shape`, into the response `P`.
    async fn call<A, R, P>(
        &self,
        method: &'static str,
        ctx: &RequestContext,
        arguments: Value,
        op: impl FnOnce(&Service, &Caller, A) -> Result<R, Error> + Send + 'static,
        shape: fn(Value) -> Value,
    ) -> ServiceResult<P>
    where
        A: DeserializeOwned + JsonSchema + Send + 'static,
        R: Serialize + Send + 'static,
        P: DeserializeOwned,
    {
        let Value::Object(arguments) = arguments else {
            return Err(connect_error(&Error::internal("arguments are not an object")));
        };
        let finish = |value: Value| {
            serde_json::from_value::<P>(shape(value))
                .map_err(|e| Error::internal(format!("cannot encode the response: {e}")))
        };
        let caller = self.caller(ctx);
        match crate::invoke::invoke("connect", method, &self.service, caller, arguments, op, finish)
            .await
        {
            Ok(p) => Response::ok(p),
            Err(e) => Err(connect_error(&e)),
        }
    }
}

fn unchanged(v: Value) -> Value {
    v
}

fn as_memory(v: Value) -> Value {
    json!({ "memory": v })
}

// The methods name their concrete response types (the trait allows any `Encodable`).
#[allow(refining_impl_trait)]
impl MemoryService for SpineConnect {
    async fn search_memories(
        &self,
        ctx: RequestContext,
        request: ServiceRequest<'_, SearchMemoriesRequest>,
    ) -> ServiceResult<SearchMemoriesResponse> {
        let r = request.to_owned_message();
        let a = args(&[
            ("query", json!(r.query)),
            ("scope", json!(r.scope)),
            ("k", json!(r.k)),
            ("tags", json!(r.tags)),
            ("categories", json!(r.categories)),
            ("created_after", json!(r.created_after)),
            ("created_before", json!(r.created_before)),
            ("full", json!(r.full)),
            ("cross_spine", json!(r.cross_spine)),
            ("max_chars", json!(r.max_chars)),
        ]);
        self.call("SearchMemories", &ctx, a, Service::search_memory, nest_coverage).await
    }

    async fn list_memories(
        &self,
        ctx: RequestContext,
        request: ServiceRequest<'_, ListMemoriesRequest>,
    ) -> ServiceResult<ListMemoriesResponse> {
        let r = request.to_owned_message();
        let limit = r.limit.filter(|l| *l > 0).unwrap_or(CONNECT_LIST_LIMIT);
        let a = args(&[
            ("scope", json!(r.scope)),
            ("limit", json!(limit)),
            ("cursor", json!(r.cursor)),
            ("offset", json!(r.offset)),
            ("tags", json!(r.tags)),
            ("categories", json!(r.categories)),
            ("created_after", json!(r.created_after)),
            ("created_before", json!(r.created_before)),
            ("full", json!(r.full)),
            ("cross_spine", json!(r.cross_spine)),
            ("max_chars", json!(r.max_chars)),
        ]);
        // Without `state`, list_memory exactly; with it, the records in that state
        // (discoveries included), as the console browses them.
        match r.state.as_deref().filter(|s| !s.is_empty()) {
            None => self.call("ListMemories", &ctx, a, Service::list_memory, nest_coverage).await,
            Some(state) => {
                let state = state.to_owned();
                let op = move |s: &Service, c: &Caller, a| {
                    s.browse_memory(c, a, ListState::parse("state", &state)?)
                };
                self.call("ListMemories", &ctx, a, op, nest_coverage).await
            }
        }
    }

    async fn get_memory(
        &self,
        ctx: RequestContext,
        request: ServiceRequest<'_, GetMemoryRequest>,
    ) -> ServiceResult<GetMemoryResponse> {
        let r = request.to_owned_message();
        let a = args(&[("id", json!(r.id))]);
        self.call("GetMemory", &ctx, a, Service::get_memory, as_memory).await
    }

    async fn archive_memory(
        &self,
        ctx: RequestContext,
        request: ServiceRequest<'_, ArchiveMemoryRequest>,
    ) -> ServiceResult<BatchResponse> {
        let r = request.to_owned_message();
        let a = json!({"ids": r.ids});
        self.call("ArchiveMemory", &ctx, a, Service::archive_memory, unchanged).await
    }

    async fn restore_memory(
        &self,
        ctx: RequestContext,
        request: ServiceRequest<'_, RestoreMemoryRequest>,
    ) -> ServiceResult<BatchResponse> {
        let r = request.to_owned_message();
        let a = json!({"ids": r.ids});
        self.call("RestoreMemory", &ctx, a, Service::restore_memory, unchanged).await
    }

    async fn list_scopes(
        &self,
        ctx: RequestContext,
        _request: ServiceRequest<'_, ListScopesRequest>,
    ) -> ServiceResult<ListScopesResponse> {
        self.call("ListScopes", &ctx, json!({}), list_scopes_op, unchanged).await
    }

    async fn list_tags(
        &self,
        ctx: RequestContext,
        request: ServiceRequest<'_, ListTagsRequest>,
    ) -> ServiceResult<ListTagsResponse> {
        let r = request.to_owned_message();
        let a = args(&[("scope", json!(r.scope)), ("limit", json!(r.limit))]);
        self.call("ListTags", &ctx, a, Service::list_tags, unchanged).await
    }

    async fn related_memories(
        &self,
        ctx: RequestContext,
        request: ServiceRequest<'_, RelatedMemoriesRequest>,
    ) -> ServiceResult<RelatedMemoriesResponse> {
        let r = request.to_owned_message();
        let a = args(&[
            ("id", json!(r.id)),
            ("k", json!(r.k)),
            ("full", json!(r.full)),
            ("max_chars", json!(r.max_chars)),
        ]);
        self.call("RelatedMemories", &ctx, a, Service::related_memories, unchanged).await
    }

    async fn list_rules(
        &self,
        ctx: RequestContext,
        request: ServiceRequest<'_, ListRulesRequest>,
    ) -> ServiceResult<ListRulesResponse> {
        let r = request.to_owned_message();
        let a = args(&[
            ("scopes", json!(r.scopes)),
            ("tags", json!(r.tags)),
            ("full", json!(r.full)),
            ("max_chars", json!(r.max_chars)),
        ]);
        self.call("ListRules", &ctx, a, Service::list_rules, nest_coverage).await
    }
}

/// ListScopes has no tool: its arguments are the empty object.
#[derive(serde::Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct NoArgs {}

/// The scopes the caller can read with their counts, as ListScopes' result object.
fn list_scopes_op(service: &Service, caller: &Caller, _: NoArgs) -> Result<Value, Error> {
    let (scopes, truncated) = service.scope_counts(caller)?;
    let scopes: Vec<Value> =
        scopes.into_iter().map(|(scope, n)| json!({"scope": scope, "records": n})).collect();
    Ok(json!({"scopes": scopes, "truncated": truncated}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_keep_the_envelope_in_the_message() {
        let e =
            Error::invalid("scope", spine_core::Hint::MalformedScope, "scope must look like a:b:c");
        let c = connect_error(&e);
        assert_eq!(c.code, ConnectCode::InvalidArgument);
        assert!(
            c.message
                .as_deref()
                .unwrap_or_default()
                .contains("field: scope; hint: malformed_scope")
        );
        assert_eq!(connect_error(&Error::not_found("id", "no memory")).code, ConnectCode::NotFound);
    }

    #[test]
    fn field_and_hint_travel_as_an_error_info_detail() {
        use buffa::Message;
        let e =
            Error::invalid("scope", spine_core::Hint::MalformedScope, "scope must look like a:b:c");
        let c = connect_error(&e);
        assert_eq!(c.details.len(), 1);
        assert_eq!(c.details[0].type_url, ERROR_INFO);
        let bytes = base64::Engine::decode(
            &base64::engine::general_purpose::STANDARD_NO_PAD,
            c.details[0].value.as_deref().unwrap(),
        )
        .unwrap();
        let info = ErrorInfo::decode_from_slice(&bytes).unwrap();
        assert_eq!((info.field.as_str(), info.hint.as_str()), ("scope", "malformed_scope"));
        // An error with neither carries no detail.
        assert!(connect_error(&Error::internal("a bug")).details.is_empty());
    }

    /// Every class of Spine error has its Connect code. failed_precondition, already_exists
    /// and internal come from no method of this API today (the rule-immutability and
    /// idempotency errors belong to MCP writes), so the mapping is checked here.
    #[test]
    fn every_error_class_has_its_connect_code() {
        let rule = spine_core::Hint::RuleImmutable;
        let cases = [
            (Error::invalid("k", spine_core::Hint::OutOfRange, "k"), ConnectCode::InvalidArgument),
            (Error::not_found("id", "no memory"), ConnectCode::NotFound),
            (Error::failed_precondition("id", rule, "a rule"), ConnectCode::FailedPrecondition),
            (
                Error::conflict("idempotency_key", spine_core::Hint::IdempotencyMismatch, "reused"),
                ConnectCode::AlreadyExists,
            ),
            (Error::unauthenticated("no token"), ConnectCode::Unauthenticated),
            (Error::unavailable("the model failed"), ConnectCode::Unavailable),
            (Error::internal("a bug"), ConnectCode::Internal),
        ];
        for (e, code) in cases {
            assert_eq!(connect_error(&e).code, code, "{e:?}");
        }
        let c = connect_error(&Error::failed_precondition("id", rule, "a rule is shared"));
        assert_eq!(
            c.message.as_deref(),
            Some("a rule is shared (field: id; hint: rule_immutable)")
        );
    }
}
