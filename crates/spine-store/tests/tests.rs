//! Store tests: the search index against SQL, and schema migrations.
//!
//! One test binary for the crate (linking one binary per file cost minutes of CI).

mod index;
mod migrations;
mod operator;
mod pg_review;
mod pg_search;
mod transfer;
