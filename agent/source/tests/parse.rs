//! Whole-file parsing: documents, kinds, syntax errors, JSON, and how problems read.

use std::path::{Path, PathBuf};

use super::{NODE, lines};
use crate::source::limits::MAX_PROBLEMS_PER_FILE;
use crate::source::{ManifestProblem, ProblemKind, parse_manifest};

fn pod_yaml(name: &str, image: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  containers:\n  - name: app\n    image: {image}\n"
    )
}

#[test]
fn multi_document_file_keeps_the_good_ones() {
    let text = format!(
        "{}---\n{}---\n---\n{}",
        pod_yaml("one", "busybox:1"),
        pod_yaml("Bad_Name", "busybox:1"),
        pod_yaml("three", "busybox:1")
    );
    let (pods, problems) = parse_manifest(Path::new("/m/pods.yaml"), &text, NODE);
    let names: Vec<_> = pods.iter().map(|p| (p.key.name.as_str(), p.doc)).collect();
    assert_eq!(names, [("one", 0), ("three", 3)], "empty document 2 is skipped but counted");
    assert_eq!(problems.len(), 1, "{problems:#?}");
    let p = &problems[0];
    assert_eq!((p.kind, p.doc, p.field.as_deref()), (ProblemKind::Error, Some(1), Some("metadata.name")));
    assert!(
        p.to_string().starts_with("/m/pods.yaml: document 1: metadata.name: \"Bad_Name\" must be"),
        "{p}"
    );
}

#[test]
fn syntax_error_stops_the_file_but_keeps_earlier_documents() {
    let text = format!("{}---\nspec: [\n---\n{}", pod_yaml("one", "b:1"), pod_yaml("two", "b:1"));
    let (pods, problems) = parse_manifest(Path::new("/m/p.yaml"), &text, NODE);
    assert_eq!(pods.iter().map(|p| p.key.name.as_str()).collect::<Vec<_>>(), ["one"]);
    assert_eq!(problems.len(), 1, "{problems:#?}");
    assert_eq!(problems[0].doc, Some(1));
    assert!(problems[0].reason.starts_with("invalid YAML: "), "{}", problems[0].reason);
    assert!(problems[0].reason.ends_with("the rest of the file is not read"), "{}", problems[0].reason);
}

#[test]
fn kind_and_api_version_cases() {
    let cases = [
        ("apiVersion: apps/v1\nkind: Deployment\n", "kind", "kind \"Deployment\" is not supported"),
        ("apiVersion: v1\nkind: List\nitems: []\n", "kind", "separated by ---"),
        ("apiVersion: v1\nkind: PodList\n", "kind", "is not supported"),
        ("apiVersion: v2\nkind: Pod\n", "apiVersion", "apiVersion \"v2\" is not supported"),
        ("kind: Pod\nmetadata: {name: x}\n", "apiVersion", "required"),
        ("apiVersion: v1\nmetadata: {name: x}\n", "kind", "required"),
        ("- a\n- b\n", "", "must be a mapping"),
    ];
    for (text, field, reason) in cases {
        let (pods, problems) = parse_manifest(Path::new("/m/x.yaml"), text, NODE);
        assert!(pods.is_empty(), "{text}");
        let found = problems.iter().any(|p| {
            p.kind == ProblemKind::Error
                && p.field.as_deref().unwrap_or("") == field
                && p.reason.contains(reason)
        });
        assert!(found, "{text:?}: want {field}: {reason:?}, got {:#?}", lines(&problems, ProblemKind::Error));
    }
}

#[test]
fn empty_files_have_no_pods_and_no_problems() {
    for text in ["", "# nothing\n", "---\n", "---\n---\n"] {
        let (pods, problems) = parse_manifest(Path::new("/m/empty.yaml"), text, NODE);
        assert!(pods.is_empty() && problems.is_empty(), "{text:?}: {problems:#?}");
    }
}

#[test]
fn json_files() {
    let one = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a"},"spec":{"containers":[{"name":"c","image":"b:1"}]}}"#;
    let two = one.replace("\"a\"", "\"b\"");
    let (pods, problems) = parse_manifest(Path::new("/m/p.json"), &format!("{one}\n{two}"), NODE);
    assert!(problems.is_empty(), "{problems:#?}");
    assert_eq!(pods.iter().map(|p| (p.key.name.as_str(), p.doc)).collect::<Vec<_>>(), [("a", 0), ("b", 1)]);

    let (pods, problems) = parse_manifest(Path::new("/m/p.json"), &format!("{one}\n{{\"kind\": "), NODE);
    assert_eq!(pods.len(), 1);
    assert_eq!(problems.len(), 1);
    assert!(problems[0].reason.starts_with("invalid JSON: "), "{}", problems[0].reason);
    assert_eq!(problems[0].doc, Some(1));
}

#[test]
fn pods_carry_their_origin_and_warnings() {
    let text =
        pod_yaml("web", "nginx:1.25").replace("spec:\n", "spec:\n  tolerations: [{operator: Exists}]\n");
    let (pods, problems) = parse_manifest(Path::new("/m/web.yaml"), &text, NODE);
    assert_eq!(pods.len(), 1);
    let pod = &pods[0];
    assert_eq!((pod.source.manifest(), pod.doc), (Some(Path::new("/m/web.yaml")), 0));
    assert_eq!(pod.warnings, ["spec.tolerations: scheduling field, meaningless for a static pod; ignored"]);
    assert_eq!(lines(&problems, ProblemKind::Warning), pod.warnings);
}

#[test]
fn problem_display_is_one_line() {
    let file = PathBuf::from("/etc/crilet/manifests/web.yaml");
    let cases = [
        (
            ManifestProblem::doc(
                ProblemKind::Error,
                &file,
                2,
                Some("spec.containers[1].name".into()),
                "required".into(),
            ),
            "/etc/crilet/manifests/web.yaml: document 2: spec.containers[1].name: required",
        ),
        (
            ManifestProblem::doc(ProblemKind::Error, &file, 0, None, "invalid YAML: x".into()),
            "/etc/crilet/manifests/web.yaml: document 0: invalid YAML: x",
        ),
        (
            ManifestProblem::file(ProblemKind::Error, &file, "file is writable by group or others"),
            "/etc/crilet/manifests/web.yaml: file is writable by group or others",
        ),
    ];
    for (problem, want) in cases {
        assert_eq!(problem.to_string(), want);
    }
}

#[test]
fn a_deep_document_is_refused_and_the_ones_before_it_kept() {
    let deep = format!("{}{}", "[".repeat(100), "]".repeat(100));
    let text = format!(
        "{}---\n{}---\nspec: {deep}\n---\n{}",
        pod_yaml("one", "b:1"),
        pod_yaml("two", "b:1"),
        pod_yaml("four", "b:1")
    );
    let (pods, problems) = parse_manifest(Path::new("/m/p.yaml"), &text, NODE);
    assert_eq!(
        pods.iter().map(|p| (p.key.name.as_str(), p.doc)).collect::<Vec<_>>(),
        [("one", 0), ("two", 1)]
    );
    assert_eq!(problems.len(), 1, "{problems:#?}");
    assert_eq!(
        problems[0].to_string(),
        "/m/p.yaml: document 2: nested more than 64 levels deep at line 19 column 71; refusing it, and the rest \
         of the file is not read"
    );
}

#[test]
fn problems_per_file_are_capped_and_values_cut() {
    let containers: String = (0..80).map(|i| format!("  - name: C{i}\n    image: b\n")).collect();
    let text = format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {}\nspec:\n  containers:\n{containers}",
        "n".repeat(5000)
    );
    let (_, problems) = parse_manifest(Path::new("/m/p.yaml"), &text, NODE);
    assert_eq!(problems.len(), MAX_PROBLEMS_PER_FILE + 1);
    let last = &problems[MAX_PROBLEMS_PER_FILE];
    assert_eq!((last.kind, last.doc), (ProblemKind::Error, None));
    assert_eq!(last.reason, "31 more problems in this file are not shown; fix the ones above first");
    let name = &problems[0];
    assert_eq!(name.field.as_deref(), Some("metadata.name"));
    assert!(
        name.reason
            .starts_with(&format!("\"{}\"… (5000 bytes) must be a DNS-1123 subdomain", "n".repeat(80))),
        "{}",
        name.reason
    );
}
