//! Building documents within the file's budget (`value`): alias bombs, nesting, duplicate keys,
//! numbers JSON cannot hold, through `parse_manifest` so the problems read as users see them.

use std::path::Path;

use super::NODE;
use crate::source::limits::{MAX_DEPTH, MAX_EXPANDED_BYTES, MAX_VALUES};
use crate::source::{ManifestProblem, ProblemKind, parse_manifest};

fn errors(file: &str, text: &str) -> Vec<ManifestProblem> {
    let (pods, problems) = parse_manifest(Path::new(file), text, NODE);
    assert!(pods.is_empty(), "{text:.200}");
    problems.into_iter().filter(|p| p.kind == ProblemKind::Error).collect()
}

/// Ten anchors, each a list of ten aliases of the one before: 10^10 values once expanded.
fn laughs() -> String {
    let mut text = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
    for i in 1..10 {
        let prev = format!("*a{}", i - 1);
        text.push_str(&format!("a{i}: &a{i} [{}]\n", [prev.as_str(); 10].join(", ")));
    }
    text
}

#[test]
fn budget_cases() {
    let wide_anchor = format!("a: &a [{}]\nb: [{}]\n", vec!["x"; 2000].join(","), vec!["*a"; 2000].join(","));
    let long = "y".repeat(64 * 1024);
    let long_strings = format!("a: &a {long}\nb: [{}]\n", vec!["*a"; 100].join(","));
    let mut nested_maps = String::new();
    for i in 0..=MAX_DEPTH {
        nested_maps.push_str(&format!("{}k{i}:\n", "  ".repeat(i)));
    }
    let (too_deep, too_many, too_long) = (
        format!("nested more than {MAX_DEPTH} levels"),
        format!("more than {MAX_VALUES} values"),
        format!("more than {MAX_EXPANDED_BYTES} bytes"),
    );
    let cases: Vec<(&str, String, Option<&str>, &str)> = vec![
        ("billion laughs", laughs(), None, "alias"),
        ("wide alias", wide_anchor, Some("b["), &too_many),
        ("long strings by alias", long_strings, Some("b["), &too_long),
        ("block nesting", nested_maps, Some("k0.k1.k2.k3"), &too_deep),
        (
            "duplicate key",
            "apiVersion: v1\nkind: Pod\nkind: Pod\n".to_string(),
            Some("kind"),
            "\"kind\" appears more than once",
        ),
        (
            "duplicate key deep down",
            "spec:\n  containers:\n  - name: a\n    image: b\n    image: c\n".to_string(),
            Some("spec.containers[0].image"),
            "appears more than once",
        ),
        (
            "not finite",
            "spec:\n  terminationGracePeriodSeconds: .inf\n".to_string(),
            Some("spec.terminationGracePeriodSeconds"),
            "not a finite number",
        ),
        ("self alias", "a: &a [*a]\n".to_string(), Some("a[0]"), &too_deep),
    ];
    for (name, text, field, reason) in cases {
        let errors = errors("/m/x.yaml", &text);
        let found = errors.iter().any(|p| {
            p.doc == Some(0)
                && field.is_none_or(|f| p.field.as_deref().is_some_and(|got| got.starts_with(f)))
                && p.reason.contains(reason)
        });
        assert!(found, "{name}: want {field:?}: {reason:?}, got {errors:#?}");
    }
}

#[test]
fn json_budget_and_duplicates() {
    let errors = errors("/m/x.json", r#"{"apiVersion": "v1", "kind": "Pod", "kind": "Pod"}"#);
    assert_eq!(errors.len(), 1, "{errors:#?}");
    assert_eq!((errors[0].field.as_deref(), errors[0].doc), (Some("kind"), Some(0)));
    let huge = format!(r#"{{"apiVersion":"v1","kind":"Pod","x":[{}]}}"#, vec!["1"; MAX_VALUES].join(","));
    let errors = self::errors("/m/x.json", &huge);
    assert!(errors.iter().any(|p| p.reason.contains("values")), "{errors:#?}");
    let big = r#"{"apiVersion":"v1","kind":"Pod","spec":{"terminationGracePeriodSeconds":1e999}}"#;
    let errors = self::errors("/m/x.json", big);
    assert!(errors.iter().any(|p| p.reason.starts_with("invalid JSON: number out of range")), "{errors:#?}");
}

#[test]
fn a_spent_budget_stops_the_file_and_a_refused_document_does_not() {
    // Document 0 has a duplicate key (refused alone); document 1 is fine and still read.
    let text = "apiVersion: v1\nkind: Pod\nkind: Pod\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: b}\nspec: {containers: [{name: c, image: i}]}\n";
    let (pods, problems) = parse_manifest(Path::new("/m/x.yaml"), text, NODE);
    assert_eq!(pods.iter().map(|p| p.doc).collect::<Vec<_>>(), [1], "{problems:#?}");
    // A bomb in document 0 spends the file's budget: document 1 is not read.
    let text = format!("{}---\n{}", laughs().replace("a9: &a9", "a9:"), "apiVersion: v1\nkind: Pod\n");
    let (_, problems) = parse_manifest(Path::new("/m/x.yaml"), &text, NODE);
    assert!(problems.iter().all(|p| p.doc == Some(0)), "{problems:#?}");
}
