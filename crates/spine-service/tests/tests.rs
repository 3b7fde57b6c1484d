//! Service tests: every operation through `Service`, with the real model and a real SQLite store.
//!
//! One test binary for the crate (linking one binary per file cost minutes of CI).

mod budget;
mod common;
mod knowledge;
mod lifecycle;
mod related;
mod rerank;
mod service;
mod similar;
