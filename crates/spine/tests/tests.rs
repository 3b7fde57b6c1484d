//! End-to-end tests: the real `spine` binary driven by MCP clients and run as an operator command.
//!
//! One test binary for the crate (linking one binary per file cost minutes of CI).

mod audit;
mod auth;
mod browser;
mod common;
mod connect;
mod crash;
mod doctor;
mod e2e;
mod hook;
mod hostile;
mod image;
mod install;
mod load;
mod notes;
mod otel;
mod pgfaults;
mod postgres;
mod powercut;
mod reindex;
mod review;
mod summarize;
mod transfer;
