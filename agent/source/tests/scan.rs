//! The pre-parse bounds (`scan`): where flow nesting is counted and where it is not, and a
//! randomized comparison with libyaml itself: the scanner must never see less nesting than
//! libyaml builds (that would let a deep file through to the quadratic scanner).

use crate::source::limits::{MAX_DEPTH, MAX_TOKENS};
use crate::source::scan::{check_json, check_yaml, flow_depth};

fn open(n: usize) -> String {
    "[".repeat(n)
}

fn deep(n: usize) -> String {
    format!("{}{}", "[".repeat(n), "]".repeat(n))
}

#[test]
fn yaml_cases() {
    let over = MAX_DEPTH + 1;
    // (name, text, Some((line, column)) where it is refused, or None)
    type Case = (&'static str, String, Option<(u64, u64)>);
    let cases: Vec<Case> = vec![
        ("at the limit", format!("x: {}\n", deep(MAX_DEPTH)), None),
        ("one over", format!("x: {}\n", deep(over)), Some((1, 4 + MAX_DEPTH as u64))),
        (
            "flow mappings count too",
            format!("{}{}", "{a: ".repeat(over), "}".repeat(over)),
            Some((1, 4 * 64 + 1)),
        ),
        ("the issue's file", deep(100_000), Some((1, 65))),
        ("in a double-quoted string", format!("x: \"{}\"\n", open(500)), None),
        ("in a single-quoted string with ''", format!("x: 'it''s {}'\n", open(500)), None),
        ("in a comment", format!("# {}\nx: 1 # {}\n", open(500), open(500)), None),
        ("in a block plain scalar", format!("x: a{}b\ny: c\n", open(500)), None),
        ("in a literal block", format!("x: |\n  {}\n  {}\ny: 1\n", open(500), open(500)), None),
        ("in a folded block, deeper lines", format!("x: >-\n  a\n    {}\ny: 1\n", open(500)), None),
        (
            "after a block scalar ends",
            format!("x: |\n  {}\ny: {}\n", open(500), deep(over)),
            Some((3, 4 + 64)),
        ),
        (
            "block scalar under a list item",
            format!("- k: |\n    {}\n  j: {}\n", open(200), deep(over)),
            Some((3, 6 + 64)),
        ),
        (
            "empty block scalar at the parent's indentation",
            format!("a: |\nb: {}\n", deep(over)),
            Some((2, 4 + 64)),
        ),
        (
            "closers hidden in strings do not hide depth",
            format!("x: {}\n", "[\"]]\", '}', ".repeat(over)),
            Some((1, 4 + 12 * 64)),
        ),
        (
            "a quote inside a flow plain scalar is not a string",
            format!("x: [a'b, {}]\n", deep(over)),
            Some((1, 9 + 64)),
        ),
        (
            "a quote on a continued flow plain scalar line is not a string",
            format!("x: [a\n 'b, {}]\n", deep(over)),
            Some((2, 5 + 64)),
        ),
        ("a verbatim tag may hold brackets", format!("x: !<tag:{}> y\n", open(300)), None),
        ("an anchor then depth", format!("x: &a {}\n", deep(over)), Some((1, 7 + 64))),
        ("the second document", format!("a: 1\n---\nb: 2\n---\nc: {}\n", deep(over)), Some((5, 4 + 64))),
        ("a NUL byte", "apiVersion: v1\nkind: P\0d\n".to_string(), Some((2, 8))),
        ("DEL", "a: \u{7f}\n".to_string(), Some((1, 4))),
    ];
    for (name, text, want) in cases {
        let got = check_yaml(&text).err().map(|r| (r.line, r.column));
        assert_eq!(got, want, "{name}: {:?}", check_yaml(&text).err());
    }
}

#[test]
fn refusal_names_the_document_and_where_it_starts() {
    let text = format!("a: 1\n---\nb: 2\n---\nc: {}\n", deep(MAX_DEPTH + 1));
    let r = check_yaml(&text).expect_err("too deep");
    assert_eq!((r.doc, &text[r.doc_start..r.doc_start + 3]), (2, "---"));
    assert!(r.to_string().starts_with("nested more than 64 levels deep at line 5 column 68"), "{r}");
    let after_end = format!("a: 1\n...\n{}\n", deep(MAX_DEPTH + 1));
    let r = check_yaml(&after_end).expect_err("too deep");
    assert_eq!((r.doc, r.doc_start), (1, 9), "content after `...` is a new document");
    let leading = format!("---\n{}\n", deep(MAX_DEPTH + 1));
    assert_eq!(
        check_yaml(&leading).expect_err("too deep").doc,
        0,
        "a leading --- is not a document of its own"
    );
}

#[test]
fn json_cases() {
    assert!(check_json(&deep(MAX_DEPTH)).is_ok());
    let r = check_json(&deep(MAX_DEPTH + 1)).expect_err("too deep");
    assert_eq!((r.line, r.column), (1, 65));
    assert!(check_json(&format!("{{\"a\": \"{}\"}}", open(500))).is_ok(), "brackets in strings");
    assert!(check_json(&format!("{{\"a\": \"\\\"{}\"}}", open(500))).is_ok(), "escaped quotes");
    let two = format!("{{\"a\": 1}}\n{}", deep(MAX_DEPTH + 1));
    let r = check_json(&two).expect_err("too deep");
    assert_eq!((r.doc, r.doc_start), (1, 9));
    let r = check_json("{\"a\": \"b\u{1}\"}").expect_err("control character");
    assert!(r.reason.contains("U+0001"), "{r}");
}

#[test]
fn token_count_is_bounded() {
    let many = format!("[{}]", "a,".repeat(MAX_TOKENS));
    let r = check_yaml(&many).expect_err("too many tokens");
    assert!(r.reason.contains("tokens"), "{r}");
    assert!(check_json(&format!("[{}1]", "1,".repeat(MAX_TOKENS))).is_err());
}

/// Pieces that move libyaml between tokens, scalars and comments, and so could mislead a
/// scanner that got one rule wrong. (No aliases: an alias to its own enclosing node nests
/// without end in serde_yaml_ng, which is the value builder's business, not the scanner's.)
const PIECES: &[&str] = &[
    "[", "]", "{", "}", ",", ": ", ":", " ", "  ", "'", "''", "\"", "\\\"", "\\", "#", " #", "a", "b c", "-",
    "- ", "? ", "?", "&x ", "!t ", "!<u> ", "|", ">", "|-", "\n", "\n  ", "\n    ", "---", "...", "%", "\t",
    "k: ", "\n- ", "é", "\r\n", "\r", "\u{85}", "\u{2028}", "\u{feff}",
];

/// Random texts made of [`PIECES`] (`CRILET_SCAN_SEED` varies the seed; `count` is multiplied
/// by `CRILET_SCAN_SCALE` for longer runs).
fn random_texts(seed: u64, count: usize) -> Vec<String> {
    let env = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<u64>().ok());
    let seed = seed + env("CRILET_SCAN_SEED").unwrap_or(0);
    let count = count * env("CRILET_SCAN_SCALE").unwrap_or(1) as usize;
    let mut rng = fastrand::Rng::with_seed(seed);
    (0..count)
        .map(|_| {
            let len = rng.usize(1..40);
            (0..len).map(|_| PIECES[rng.usize(..PIECES.len())]).collect()
        })
        .collect()
}

fn value_depth(v: &serde_json::Value) -> usize {
    match v {
        serde_json::Value::Array(a) => 1 + a.iter().map(value_depth).max().unwrap_or(0),
        serde_json::Value::Object(o) => 1 + o.values().map(value_depth).max().unwrap_or(0),
        _ => 0,
    }
}

/// Whenever libyaml gets far enough into `text` to hit serde_yaml_ng's recursion limit (128),
/// the scanner must have seen more than [`MAX_DEPTH`] flow levels and refused the text. Returns
/// whether libyaml got that far.
fn check_against_libyaml(text: &str) -> bool {
    let Err(e) = serde_yaml_ng::from_str::<serde_json::Value>(text) else { return false };
    if !e.to_string().starts_with("recursion limit exceeded") {
        return false;
    }
    assert!(flow_depth(text) > MAX_DEPTH, "{text:?}: libyaml nests past 128, the scanner saw less");
    assert!(check_yaml(text).is_err(), "{text:?}");
    true
}

/// Random flow content, then real deep nesting inside the same flow collection.
#[test]
fn no_flow_content_hides_a_deep_document() {
    let (mut reached, mut parsed) = (0, 0);
    for body in random_texts(9, 20_000) {
        if check_against_libyaml(&format!("[{body}, {}]", deep(200))) {
            reached += 1;
        }
        // Where libyaml builds the value, it nests at most twice per flow level (a `k: v` or
        // `? k` entry in a flow sequence is a one-pair mapping).
        let text = format!("[{body}]");
        if let Ok(value) = serde_yaml_ng::from_str::<serde_json::Value>(&text) {
            parsed += 1;
            assert!(2 * flow_depth(&text) >= value_depth(&value), "{text:?}: {value:?}");
        }
    }
    assert!(reached > 1000 && parsed > 1000, "only {reached}/{parsed} texts; the generator needs fixing");
}

/// A random prefix (block scalars, quotes, comments, plain scalars...) followed by real deep
/// nesting.
#[test]
fn no_prefix_hides_a_deep_document() {
    let mut reached = 0;
    for prefix in random_texts(17, 20_000) {
        for text in [format!("{prefix}{}", deep(200)), format!("{prefix}\nz: {}", deep(200))] {
            if check_against_libyaml(&text) {
                reached += 1;
            }
        }
    }
    assert!(reached > 1000, "only {reached} texts reached the nesting; the generator needs fixing");
}
