use super::*;

#[test]
fn dialog_ids_are_read_as_the_dataset_spells_them() {
    assert_eq!(normalise_id("D1:3").as_deref(), Some("D1:3"));
    assert_eq!(normalise_id("D:11:26").as_deref(), Some("D11:26"));
    assert_eq!(normalise_id("D30:05").as_deref(), Some("D30:5"));
    assert_eq!(normalise_id("D"), None);
    assert_eq!(normalise_id("session_1"), None);
}

#[test]
fn ranges_are_one_based_and_inclusive() {
    assert_eq!(parse_range("1-5").unwrap(), vec![1, 2, 3, 4, 5]);
    assert_eq!(parse_range("7").unwrap(), vec![7]);
    assert_eq!(parse_range("all").unwrap().len(), 10);
    assert!(parse_range("0-3").is_err());
    assert!(parse_range("5-1").is_err());
}

#[test]
fn a_question_scores_by_where_its_evidence_ranks() {
    let set = |ids: &[&str]| ids.iter().map(|s| s.to_string()).collect::<HashSet<_>>();
    let ranked =
        vec![set(&["D1:1"]), set(&["D1:2", "D1:3"]), set(&[]), set(&[]), set(&[]), set(&["D2:9"])];
    let mut t = Tally::default();
    t.add(&["D1:3".into(), "D2:9".into()], &ranked, &set(&["D1:1", "D1:2", "D1:3", "D2:9"]));
    assert_eq!(t.questions, 1);
    assert_eq!(t.r5, 0.5);
    assert_eq!(t.r10, 1.0);
    assert_eq!(t.rr, 0.5);
    assert_eq!((t.any5, t.all5, t.any10, t.all10), (1, 0, 1, 1));
    assert_eq!((t.reachable, t.any_reachable), (1.0, 1));
}

#[test]
fn evidence_no_record_names_bounds_what_can_be_found() {
    let set = |ids: &[&str]| ids.iter().map(|s| s.to_string()).collect::<HashSet<_>>();
    let mut t = Tally::default();
    // Observations name D1:3 only: D2:9 can never be found, and a question whose
    // evidence is all unnamed can score nothing.
    let named = set(&["D1:3"]);
    t.add(&["D1:3".into(), "D2:9".into()], &[set(&["D1:3"])], &named);
    t.add(&["D2:9".into()], &[set(&["D1:3"])], &named);
    assert_eq!((t.r5, t.reachable, t.any5, t.any_reachable), (0.5, 0.5, 1, 1));
    let f = t.figures();
    assert_eq!((f["reachable"].as_f64(), f["any_reachable"].as_f64()), (Some(0.25), Some(0.5)));
}
