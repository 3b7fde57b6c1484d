//! Spine's transports: the MCP tools (rmcp) over stdio and streamable HTTP, the Connect API
//! (`connect`, `spine.v1.MemoryService`), the web console, `/metrics`, `/healthz` and the
//! OIDC bearer check (`auth`), all on one axum router ([`http_router`]).
//!
//! Each tool is a thin adapter: parse the JSON arguments into the service's typed struct,
//! call the service on a blocking thread (SQLite and model inference must never block the
//! async runtime), and render the typed result or error. No business rule lives here.
//!
//! Key design decision: every tool takes its arguments as a raw JSON object and parses them
//! with `spine_service::args::parse_args`, rather than letting rmcp deserialise them. That
//! way a malformed argument becomes our field-and-hint error envelope (SPEC Errors 1), not
//! a protocol-level error the agent cannot act on. The advertised input schema is still the
//! typed struct's.
#![deny(missing_docs)]

pub mod auth;
pub mod connect;
mod console;
mod guard;
mod http;
mod invoke;
pub mod metrics;
mod prompts;
pub mod schema;
pub mod stdio;
mod tools;
pub mod trace;

pub use http::{
    DEFAULT_MAX_SESSIONS, DEFAULT_SESSION_IDLE_TIMEOUT, HttpOptions, RESOURCE_METADATA_PATH,
    http_router, trim_system_allocator,
};
pub use tools::{Identity, SpineMcp};
pub use trace::{Traced, Transport};
