//! What a listing read takes, as values the service builds once and every engine reads the
//! same way: which records ([`Selection`]), which page of them ([`Page`]), and what a
//! related-records read matches on ([`Shared`]). `predicate.rs` renders them per engine.

use spine_core::Citation;

use crate::{Access, Cursor, Filter, Gate};

/// The records a read takes: those `access` reads that pass `filter` and `gate`.
#[derive(Debug, Clone, Copy)]
pub struct Selection<'a> {
    /// Who reads (the owner predicate).
    pub access: &'a Access,
    /// The hard pre-filters.
    pub filter: &'a Filter,
    /// The recall gate.
    pub gate: Gate,
}

/// An order of listing, by (created_at, id).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    /// Most recent first.
    Recent,
    /// Oldest first.
    Oldest,
}

impl Order {
    /// The ORDER BY terms over the row alias `m`.
    pub(crate) fn sql(self) -> &'static str {
        match self {
            Order::Recent => "m.created_at DESC, m.id DESC",
            Order::Oldest => "m.created_at ASC, m.id ASC",
        }
    }
}

/// One page of a listing: in `order`, strictly past `after` in that order, skipping
/// `offset` rows, at most `limit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Page {
    /// The order of the listing.
    pub order: Order,
    /// The last row of the previous page.
    pub after: Option<Cursor>,
    /// Rows to skip after `after`.
    pub offset: usize,
    /// At most this many rows.
    pub limit: usize,
}

impl Page {
    /// Most recent first (list_memory, the console).
    pub fn recent(after: Option<Cursor>, offset: usize, limit: usize) -> Self {
        Page { order: Order::Recent, after, offset, limit }
    }

    /// The first `limit` records, oldest first (list_rules).
    pub fn oldest(limit: usize) -> Self {
        Page { order: Order::Oldest, after: None, offset: 0, limit }
    }
}

/// What a related record has in common with the record it is related to: at least one of
/// these tags, or one of these citations (same `kind` and `ref`).
#[derive(Debug, Clone, Copy)]
pub enum Shared<'a> {
    /// Carries at least one of these tags.
    Tags(&'a [String]),
    /// Cites at least one of these.
    Citations(&'a [Citation]),
}

impl Shared<'_> {
    /// Whether nothing can match (no tag, no citation).
    pub(crate) fn is_empty(self) -> bool {
        match self {
            Shared::Tags(t) => t.is_empty(),
            Shared::Citations(c) => c.is_empty(),
        }
    }
}
