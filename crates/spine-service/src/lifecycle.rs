//! Record lifecycle: supersede_memory, archive_memory, restore_memory.
//!
//! Supersession replaces live heads with a correcting record in one store transaction;
//! archive and restore flip one independent marker per record. All three are owner-only
//! (SPEC Authentication 5): targets resolve among the caller's own records, so another
//! owner's record, a missing one and an ambiguous short_id are the same `not_found`.

use sha2::{Digest, Sha256};
use spine_core::{Caller, Category, Error, Hint, IdRef, Memory, RecordId};
use spine_store::{Access, Embedding, IdempotencyEntry, SupersedeRejection};

use crate::args::{BatchIdsArgs, SupersedeMemoryArgs};
use crate::request::{BatchRequest, SupersedeRequest, TargetRef};
use crate::views::{BatchOutcome, BatchResult, ResolvedTarget, SupersedeResult};
use crate::{Service, store_error};

/// A target as resolved: the caller's first spelling and the record.
struct Target {
    input: String,
    record: Memory,
}

/// Fingerprint of a supersession: the new content and the sorted, distinct target set.
fn fingerprint(content: &str, targets: &[RecordId]) -> String {
    let mut ids: Vec<String> = targets.iter().map(RecordId::to_string).collect();
    ids.sort();
    let mut h = Sha256::new();
    h.update((content.len() as u64).to_le_bytes());
    h.update(content.as_bytes());
    for id in &ids {
        h.update(b"\n");
        h.update(id.as_bytes());
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

fn quoted(inputs: &[&str]) -> String {
    inputs.iter().map(|s| format!("{s:?}")).collect::<Vec<_>>().join(", ")
}

/// The rejection naming every offending target (SPEC Errors 3). Not-found targets are
/// named only by the caller's own input; the others are the caller's own records.
fn rejection_error(
    not_found: &[&str],
    already_superseded: &[&str],
    rules: &[&str],
) -> Option<Error> {
    let mut parts = Vec::new();
    if !not_found.is_empty() {
        parts.push(format!("no record you own for {}", quoted(not_found)));
    }
    if !already_superseded.is_empty() {
        parts.push(format!(
            "already superseded (supersede the chain's live head instead): {}",
            quoted(already_superseded)
        ));
    }
    if !rules.is_empty() {
        parts.push(format!(
            "rules cannot be superseded (delete the rule instead): {}",
            quoted(rules)
        ));
    }
    if parts.is_empty() {
        return None;
    }
    let message = format!("supersedes: {}; nothing was written", parts.join("; "));
    Some(if !not_found.is_empty() {
        Error::not_found("supersedes", message)
    } else if !already_superseded.is_empty() {
        Error::failed_precondition("supersedes", Hint::AlreadySuperseded, message)
    } else {
        Error::failed_precondition("supersedes", Hint::RuleImmutable, message)
    })
}

impl Service {
    /// supersede_memory: stores a correcting record that replaces live heads the caller owns.
    pub fn supersede_memory(
        &self,
        caller: &Caller,
        a: SupersedeMemoryArgs,
    ) -> Result<SupersedeResult, Error> {
        self.supersede(caller, SupersedeRequest::check(a, &self.write_rules())?)
    }

    /// supersede_memory's operation on a checked request.
    pub fn supersede(
        &self,
        caller: &Caller,
        r: SupersedeRequest,
    ) -> Result<SupersedeResult, Error> {
        let SupersedeRequest { record, supersedes, validate_only, idempotency_key: key } = r;
        let mut new = self.new_memory(caller, record)?;

        // Resolve among the caller's own records, every target at once (one round trip on
        // PostgreSQL); collapse duplicates and spellings.
        let owned = Access::owned(caller);
        let wanted: Vec<IdRef> = supersedes.iter().filter_map(|t| t.id.clone()).collect();
        let mut found = self.store.resolve_each(&owned, &wanted).map_err(store_error)?.into_iter();
        let mut targets: Vec<Target> = Vec::new();
        let mut not_found: Vec<&str> = Vec::new();
        for TargetRef { input, id } in &supersedes {
            let record = id.as_ref().and_then(|_| found.next().flatten());
            match record {
                None => {
                    if !not_found.contains(&input.as_str()) {
                        not_found.push(input);
                    }
                }
                Some(m) => {
                    if !targets.iter().any(|t| t.record.id == m.id) {
                        targets.push(Target { input: input.clone(), record: m });
                    }
                }
            }
        }
        if !not_found.is_empty() {
            // SPEC Errors 3: name every offending target; not-found first.
            let (sup, rules) = classify(&targets);
            return Err(rejection_error(&not_found, &sup, &rules).expect("not_found is non-empty"));
        }
        let target_ids: Vec<RecordId> = targets.iter().map(|t| t.record.id).collect();
        let print = fingerprint(&new.content, &target_ids);

        // Replay after existence and ownership checks (SPEC supersede_memory); never for a
        // validate_only call.
        if let (Some(k), false) = (&key, validate_only)
            && let Some(prior) = self.store.idempotency(&owned, k).map_err(store_error)?
        {
            if prior.fingerprint == print {
                return Ok(SupersedeResult {
                    id: Some(prior.id),
                    short_id: Some(prior.short_id),
                    ..Default::default()
                });
            }
            return Err(Error::conflict(
                "idempotency_key",
                Hint::IdempotencyMismatch,
                "this idempotency_key was used for a different correction (other content or \
                 other targets); use a new key",
            ));
        }

        let (sup, rules) = classify(&targets);
        if let Some(e) = rejection_error(&[], &sup, &rules) {
            return Err(e);
        }
        if validate_only {
            return Ok(SupersedeResult {
                validated: Some(true),
                supersedes: Some(target_ids),
                targets: Some(
                    targets
                        .into_iter()
                        .map(|t| ResolvedTarget {
                            input: t.input,
                            id: t.record.id,
                            short_id: t.record.short_id,
                        })
                        .collect(),
                ),
                ..Default::default()
            });
        }

        new.supersedes = target_ids.clone();
        let vector = self.embed_one(&new.content)?;
        let embedding = Embedding { model: self.embedder.model_id(), vector: &vector };
        let entry = key.map(|key| IdempotencyEntry {
            key,
            fingerprint: print,
            id: new.id,
            short_id: new.short_id.clone(),
        });
        match self
            .store
            .supersede(&owned, &new, embedding, &target_ids, entry.as_ref())
            .map_err(store_error)?
        {
            Ok(()) => {
                let (similar, note) = match self.similar(caller, &new, &vector, &target_ids) {
                    Ok(found) => found,
                    Err(e) => {
                        tracing::warn!(error = %e.message, "near-duplicate check failed");
                        (None, None)
                    }
                };
                Ok(SupersedeResult {
                    id: Some(new.id),
                    short_id: Some(new.short_id),
                    similar,
                    note,
                    ..Default::default()
                })
            }
            // A concurrent call changed a target between the checks and the transaction.
            // When it was this very call (same key, on another node or thread), replay it.
            Err(r) => {
                if let Some(e) = &entry
                    && let Some(prior) =
                        self.store.idempotency(&owned, &e.key).map_err(store_error)?
                    && prior.fingerprint == e.fingerprint
                {
                    return Ok(SupersedeResult {
                        id: Some(prior.id),
                        short_id: Some(prior.short_id),
                        ..Default::default()
                    });
                }
                Err(transaction_rejection(&targets, &r))
            }
        }
    }

    /// archive_memory: sets archived_at on each record the caller owns.
    pub fn archive_memory(&self, caller: &Caller, a: BatchIdsArgs) -> Result<BatchResult, Error> {
        self.archive(caller, a.try_into()?)
    }

    /// archive_memory's operation on a checked request.
    pub fn archive(&self, caller: &Caller, r: BatchRequest) -> Result<BatchResult, Error> {
        let at = self.clock.now().to_epoch_seconds();
        self.batch(caller, r, Some(at))
    }

    /// restore_memory: clears archived_at on each record the caller owns.
    pub fn restore_memory(&self, caller: &Caller, a: BatchIdsArgs) -> Result<BatchResult, Error> {
        self.restore(caller, a.try_into()?)
    }

    /// restore_memory's operation on a checked request.
    pub fn restore(&self, caller: &Caller, r: BatchRequest) -> Result<BatchResult, Error> {
        self.batch(caller, r, None)
    }

    fn batch(
        &self,
        caller: &Caller,
        a: BatchRequest,
        at: Option<spine_core::EpochSeconds>,
    ) -> Result<BatchResult, Error> {
        let unchanged = Archival::of(at.is_some(), false);
        let owned = Access::owned(caller);
        // Every id resolved at once (one round trip on PostgreSQL); inputs that are no id
        // are not found.
        let refs: Vec<Option<IdRef>> = a.ids.iter().map(|i| IdRef::parse_lenient(i)).collect();
        let wanted: Vec<IdRef> = refs.iter().flatten().cloned().collect();
        let mut found = self.store.resolve_each(&owned, &wanted).map_err(store_error)?.into_iter();
        let resolved: Vec<Option<RecordId>> = refs
            .iter()
            .map(|r| r.as_ref().and_then(|_| found.next().flatten()).map(|m| m.id))
            .collect();
        let ids: Vec<RecordId> = resolved.iter().flatten().copied().collect();
        let mut flips =
            flip_archived(self.store.as_ref(), &owned, &ids, at).map_err(store_error)?.into_iter();
        let results = a
            .ids
            .into_iter()
            .zip(resolved)
            .map(|(input, id)| match id {
                None => BatchOutcome {
                    input,
                    id: String::new(),
                    outcome: Archival::NotFound.as_str().into(),
                },
                Some(id) => {
                    // The record was resolved as owned a moment ago; if a concurrent delete
                    // removed it since, the flip is false and "unchanged" is still true.
                    let outcome = flips.next().unwrap_or(unchanged);
                    BatchOutcome { input, id: id.to_string(), outcome: outcome.as_str().into() }
                }
            })
            .collect();
        Ok(BatchResult { results })
    }
}

/// What archive or restore did with one id: archive_memory and restore_memory report it as
/// its name (`archived`, `already_archived`, `restored`, `not_archived`, `not_found`), the
/// operator's `spine-review archive` / `restore` too, plus `ambiguous` for a short_id several
/// records share.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Archival {
    /// archive archived it.
    Archived,
    /// archive found it archived already.
    AlreadyArchived,
    /// restore restored it.
    Restored,
    /// restore found it not archived.
    NotArchived,
    /// No record the caller may change has this id.
    NotFound,
    /// The short_id of several records (the operator's commands only).
    Ambiguous,
}

impl Archival {
    /// The outcome's name, as the tools and the operator's JSON report it.
    pub fn as_str(self) -> &'static str {
        match self {
            Archival::Archived => "archived",
            Archival::AlreadyArchived => "already_archived",
            Archival::Restored => "restored",
            Archival::NotArchived => "not_archived",
            Archival::NotFound => "not_found",
            Archival::Ambiguous => "ambiguous",
        }
    }

    /// The outcome for a record found, flipped or not: archive (`archive`) or restore.
    fn of(archive: bool, flipped: bool) -> Self {
        match (archive, flipped) {
            (true, true) => Archival::Archived,
            (true, false) => Archival::AlreadyArchived,
            (false, true) => Archival::Restored,
            (false, false) => Archival::NotArchived,
        }
    }
}

/// Archives (`at` given: archived_at = `at`) or restores (`at` None) the records `ids`
/// through `access`, every one in one transaction, and names what happened to each, in
/// order: `archived` / `already_archived`, or `restored` / `not_archived`. The rule that
/// archive_memory and restore_memory (a caller's own records) and the operator's
/// `spine-review archive` / `restore` (any owner's) share; each resolves its ids its own
/// way first.
pub fn flip_archived(
    store: &dyn spine_store::Store,
    access: &Access,
    ids: &[RecordId],
    at: Option<spine_core::EpochSeconds>,
) -> spine_store::Result<Vec<Archival>> {
    let flips = store.set_archived(access, ids, at)?;
    Ok(flips.into_iter().map(|flipped| Archival::of(at.is_some(), flipped)).collect())
}

/// Targets already superseded and targets that are rules, by the caller's spelling.
fn classify(targets: &[Target]) -> (Vec<&str>, Vec<&str>) {
    let sup = targets
        .iter()
        .filter(|t| t.record.category != Category::Rule && t.record.superseded_by.is_some())
        .map(|t| t.input.as_str())
        .collect();
    let rules = targets
        .iter()
        .filter(|t| t.record.category == Category::Rule)
        .map(|t| t.input.as_str())
        .collect();
    (sup, rules)
}

/// The error for a rejection found inside the store transaction.
fn transaction_rejection(targets: &[Target], r: &SupersedeRejection) -> Error {
    let name = |ids: &[RecordId]| -> Vec<&str> {
        targets.iter().filter(|t| ids.contains(&t.record.id)).map(|t| t.input.as_str()).collect()
    };
    rejection_error(&name(&r.not_found), &name(&r.already_superseded), &name(&r.rules))
        .unwrap_or_else(|| Error::internal("supersession rejected without a reason"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::check_batch;
    use spine_core::MAX_ID_BYTES;
    use spine_core::limits::MAX_BATCH_IDS as MAX_BATCH;

    #[test]
    fn fingerprint_ignores_target_order_but_not_content_or_set() {
        let a = RecordId::mint();
        let b = RecordId::mint();
        assert_eq!(fingerprint("x", &[a, b]), fingerprint("x", &[b, a]));
        assert_ne!(fingerprint("x", &[a, b]), fingerprint("y", &[a, b]));
        assert_ne!(fingerprint("x", &[a, b]), fingerprint("x", &[a]));
    }

    #[test]
    fn batch_shape_bounds() {
        assert_eq!(check_batch(&[]).unwrap_err().hint, Some(Hint::Required));
        let max = vec!["x".to_owned(); MAX_BATCH];
        assert!(check_batch(&max).is_ok());
        let over = vec!["x".to_owned(); MAX_BATCH + 1];
        assert_eq!(check_batch(&over).unwrap_err().hint, Some(Hint::TooMany));
        let long = vec!["a".repeat(MAX_ID_BYTES)];
        assert!(check_batch(&long).is_ok());
        let longer = vec!["a".repeat(MAX_ID_BYTES + 1)];
        let e = check_batch(&longer).unwrap_err();
        assert_eq!((e.field.as_deref(), e.hint), (Some("ids[0]"), Some(Hint::TooLong)));
        let blank = vec!["ok".to_owned(), " ".to_owned()];
        assert_eq!(check_batch(&blank).unwrap_err().field.as_deref(), Some("ids[1]"));
    }
}
