//! The store's side of a call's trace: [`Traced`] wraps the service's store when export is on
//! (`spine_core::telemetry`), giving each store operation a CLIENT span named after it, with
//! `db.system.name` (`sqlite`, `postgresql`) and `db.operation.name`. Nothing else: no
//! statement, no scope, no owner, no id (docs/observability.md, "Spans").
//!
//! Key design decision: a decorator installed only when export is on, so a process without
//! an endpoint runs the store's own methods with no span code in between; every method is
//! forwarded, the defaulted ones included, so an engine's one-round-trip versions stay.

use std::sync::Arc;

use spine_core::{EpochSeconds, IdRef, Memory, RecordId, Scope, ShortId, Timestamp};
use spine_store::{
    Access, Adjacent, AuditEvent, AuditQuery, Embedding, Filter, Gate, IdempotencyEntry,
    NearestQuery, Neighbour, Page, Result, Selection, Shared, Store, StoreError,
    SupersedeRejection, TagCount,
};

/// A store whose every operation is a span of its own.
pub(crate) struct Traced {
    inner: Arc<dyn Store>,
}

impl Traced {
    /// `store` traced when export is on; `store` itself otherwise.
    pub(crate) fn wrap(store: Arc<dyn Store>) -> Arc<dyn Store> {
        if spine_core::telemetry::on() { Arc::new(Traced { inner: store }) } else { store }
    }

    fn span(&self, operation: &'static str) -> tracing::span::EnteredSpan {
        spine_core::otel_span!(
            "db",
            otel.name = operation,
            otel.kind = "client",
            db.system.name = self.inner.db_system(),
            db.operation.name = operation,
        )
        .entered()
    }
}

impl Store for Traced {
    fn db_system(&self) -> &'static str {
        self.inner.db_system()
    }

    fn insert(&self, access: &Access, m: &Memory, embedding: Embedding<'_>) -> Result<()> {
        let _span = self.span("insert");
        self.inner.insert(access, m, embedding)
    }

    fn insert_batch(&self, items: &[(Memory, Embedding<'_>)]) -> Result<()> {
        let _span = self.span("insert_batch");
        self.inner.insert_batch(items)
    }

    fn short_id_taken(&self, short: &ShortId) -> Result<bool> {
        let _span = self.span("short_id_taken");
        self.inner.short_id_taken(short)
    }

    fn ping(&self) -> Result<()> {
        let _span = self.span("ping");
        self.inner.ping()
    }

    fn matching(&self, access: &Access, id: &IdRef, limit: usize) -> Result<Vec<Memory>> {
        let _span = self.span("matching");
        self.inner.matching(access, id, limit)
    }

    fn resolve(&self, access: &Access, id: &IdRef) -> Result<Option<Memory>> {
        let _span = self.span("resolve");
        self.inner.resolve(access, id)
    }

    fn resolve_each(&self, access: &Access, ids: &[IdRef]) -> Result<Vec<Option<Memory>>> {
        let _span = self.span("resolve_each");
        self.inner.resolve_each(access, ids)
    }

    fn replace(
        &self,
        access: &Access,
        m: &Memory,
        embedding: Option<Embedding<'_>>,
    ) -> Result<bool> {
        let _span = self.span("replace");
        self.inner.replace(access, m, embedding)
    }

    fn touch(&self, id: &RecordId, at: Timestamp) -> Result<()> {
        let _span = self.span("touch");
        self.inner.touch(id, at)
    }

    fn resolve_touching(
        &self,
        access: &Access,
        id: &IdRef,
        at: Timestamp,
    ) -> Result<Option<(Memory, Option<StoreError>)>> {
        let _span = self.span("resolve_touching");
        self.inner.resolve_touching(access, id, at)
    }

    fn delete(&self, access: &Access, id: &RecordId) -> Result<bool> {
        let _span = self.span("delete");
        self.inner.delete(access, id)
    }

    fn delete_scope(&self, access: &Access, scope: &Scope) -> Result<u64> {
        let _span = self.span("delete_scope");
        self.inner.delete_scope(access, scope)
    }

    fn nearest(&self, q: &NearestQuery<'_>) -> Result<Vec<Neighbour>> {
        let _span = self.span("nearest");
        self.inner.nearest(q)
    }

    fn get_many(&self, ids: &[RecordId]) -> Result<Vec<Memory>> {
        let _span = self.span("get_many");
        self.inner.get_many(ids)
    }

    fn list(&self, sel: Selection<'_>, page: Page) -> Result<Vec<Memory>> {
        let _span = self.span("list");
        self.inner.list(sel, page)
    }

    fn list_two(
        &self,
        first: (Selection<'_>, Page),
        second: (Selection<'_>, Page),
    ) -> Result<(Vec<Memory>, Vec<Memory>)> {
        let _span = self.span("list_two");
        self.inner.list_two(first, second)
    }

    fn count(&self, sel: Selection<'_>) -> Result<u64> {
        let _span = self.span("count");
        self.inner.count(sel)
    }

    fn scopes(&self, access: &Access, filter: &Filter, limit: usize) -> Result<Vec<String>> {
        let _span = self.span("scopes");
        self.inner.scopes(access, filter, limit)
    }

    fn tag_counts(&self, sel: Selection<'_>, limit: usize) -> Result<Vec<TagCount>> {
        let _span = self.span("tag_counts");
        self.inner.tag_counts(sel, limit)
    }

    fn supersede(
        &self,
        access: &Access,
        new: &Memory,
        embedding: Embedding<'_>,
        targets: &[RecordId],
        idempotency: Option<&IdempotencyEntry>,
    ) -> Result<std::result::Result<(), SupersedeRejection>> {
        let _span = self.span("supersede");
        self.inner.supersede(access, new, embedding, targets, idempotency)
    }

    fn idempotency(&self, access: &Access, key: &str) -> Result<Option<IdempotencyEntry>> {
        let _span = self.span("idempotency");
        self.inner.idempotency(access, key)
    }

    fn set_archived(
        &self,
        access: &Access,
        ids: &[RecordId],
        at: Option<EpochSeconds>,
    ) -> Result<Vec<bool>> {
        let _span = self.span("set_archived");
        self.inner.set_archived(access, ids, at)
    }

    fn sharing(
        &self,
        access: &Access,
        gate: Gate,
        exclude: &RecordId,
        shared: Shared<'_>,
        limit: usize,
    ) -> Result<Vec<Memory>> {
        let _span = self.span("sharing");
        self.inner.sharing(access, gate, exclude, shared, limit)
    }

    fn adjacent(
        &self,
        sel: Selection<'_>,
        anchors: &[&Memory],
        model: &str,
        radius: usize,
        known: &dyn Fn(&RecordId) -> bool,
    ) -> Result<Vec<Adjacent>> {
        let _span = self.span("adjacent");
        self.inner.adjacent(sel, anchors, model, radius, known)
    }

    fn vector(&self, id: &RecordId, model: &str) -> Result<Option<Vec<f32>>> {
        let _span = self.span("vector");
        self.inner.vector(id, model)
    }

    fn embedder_models(&self) -> Result<Vec<(String, u64)>> {
        let _span = self.span("embedder_models");
        self.inner.embedder_models()
    }

    fn needing_embedding(
        &self,
        model: &str,
        after: Option<RecordId>,
        limit: usize,
    ) -> Result<Vec<(RecordId, String)>> {
        let _span = self.span("needing_embedding");
        self.inner.needing_embedding(model, after, limit)
    }

    fn set_vector(&self, id: &RecordId, embedding: Embedding<'_>) -> Result<bool> {
        let _span = self.span("set_vector");
        self.inner.set_vector(id, embedding)
    }

    fn append_audit(&self, event: &AuditEvent) -> Result<()> {
        let _span = self.span("append_audit");
        self.inner.append_audit(event)
    }

    fn audit_events(&self, q: &AuditQuery) -> Result<Vec<AuditEvent>> {
        let _span = self.span("audit_events");
        self.inner.audit_events(q)
    }

    fn prune_audit(&self, before: Timestamp) -> Result<u64> {
        let _span = self.span("prune_audit");
        self.inner.prune_audit(before)
    }
}
