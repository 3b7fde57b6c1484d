//! Token budgets: `max_chars` on the recall tools (search_memory, list_memory,
//! search_discovery, list_rules, related_memories). Records are added in result order until
//! the next one would take the result's records past `max_chars` characters of JSON; the
//! result then says `truncated_by_budget: true` (and, where the tool pages, its
//! `next_cursor` continues at the first record left out). One record is always returned
//! when any matched, so paging always moves on even past a record larger than the budget.

use serde::Serialize;
use spine_core::{Error, Hint};

/// The largest `max_chars` accepted.
pub const MAX_CHARS: u64 = 10_000_000;

/// `max_chars` as given: `None` (omitted or 0) for no budget; above [`MAX_CHARS`] is
/// `out_of_range`.
pub(crate) fn resolve(max_chars: Option<u64>) -> Result<Option<usize>, Error> {
    match max_chars {
        None | Some(0) => Ok(None),
        Some(n) if n > MAX_CHARS => Err(Error::invalid(
            "max_chars",
            Hint::OutOfRange,
            format!("max_chars is {n}; at most {MAX_CHARS} (0 or omitted: no budget)"),
        )),
        Some(n) => Ok(Some(n as usize)),
    }
}

/// Characters `item` takes in the result (compact JSON, with its separating comma).
pub(crate) fn chars<T: Serialize>(item: &T) -> usize {
    serde_json::to_string(item).map_or(0, |s| s.chars().count()) + 1
}

/// How many of `items`, from the first, fit `budget` characters (at least one when there
/// is any); all of them without a budget.
pub(crate) fn fitting<T: Serialize>(items: &[T], budget: Option<usize>) -> usize {
    let Some(budget) = budget else { return items.len() };
    let mut used = 0;
    for (i, item) in items.iter().enumerate() {
        used += chars(item);
        if used > budget {
            return i.max(1);
        }
    }
    items.len()
}

/// Cuts `items` to what fits `budget`; `Some(true)` when some were left out, `None` when
/// all fit (the flag is omitted then).
pub(crate) fn cut<T: Serialize>(items: &mut Vec<T>, budget: Option<usize>) -> Option<bool> {
    let n = fitting(items, budget);
    let cut = n < items.len();
    items.truncate(n);
    cut.then_some(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_fit_whole_and_one_always_comes_back() {
        let items = vec!["aaaa".to_owned(), "bbbb".to_owned(), "cccc".to_owned()]; // 7 chars each
        assert_eq!(fitting(&items, None), 3);
        assert_eq!(fitting(&items, Some(14)), 2, "exactly at the budget fits");
        assert_eq!(fitting(&items, Some(13)), 1);
        assert_eq!(fitting(&items, Some(1)), 1, "one record even past the budget");
        assert_eq!(fitting::<String>(&[], Some(1)), 0);
        let mut v = items.clone();
        assert_eq!(cut(&mut v, Some(21)), None);
        assert_eq!(cut(&mut v, Some(20)), Some(true));
        assert_eq!(v.len(), 2);
    }

    #[test]
    fn zero_and_omitted_mean_no_budget_and_the_bound_is_inclusive() {
        assert_eq!(resolve(None).unwrap(), None);
        assert_eq!(resolve(Some(0)).unwrap(), None);
        assert_eq!(resolve(Some(MAX_CHARS)).unwrap(), Some(MAX_CHARS as usize));
        let e = resolve(Some(MAX_CHARS + 1)).unwrap_err();
        assert_eq!((e.field.as_deref(), e.hint), (Some("max_chars"), Some(Hint::OutOfRange)));
    }
}
