//! Recall: search_memory, list_memory, list_scheduled, list_tags — every one gated.

use spine_core::{Caller, Category, Error, ListState, ScheduledState, State};
use spine_store::{Access, Cursor, Filter, Gate, Page, ScopeFilter, Selection};

use crate::args::{ListMemoryArgs, ListScheduledArgs, ListTagsArgs, SearchMemoryArgs};
use crate::request::{
    ListRequest, Output, PageStart, ScheduledRequest, SearchRequest, TagsRequest, encode_cursor,
};
use crate::views::{
    Coverage, GateHidden, ListResult, MemoryView, SearchResult, TagCountView, TagsResult,
};
use crate::{SCOPE_CEILING, Service, budget, rank, store_error};

/// Cuts `rows` (fetched with one extra row) to `limit`; the cursor of the next page, empty
/// when this page is the last.
fn split_page(rows: &mut Vec<spine_core::Memory>, limit: usize) -> String {
    let more = rows.len() > limit;
    rows.truncate(limit);
    match rows.last() {
        Some(last) if more => encode_cursor(Cursor { created_at: last.created_at, id: last.id }),
        _ => String::new(),
    }
}

impl Service {
    /// Every readable scope a cross-spine call spans (SPEC search rule 2).
    pub(crate) fn coverage(&self, access: &Access, kinds: &Filter) -> Coverage {
        let mut f = Filter::new(ScopeFilter::All);
        f.categories_any = kinds.categories_any.clone();
        f.categories_none = kinds.categories_none.clone();
        match self.store.scopes(access, &f, SCOPE_CEILING + 1) {
            Ok(mut scopes) => {
                let truncated = scopes.len() > SCOPE_CEILING;
                scopes.truncate(SCOPE_CEILING);
                Coverage {
                    searched_scopes: Some(scopes),
                    scopes_truncated: Some(truncated),
                    scopes_unknown: None,
                }
            }
            Err(e) => {
                // SPEC search rule 3: the hits stand; say the coverage is unknown.
                tracing::warn!(error = %e, "scope enumeration failed");
                Coverage {
                    searched_scopes: None,
                    scopes_truncated: None,
                    scopes_unknown: Some(true),
                }
            }
        }
    }

    /// [`Service::coverage`] when `filter` spans every scope (a cross-spine call); none on a
    /// scope-confined one.
    pub(crate) fn coverage_of(&self, access: &Access, filter: &Filter) -> Coverage {
        match filter.scope {
            ScopeFilter::All => self.coverage(access, filter),
            ScopeFilter::One(_) => Coverage::default(),
        }
    }

    /// search_memory: the k nearest recall-visible memories, dense + lexical ordering.
    pub fn search_memory(
        &self,
        caller: &Caller,
        a: SearchMemoryArgs,
    ) -> Result<SearchResult, Error> {
        self.search(caller, a.try_into()?)
    }

    /// search_memory's operation on a checked request.
    pub fn search(&self, caller: &Caller, a: SearchRequest) -> Result<SearchResult, Error> {
        let SearchRequest { query, filter, k, output: Output { full, budget } } = a;
        let span = tracing::trace_span!("search.embed_query").entered();
        let query_vec = self.embed_query(&query)?;
        drop(span);
        let access = Access::read(caller);
        let now = self.clock.now();
        let rank::Ranking { ranked, hidden } = self.rank(&rank::RankQuery {
            query: &query,
            vector: &query_vec,
            access: &access,
            filter: &filter,
            now,
            k,
        })?;
        // SPEC search rule 5: the reranker reorders the k hits of the default order.
        let ranked = self.apply_reranker(&query, ranked, |(_, _, m)| &m.content);
        let span = tracing::trace_span!("search.views").entered();
        let mut memories: Vec<MemoryView> = ranked
            .into_iter()
            .map(|((_, dense, m), relevance)| {
                let mut v = MemoryView::new(m, vec![], full);
                v.score = (dense != 0.0).then_some(dense);
                v.relevance = relevance;
                v
            })
            .collect();
        let truncated_by_budget = budget::cut(&mut memories, budget);
        drop(span);
        let _span = tracing::trace_span!("search.coverage").entered();
        let coverage = self.coverage_of(&access, &filter);
        Ok(SearchResult {
            memories,
            coverage,
            recall_gate_hidden: Some(hidden),
            truncated_by_budget,
        })
    }

    /// list_memory: most recent first, without discoveries (SPEC Discovery records).
    pub fn list_memory(&self, caller: &Caller, a: ListMemoryArgs) -> Result<ListResult, Error> {
        self.list(caller, a.try_into()?)
    }

    /// list_memory's operation on a checked request.
    pub fn list(&self, caller: &Caller, r: ListRequest) -> Result<ListResult, Error> {
        self.list_page(caller, r, ListState::Live, false)
    }

    /// The Connect API's `ListMemories` with `state` (what the console browses): list_memory's
    /// arguments and order, the records in `state`, discoveries included, each record with its
    /// derived states. Scheduled and expired records are listed for their owner only, as
    /// list_scheduled lists them (SPEC Authentication 6).
    pub fn browse_memory(
        &self,
        caller: &Caller,
        a: ListMemoryArgs,
        state: ListState,
    ) -> Result<ListResult, Error> {
        self.list_page(caller, a.try_into()?, state, true)
    }

    fn list_page(
        &self,
        caller: &Caller,
        r: ListRequest,
        state: ListState,
        browse: bool,
    ) -> Result<ListResult, Error> {
        let ListRequest { mut filter, limit, start, count_total, output } = r;
        let Output { full, budget } = output;
        let PageStart { cursor, offset } = start;
        if !browse {
            filter.categories_none = vec![Category::Discovery];
        }

        let now = self.clock.now();
        let (access, gate) = match state {
            ListState::Live => (Access::read(caller), Gate::ActiveAt(now)),
            ListState::Archived => (Access::read(caller), Gate::Archived),
            ListState::Superseded => (Access::read(caller), Gate::Superseded),
            ListState::Scheduled => (Access::owned(caller), Gate::ScheduledAt(now)),
            ListState::Expired => (Access::owned(caller), Gate::ExpiredAt(now)),
            ListState::All => (Access::read(caller), Gate::Off),
        };
        let sel = Selection { access: &access, filter: &filter, gate };
        let page = Page::recent(cursor, offset, limit + 1);
        // SPEC list_memory: recall_gate_hidden covers the same page window, ungated (only
        // the gate's own view hides anything); both pages are read at once.
        let (mut rows, window) = if state == ListState::Live {
            let ungated =
                (Selection { gate: Gate::Off, ..sel }, Page::recent(cursor, offset, limit));
            let (rows, window) = self.store.list_two((sel, page), ungated).map_err(store_error)?;
            (rows, Some(window))
        } else {
            (self.store.list(sel, page).map_err(store_error)?, None)
        };
        let mut next_cursor = split_page(&mut rows, limit);
        let mut memories: Vec<MemoryView> = rows
            .iter()
            .map(|m| {
                let states = if browse { spine_core::derive_states(m, now) } else { vec![] };
                MemoryView::new(m.clone(), states, full)
            })
            .collect();
        let truncated_by_budget = budget::cut(&mut memories, budget);
        if truncated_by_budget.is_some() {
            // The next page starts at the first record the budget left out.
            let last = &rows[memories.len() - 1];
            next_cursor = encode_cursor(Cursor { created_at: last.created_at, id: last.id });
        }
        let hidden = window.map(|window| {
            let mut hidden = GateHidden::default();
            for m in &window {
                hidden.count(&spine_core::derive_states(m, now));
            }
            hidden
        });
        let coverage = self.coverage_of(&access, &filter);
        // SPEC list_memory: on a cross-spine list an explicit limit makes the total an exact
        // count across all readable scopes.
        let total =
            if count_total { Some(self.store.count(sel).map_err(store_error)?) } else { None };
        Ok(ListResult {
            memories,
            next_cursor,
            total,
            coverage,
            recall_gate_hidden: hidden,
            truncated_by_budget,
        })
    }

    /// list_scheduled: the caller's own windowed records the gate is hiding.
    pub fn list_scheduled(
        &self,
        caller: &Caller,
        a: ListScheduledArgs,
    ) -> Result<ListResult, Error> {
        self.scheduled(caller, a.try_into()?)
    }

    /// list_scheduled's operation on a checked request.
    pub fn scheduled(&self, caller: &Caller, r: ScheduledRequest) -> Result<ListResult, Error> {
        let ScheduledRequest { filter, state, limit, cursor } = r;
        let now = self.clock.now();
        let gate = match state {
            ScheduledState::Scheduled => Gate::ScheduledAt(now),
            ScheduledState::Expired => Gate::ExpiredAt(now),
            ScheduledState::All => Gate::ScheduledOrExpiredAt(now),
        };
        // SPEC Authentication 6: owner-only, even across scopes.
        let access = Access::owned(caller);
        let sel = Selection { access: &access, filter: &filter, gate };
        let mut rows =
            self.store.list(sel, Page::recent(cursor, 0, limit + 1)).map_err(store_error)?;
        let next_cursor = split_page(&mut rows, limit);
        let memories = rows
            .into_iter()
            .map(|m| {
                let states: Vec<State> = spine_core::derive_states(&m, now);
                MemoryView::new(m, states, false)
            })
            .collect();
        let coverage = match filter.scope {
            ScopeFilter::All => self.coverage(&access, &Filter::new(ScopeFilter::All)),
            ScopeFilter::One(_) => Coverage::default(),
        };
        Ok(ListResult {
            memories,
            next_cursor,
            total: None,
            coverage,
            recall_gate_hidden: None,
            truncated_by_budget: None,
        })
    }

    /// list_tags: tag counts over recall-visible readable records.
    pub fn list_tags(&self, caller: &Caller, a: ListTagsArgs) -> Result<TagsResult, Error> {
        self.tags(caller, a.try_into()?)
    }

    /// list_tags' operation on a checked request.
    pub fn tags(&self, caller: &Caller, r: TagsRequest) -> Result<TagsResult, Error> {
        let TagsRequest { scope, limit } = r;
        let now = self.clock.now();
        let filter = Filter::new(scope.map_or(ScopeFilter::All, ScopeFilter::One));
        let sel =
            Selection { access: &Access::read(caller), filter: &filter, gate: Gate::ActiveAt(now) };
        let mut tags = self.store.tag_counts(sel, limit + 1).map_err(store_error)?;
        let more = tags.len() > limit;
        tags.truncate(limit);
        Ok(TagsResult {
            tags: tags.into_iter().map(|t| TagCountView { tag: t.tag, count: t.count }).collect(),
            more,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::decode_cursor;
    use spine_core::{Hint, RecordId, Timestamp};

    #[test]
    fn cursor_round_trips_and_rejects_forgeries() {
        let c = Cursor { created_at: Timestamp::from_micros(42), id: RecordId::mint() };
        assert_eq!(decode_cursor(&encode_cursor(c)).unwrap(), c);
        let e = decode_cursor("not-a-cursor").unwrap_err();
        assert_eq!(e.hint, Some(Hint::MalformedCursor));
        assert_eq!(e.field.as_deref(), Some("cursor"));
    }
}
