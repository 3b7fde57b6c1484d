//! Writes and single-record reads: store, schedule, get, update, delete, delete_all,
//! set_visibility.

use spine_core::limits::check_content_bytes;
use spine_core::{
    Caller, Category, Error, Hint, Memory, Scope, SummarySource, stamp_schema_version,
};
use spine_store::{Access, Embedding};

use crate::args::IdInput;
use crate::args::{
    DeleteAllArgs, IdArgs, ScheduleMemoryArgs, SetVisibilityArgs, StoreMemoryArgs, UpdateMemoryArgs,
};
use crate::request::{
    ScheduleRequest, StoreRequest, UpdateRequest, VisibilityRequest, check_rule_summary,
};
use crate::views::{MemoryView, Status, Stored};
use crate::{Service, store_error};

pub(crate) fn not_found(input: &str) -> Error {
    // SPEC Errors 2: echo only the caller's own input.
    Error::not_found("id", format!("no memory {input:?} that you can access"))
}

impl Service {
    /// The record `id` (as the caller wrote it: `input`) names among those `access` reaches;
    /// `not_found` otherwise, whether it is missing, another owner's or ambiguous.
    pub(crate) fn find(&self, access: &Access, id: &IdInput) -> Result<Memory, Error> {
        let found = self.store.resolve(access, &id.id).map_err(store_error)?;
        found.ok_or_else(|| not_found(&id.input))
    }

    /// The new record of a checked request (not yet embedded or written).
    pub(crate) fn new_memory(&self, caller: &Caller, r: StoreRequest) -> Result<Memory, Error> {
        let r = r.record;
        let mut m = Memory::new(
            self.mint_short_id()?,
            r.content,
            r.scope,
            r.source,
            r.category,
            caller,
            self.clock.now(),
        );
        (m.repo, m.workspace, m.worktree_path, m.base_dir) =
            (r.repo, r.workspace, r.worktree_path, r.base_dir);
        m.tags = r.tags;
        if !r.summary.is_empty() {
            m.summary_source = SummarySource::Client;
        }
        m.summary = r.summary;
        m.citations = r.citations;
        Ok(m)
    }

    fn insert(&self, caller: &Caller, m: Memory) -> Result<Stored, Error> {
        let span = tracing::trace_span!("store.embed").entered();
        let vector = self.embed_one(&m.content)?;
        drop(span);
        let embedding = Embedding { model: self.embedder.model_id(), vector: &vector };
        let span = tracing::trace_span!("store.write").entered();
        self.store.insert(&Access::owned(caller), &m, embedding).map_err(store_error)?;
        drop(span);
        let mut stored = Stored::new(m.id, m.short_id.clone());
        // The write is acknowledged whatever the check finds; a failing check only loses
        // the warning.
        let _span = tracing::trace_span!("store.similar").entered();
        match self.similar(caller, &m, &vector, &[]) {
            Ok((similar, note)) => (stored.similar, stored.note) = (similar, note),
            Err(e) => tracing::warn!(error = %e.message, "near-duplicate check failed"),
        }
        Ok(stored)
    }

    /// store_memory: persists a deliberate memory.
    pub fn store_memory(&self, caller: &Caller, a: StoreMemoryArgs) -> Result<Stored, Error> {
        let span = tracing::trace_span!("store.validate").entered();
        let r = StoreRequest::check(a, &self.write_rules())?;
        drop(span);
        self.store(caller, r)
    }

    /// store_memory's operation on a checked request.
    pub fn store(&self, caller: &Caller, r: StoreRequest) -> Result<Stored, Error> {
        let m = self.new_memory(caller, r)?;
        self.insert(caller, m)
    }

    /// schedule_memory: a memory with a validity window `[not_before, not_after)`.
    pub fn schedule_memory(&self, caller: &Caller, a: ScheduleMemoryArgs) -> Result<Stored, Error> {
        self.schedule(caller, ScheduleRequest::check(a, &self.write_rules())?)
    }

    /// schedule_memory's operation on a checked request.
    pub fn schedule(&self, caller: &Caller, r: ScheduleRequest) -> Result<Stored, Error> {
        let mut m = self.new_memory(caller, r.record)?;
        m.not_before = r.not_before;
        m.not_after = r.not_after;
        self.insert(caller, m)
    }

    /// get_memory: the full record in any state; counts a strong-signal touch.
    pub fn get_memory(&self, caller: &Caller, a: IdArgs) -> Result<MemoryView, Error> {
        let now = self.clock.now();
        let found = self.store.resolve_touching(&Access::read(caller), &a.id.id, now);
        let (mut m, missed) = found.map_err(store_error)?.ok_or_else(|| not_found(&a.id.input))?;
        match missed {
            None => {
                m.access_count += 1;
                m.last_accessed_at = Some(now);
            }
            // A read stays a read when the store cannot write (full disk, read-only): the
            // access count just misses this touch.
            Some(e) => {
                tracing::warn!(error = %e, id = %m.id, "access not counted: the store cannot write");
            }
        }
        let states = spine_core::derive_states(&m, now);
        Ok(MemoryView::new(m, states, true))
    }

    /// update_memory: owner-only replacement of content, tags, summary and sharing.
    pub fn update_memory(&self, caller: &Caller, a: UpdateMemoryArgs) -> Result<Status, Error> {
        self.update(caller, a.into())
    }

    /// update_memory's operation on a request; its checks need the record it rewrites.
    pub fn update(&self, caller: &Caller, a: UpdateRequest) -> Result<Status, Error> {
        let mut a = a;
        let owned = Access::owned(caller);
        let mut m = self.find(&owned, &a.id)?;
        let is_rule = m.category == Category::Rule;
        let rules = self.write_rules();

        let content_changed = a.content != m.content;
        if content_changed {
            check_content_bytes(&a.content, rules.content_limit(m.category))?;
            rules.screen("content", &mut a.content)?;
        }
        if let Some(summary) = a.summary.as_mut() {
            rules.screen("summary", summary)?;
        }
        if a.visibility.is_some() && is_rule {
            return Err(Error::failed_precondition(
                "shared",
                Hint::RuleImmutable,
                "a rule is always shared; its visibility cannot change",
            ));
        }
        // SPEC Summary rules: a client-authored summary must be addressed when content changes.
        if content_changed && m.summary_source == SummarySource::Client && a.summary.is_none() {
            return Err(Error::invalid(
                "summary",
                Hint::SummaryNotAddressed,
                "content changed on a record whose summary you wrote: send summary too \
                 (unchanged to keep it, revised, or \"\" to clear it)",
            ));
        }
        if let Some(summary) = &a.summary {
            if is_rule {
                check_rule_summary(summary)?;
            } else {
                self.limits().check_summary(summary)?;
            }
        }
        if let Some(tags) = &a.tags
            && *tags != m.tags
        {
            self.limits().check_tags("tags", tags)?;
        }

        // Validation done: from here on nothing can be rejected for the caller's input.
        let vector = if content_changed { Some(self.embed_one(&a.content)?) } else { None };
        let now = self.clock.now();
        if let Some(summary) = a.summary {
            m.summary_source =
                if summary.is_empty() { SummarySource::None } else { SummarySource::Client };
            m.summary = summary;
            m.summary_model.clear();
            m.summary_egress_at = None;
        } else if content_changed && m.summary_source == SummarySource::Auto {
            // An auto summary describes the old content; drop it so the sweep can redo it.
            m.summary.clear();
            m.summary_source = SummarySource::None;
            m.summary_model.clear();
            m.summary_egress_at = None;
        }
        m.content = a.content;
        if let Some(tags) = a.tags {
            m.tags = tags;
        }
        if let Some(visibility) = a.visibility {
            m.visibility = visibility;
        }
        m.access_count += 1;
        m.last_accessed_at = Some(now);
        m.schema_version = stamp_schema_version(m.schema_version);
        let embedding =
            vector.as_deref().map(|v| Embedding { model: self.embedder.model_id(), vector: v });
        if !self.store.replace(&owned, &m, embedding).map_err(store_error)? {
            return Err(not_found(&a.id.input));
        }
        Ok(Status { status: "updated".into(), deleted: None })
    }

    /// delete_memory: owner-only; rules included (the only way to retire one).
    pub fn delete_memory(&self, caller: &Caller, a: IdArgs) -> Result<Status, Error> {
        self.delete(caller, &a.id)
    }

    /// delete_memory's operation: deletes the caller's record `id`.
    pub fn delete(&self, caller: &Caller, id: &IdInput) -> Result<Status, Error> {
        let owned = Access::owned(caller);
        let m = self.find(&owned, id)?;
        if !self.store.delete(&owned, &m.id).map_err(store_error)? {
            return Err(not_found(&id.input));
        }
        self.terms.forget(&m.id);
        Ok(Status { status: "deleted".into(), deleted: None })
    }

    /// delete_all: deletes only the caller's own records in one scope.
    pub fn delete_all(&self, caller: &Caller, a: DeleteAllArgs) -> Result<Status, Error> {
        self.clear_scope(caller, &a.scope)
    }

    /// delete_all's operation: deletes the caller's records in `scope`.
    pub fn clear_scope(&self, caller: &Caller, scope: &Scope) -> Result<Status, Error> {
        let n = self.store.delete_scope(&Access::owned(caller), scope).map_err(store_error)?;
        Ok(Status { status: "scope cleared".into(), deleted: Some(n) })
    }

    /// set_visibility: owner-only; no re-embedding; never on rules.
    pub fn set_visibility(&self, caller: &Caller, a: SetVisibilityArgs) -> Result<Status, Error> {
        self.change_visibility(caller, a.into())
    }

    /// set_visibility's operation on a request.
    pub fn change_visibility(
        &self,
        caller: &Caller,
        r: VisibilityRequest,
    ) -> Result<Status, Error> {
        let owned = Access::owned(caller);
        let mut m = self.find(&owned, &r.id)?;
        if m.category == Category::Rule {
            return Err(Error::failed_precondition(
                "id",
                Hint::RuleImmutable,
                "a rule is always shared; its visibility cannot change",
            ));
        }
        m.visibility = r.visibility;
        m.schema_version = stamp_schema_version(m.schema_version);
        if !self.store.replace(&owned, &m, None).map_err(store_error)? {
            return Err(not_found(&r.id.input));
        }
        Ok(Status { status: "visibility updated".into(), deleted: None })
    }
}
