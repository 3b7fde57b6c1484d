//! Discoveries and rules: store_discovery, search_discovery, store_rule, list_rules (SPEC
//! "Discovery records", "Rule records").
//!
//! Both kinds live in a reserved scope run (`discovery:`, `rule:`) and carry a category and
//! source the server sets. Their stores take an optional `id` that replaces one of the
//! caller's own records of the same kind in place: the client-written fields become the
//! call's, while identity (id, short_id, created_at), ownership (owner, actor) and the state
//! markers stay as they were.

use std::collections::{BTreeMap, HashMap};

use spine_core::limits::{MAX_RULES_LISTED, RULES_ADVISORY_ABOVE};
use spine_core::{
    Caller, Category, Error, Memory, RecordId, Scope, SummarySource, Visibility,
    stamp_schema_version,
};
use spine_store::{Access, Embedding, Filter, Gate, NearestQuery, Page, ScopeFilter, Selection};

use crate::args::IdInput;
use crate::args::{ListRulesArgs, SearchDiscoveryArgs, StoreDiscoveryArgs, StoreRuleArgs};
use crate::request::{DiscoveryRequest, KnowledgeRequest, Output, RulesRequest, Written};
use crate::views::{
    Coverage, DiscoveryResult, MemoryView, RuleEntry, RuleView, RulesResult, Stored,
};
use crate::{Service, store_error};

impl Written {
    /// Writes these fields onto `m`, new or replaced; everything else on `m` is kept.
    fn apply(self, m: &mut Memory) {
        m.content = self.content;
        m.scope = self.scope;
        m.category = self.category;
        m.source = self.source;
        m.tags = self.tags;
        m.summary_source =
            if self.summary.is_empty() { SummarySource::None } else { SummarySource::Client };
        m.summary = self.summary;
        m.summary_model.clear();
        m.summary_egress_at = None;
        m.kind = self.kind;
        m.citations = self.citations;
        // SPEC Rule records: always shared.
        if m.category == Category::Rule {
            m.visibility = Visibility::Shared;
        }
        m.schema_version = stamp_schema_version(m.schema_version);
    }
}

/// How many matching rules a scope holds, as far as list_rules read them.
struct ScopeCount {
    scope: String,
    n: usize,
    /// The scope may hold more than `n` (a cap cut the read short).
    at_least: bool,
}

/// SPEC list_rules: the volume advisory, present only when some scope holds more than 50.
fn rules_advisory(counts: &[ScopeCount]) -> Option<String> {
    let heavy: Vec<String> = counts
        .iter()
        .filter(|c| c.n > RULES_ADVISORY_ABOVE)
        .map(|c| {
            let at_least = if c.at_least { "at least " } else { "" };
            format!("{} holds {at_least}{} rules", c.scope, c.n)
        })
        .collect();
    (!heavy.is_empty()).then(|| {
        format!(
            "{}; more than {RULES_ADVISORY_ABOVE} rules in one scope dilutes each of them. \
             The rules are all still in force: offer the user to merge overlapping ones or \
             retire stale ones (delete_memory retires a rule).",
            heavy.join("; ")
        )
    })
}

impl Service {
    /// store_discovery: a citation-backed discovery, created or replaced in place.
    pub fn store_discovery(&self, caller: &Caller, a: StoreDiscoveryArgs) -> Result<Stored, Error> {
        self.store_knowledge(caller, KnowledgeRequest::discovery(a, &self.write_rules())?)
    }

    /// store_rule: a user-approved rule, created or replaced in place; always shared.
    pub fn store_rule(&self, caller: &Caller, a: StoreRuleArgs) -> Result<Stored, Error> {
        self.store_knowledge(caller, KnowledgeRequest::rule(a, &self.write_rules())?)
    }

    /// store_discovery's and store_rule's operation on a checked request: creates the
    /// record, or replaces `r.replace` — which must be the caller's own record of the same
    /// category, else not found — keeping its identity, ownership and states.
    pub fn store_knowledge(&self, caller: &Caller, r: KnowledgeRequest) -> Result<Stored, Error> {
        let KnowledgeRequest { written: w, replace: target } = r;
        let owned = Access::owned(caller);
        let category = w.category;
        let not_found = |input: &str| {
            // SPEC Errors 2: echo only the caller's own input.
            Error::not_found("id", format!("no {category} record {input:?} of yours to replace"))
        };
        let existing = match target {
            None => None,
            Some(IdInput { id, input }) => Some((
                self.store
                    .resolve(&owned, &id)
                    .map_err(store_error)?
                    .filter(|m| m.category == category)
                    .ok_or_else(|| not_found(&input))?,
                input,
            )),
        };
        // Validation done: from here on nothing is rejected for the caller's input.
        let vector = self.embed_one(&w.content)?;
        let embedding = Embedding { model: self.embedder.model_id(), vector: &vector };
        if let Some((mut m, input)) = existing {
            w.apply(&mut m);
            if !self.store.replace(&owned, &m, Some(embedding)).map_err(store_error)? {
                return Err(not_found(&input));
            }
            return Ok(Stored::new(m.id, m.short_id));
        }
        let mut m = Memory::new(
            self.mint_short_id()?,
            String::new(),
            w.scope.clone(),
            w.source,
            w.category,
            caller,
            self.clock.now(),
        );
        w.apply(&mut m);
        self.store.insert(&owned, &m, embedding).map_err(store_error)?;
        Ok(Stored::new(m.id, m.short_id))
    }

    /// search_discovery: the k recall-visible discoveries nearest the query, by dense cosine
    /// alone (SPEC search_discovery: no lexical step).
    pub fn search_discovery(
        &self,
        caller: &Caller,
        a: SearchDiscoveryArgs,
    ) -> Result<DiscoveryResult, Error> {
        self.search_discoveries(caller, a.try_into()?)
    }

    /// search_discovery's operation on a checked request.
    pub fn search_discoveries(
        &self,
        caller: &Caller,
        r: DiscoveryRequest,
    ) -> Result<DiscoveryResult, Error> {
        let DiscoveryRequest { query, filter, k, budget } = r;
        let query_vec = self.embed_query(&query)?;
        let access = Access::read(caller);
        let now = self.clock.now();
        // The recall gate: only active records are ranked.
        let hits = self
            .retrieve(&NearestQuery {
                access: &access,
                filter: &filter,
                model: self.embedder.model_id(),
                vector: &query_vec,
                now,
                any: 0,
                active: k,
                exclude: None,
            })?
            .hits;
        let score_of: HashMap<RecordId, f32> = hits.iter().map(|(s, m)| (m.id, *s)).collect();
        let nearest: Vec<Memory> = hits.into_iter().map(|(_, m)| m).collect();
        // SPEC search_discovery: the reranker reorders the vector-similarity order.
        let discoveries = self
            .apply_reranker(&query, nearest, |m| &m.content)
            .into_iter()
            .map(|(mut m, relevance)| {
                let score = score_of.get(&m.id).copied().unwrap_or_default();
                // SPEC search_discovery: results carry their citations.
                let citations = std::mem::take(&mut m.citations);
                let mut v = MemoryView::new(m, vec![], false);
                v.citations = Some(citations);
                v.score = (score != 0.0).then_some(score);
                v.relevance = relevance;
                v
            })
            .collect();
        // Only the categories of `filter` shape the coverage: discovery scopes.
        let coverage = self.coverage_of(&access, &filter);
        let mut discoveries = discoveries;
        let truncated_by_budget = crate::budget::cut(&mut discoveries, budget);
        Ok(DiscoveryResult { discoveries, coverage, truncated_by_budget })
    }

    /// list_rules: recall-visible rules oldest first, compact unless `full`, with the volume
    /// advisory (SPEC list_rules).
    pub fn list_rules(&self, caller: &Caller, a: ListRulesArgs) -> Result<RulesResult, Error> {
        self.rules(caller, a.try_into()?)
    }

    /// list_rules' operation on a checked request.
    pub fn rules(&self, caller: &Caller, r: RulesRequest) -> Result<RulesResult, Error> {
        let RulesRequest { scopes, tags, output: Output { full, budget } } = r;
        self.limits().check_tags("tags", &tags)?;

        let access = Access::read(caller);
        let gate = Gate::ActiveAt(self.clock.now());
        let filter = |scope: ScopeFilter| {
            let mut f = Filter::new(scope);
            f.categories_any = Some(vec![Category::Rule]);
            f.tags_all = tags.clone();
            f
        };
        let read = |scope: ScopeFilter, limit: usize| {
            let sel = Selection { access: &access, filter: &filter(scope), gate };
            self.store.list(sel, Page::oldest(limit)).map_err(store_error)
        };

        let mut rules = Vec::new();
        let mut counts = Vec::new();
        let mut truncated = false;
        let mut coverage = Coverage::default();
        if scopes.is_empty() {
            // One oldest-first read across every readable rule scope, 1000 in total.
            rules = read(ScopeFilter::All, MAX_RULES_LISTED + 1)?;
            truncated = rules.len() > MAX_RULES_LISTED;
            rules.truncate(MAX_RULES_LISTED);
            coverage = self.coverage(
                &access,
                &Filter {
                    categories_any: Some(vec![Category::Rule]),
                    ..Filter::new(ScopeFilter::All)
                },
            );
            let mut per_scope: BTreeMap<String, usize> = BTreeMap::new();
            for m in &rules {
                *per_scope.entry(m.scope.to_string()).or_default() += 1;
            }
            if truncated {
                // The total cap may have cut a scope short of the advisory threshold: the
                // advisory counts the scope's matching rules, not the page, so read on.
                for s in coverage.searched_scopes.iter().flatten() {
                    let seen = per_scope.get(s).copied().unwrap_or(0);
                    if seen > RULES_ADVISORY_ABOVE {
                        continue;
                    }
                    let Ok(scope) = Scope::parse("scope", s) else { continue };
                    let n = read(ScopeFilter::One(scope), RULES_ADVISORY_ABOVE + 1)?.len();
                    per_scope.insert(s.clone(), n.max(seen));
                }
            }
            counts = per_scope
                .into_iter()
                .map(|(scope, n)| ScopeCount { scope, n, at_least: truncated })
                .collect();
        } else {
            for scope in scopes {
                let mut page = read(ScopeFilter::One(scope.clone()), MAX_RULES_LISTED + 1)?;
                let over = page.len() > MAX_RULES_LISTED;
                counts.push(ScopeCount { scope: scope.to_string(), n: page.len(), at_least: over });
                page.truncate(MAX_RULES_LISTED);
                truncated |= over;
                rules.extend(page);
            }
        }
        let mut rules: Vec<RuleEntry> = rules
            .into_iter()
            .map(|m| {
                if full {
                    RuleEntry::Full(Box::new(MemoryView::new(m, vec![], true)))
                } else {
                    RuleEntry::Compact(RuleView::new(m))
                }
            })
            .collect();
        let truncated_by_budget = crate::budget::cut(&mut rules, budget);
        let advisory = rules_advisory(&counts);
        Ok(RulesResult { rules, advisory, truncated, coverage, truncated_by_budget })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::parse_scope_of;
    use spine_core::{Hint, ScopeKind};

    #[test]
    fn scope_of_another_kind_is_reserved_and_a_memory_scope_malformed() {
        let d = |s| parse_scope_of("scope", s, ScopeKind::Discovery).map_err(|e| e.hint);
        assert!(d("discovery:repo:spine").is_ok());
        assert_eq!(d("rule:repo:spine"), Err(Some(Hint::ReservedScope)));
        assert_eq!(d("run:project:spine"), Err(Some(Hint::MalformedScope)));
        let r = |s| parse_scope_of("scopes[2]", s, ScopeKind::Rule).map_err(|e| (e.field, e.hint));
        assert!(r("rule:project:spine").is_ok());
        assert_eq!(
            r("rule:team:spine"),
            Err((Some("scopes[2]".into()), Some(Hint::MalformedScope)))
        );
        assert_eq!(
            r("discovery:repo:x"),
            Err((Some("scopes[2]".into()), Some(Hint::ReservedScope)))
        );
    }

    #[test]
    fn advisory_only_above_fifty_in_one_scope() {
        let c = |scope: &str, n, at_least| ScopeCount { scope: scope.into(), n, at_least };
        assert_eq!(
            rules_advisory(&[c("rule:repo:a", 50, false), c("rule:repo:b", 50, true)]),
            None
        );
        let text = rules_advisory(&[c("rule:repo:a", 50, false), c("rule:repo:b", 51, false)])
            .expect("51 rules in one scope");
        assert!(text.starts_with("rule:repo:b holds 51 rules; more than 50"), "{text}");
        assert!(!text.contains("rule:repo:a"));
        let text = rules_advisory(&[c("rule:repo:a", 1001, true)]).expect("over the cap");
        assert!(text.contains("holds at least 1001 rules"), "{text}");
    }
}
