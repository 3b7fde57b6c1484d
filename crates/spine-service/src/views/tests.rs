//! The views' own rules: truncation on char boundaries, the gate's counts.

use super::*;

#[test]
fn truncation_is_on_char_boundaries() {
    let (t, cut) = truncate_chars(&"é".repeat(300), 280);
    assert!(cut);
    assert_eq!(t.chars().count(), 281);
    assert_eq!(truncate_chars("short", 280), ("short".into(), false));
    assert!(!truncate_chars(&"x".repeat(280), 280).1);
}

#[test]
fn gate_hidden_counts_once_in_total_and_once_per_state() {
    let mut g = GateHidden::default();
    g.count(&[State::Archived, State::Superseded, State::Expired]);
    g.count(&[]);
    g.count(&[State::Scheduled]);
    assert_eq!(g, GateHidden { total: 2, archived: 1, superseded: 1, expired: 1, scheduled: 1 });
}
