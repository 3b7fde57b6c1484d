use super::*;

#[test]
fn extracts_documented_pub_fns_without_their_docs() {
    let src = r#####"
/// Returns the number of elements in the map, counting duplicates.
///
/// More text here.
#[inline]
#[cfg_attr(
docsrs,
doc(cfg(feature = "std"))
)]
pub const fn len(&self) -> usize {
/// Inner doc.
let s = "}"; // a } in a comment
let c = '}';
let r = r#"}"#;
self.n + s.len() + r.len()
}

/// Too short to keep, but a good sentence here.
pub fn short(&self) -> usize {
self.n
}

/// A trait method without a body is skipped too.
pub fn no_body(&self);

/// Ends with a lifetime 'a and e.g. an abbreviation. Second sentence.
pub fn with_lifetime<'a>(x: &'a [u8; 4]) -> &'a str {
    let y = x;
    let z = y;
    todo!()
}
"#####;
    let pairs = extract(src);
    assert_eq!(pairs.len(), 2, "{pairs:#?}");
    assert_eq!(pairs[0].query, "Returns the number of elements in the map, counting duplicates");
    assert!(pairs[0].code.starts_with("pub const fn len"));
    assert!(pairs[0].code.ends_with("self.n + s.len() + r.len()\n}"));
    assert!(!pairs[0].code.contains("Inner doc"));
    assert_eq!(pairs[1].query, "Ends with a lifetime 'a and e.g. an abbreviation");
    assert!(pairs[1].code.starts_with("pub fn with_lifetime<'a>"));
    assert!(pairs[1].code.ends_with("todo!()\n}"));
}

#[test]
fn first_sentence_strips_markdown_and_needs_four_words() {
    let doc = |s: &str| s.lines().map(str::to_owned).collect::<Vec<_>>();
    assert_eq!(
        first_sentence(&doc("Parses a [`Url`](crate::Url) from `input`, see [`Foo`][foo].")),
        Some("Parses a Url from input, see Foo".into())
    );
    assert_eq!(first_sentence(&doc("Returns the length.")), None);
    assert_eq!(first_sentence(&doc("# Examples\nfoo bar baz qux")), None);
    assert_eq!(
        first_sentence(&doc("Splits the input\nat every comma. Then more.")),
        Some("Splits the input at every comma".into())
    );
}

#[test]
fn is_pub_fn_accepts_qualifiers_only_after_pub() {
    assert!(is_pub_fn("pub fn a() {"));
    assert!(is_pub_fn("pub const unsafe fn a() {"));
    assert!(is_pub_fn("pub extern \"C\" fn a() {"));
    assert!(!is_pub_fn("pub(crate) fn a() {"));
    assert!(!is_pub_fn("fn a() {"));
    assert!(!is_pub_fn("pub struct A;"));
}

#[test]
fn lock_file_versions_are_read_for_registry_packages_only() {
    let lock = "[[package]]\nname = \"a\"\nversion = \"1.2.0\"\nsource = \"registry+x\"\n\n\
                [[package]]\nname = \"b\"\nversion = \"0.1.0\"\n";
    let v = locked_versions(lock);
    assert_eq!(v.get("a"), Some(&vec!["1.2.0".to_owned()]));
    assert!(!v.contains_key("b"));
    assert!(version_key("1.10.0") > version_key("1.9.3"));
}
