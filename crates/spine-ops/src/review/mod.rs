//! `spine spine-review`: invariants, consolidation, purge and archive over the store contract.

pub mod verify;
