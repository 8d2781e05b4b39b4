use std::fs;
use std::os::unix::fs::PermissionsExt;

use super::*;
use crate::sysctl::Allowlist;

const GOOD: &str = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\nspec:\n  initContainers:\n  - name: prep\n    image: busybox\n  - name: log\n    image: busybox\n    restartPolicy: Always\n  containers:\n  - name: app\n    image: busybox\n";
const BAD: &str = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: Bad_Name\nspec:\n  containers:\n  - name: app\n    image: busybox\n";
const WARN: &str = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: warned\nspec:\n  nodeSelector: {disk: ssd}\n  containers:\n  - name: app\n    image: busybox\n";

fn dir_with(files: &[(&str, &str, u32)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).expect("chmod");
    for (name, text, mode) in files {
        let path = dir.path().join(name);
        fs::write(&path, text).expect("write");
        fs::set_permissions(&path, fs::Permissions::from_mode(*mode)).expect("chmod");
    }
    dir
}

/// (what, files, paths to name (relative to the dir; "" is the dir), failed?, pods, problem
/// lines that must appear (after the dir's path), notes)
#[test]
fn check_cases() {
    type Case<'a> =
        (&'a str, Vec<(&'a str, &'a str, u32)>, Vec<&'a str>, bool, Vec<&'a str>, Vec<&'a str>, usize);
    let cases: Vec<Case> = vec![
        ("a good directory", vec![("web.yaml", GOOD, 0o644)], vec![""], false, vec!["web"], vec![], 0),
        (
            "a bad file beside a good one: the good pod is listed",
            vec![("web.yaml", GOOD, 0o644), ("bad.yaml", BAD, 0o644)],
            vec![""],
            true,
            vec!["web"],
            vec!["error: {}/bad.yaml: document 0: metadata.name: "],
            0,
        ),
        (
            "warnings only do not fail",
            vec![("warned.yaml", WARN, 0o644)],
            vec![""],
            false,
            vec!["warned"],
            vec!["warning: {}/warned.yaml: document 0: spec.nodeSelector: "],
            0,
        ),
        (
            "a directory skips an editor backup; the same file named is checked, with a note",
            vec![("web.yaml.bak", BAD, 0o644)],
            vec!["", "web.yaml.bak"],
            true,
            vec![],
            vec!["error: {}/web.yaml.bak: document 0: metadata.name: "],
            1,
        ),
        (
            "a named file writable by others is refused as the agent refuses it",
            vec![("web.yaml", GOOD, 0o666)],
            vec!["web.yaml"],
            true,
            vec![],
            vec!["error: {}/web.yaml: file is writable by group or others (mode 0666); refusing it"],
            0,
        ),
        (
            "named files conflict among themselves",
            vec![("a.yaml", GOOD, 0o644), ("b.yaml", GOOD, 0o644)],
            vec!["b.yaml", "a.yaml"],
            true,
            vec!["web"],
            vec!["conflict: {}/b.yaml: document 0: metadata.name: pod default/web is also defined in"],
            0,
        ),
        (
            "a path that does not exist",
            vec![],
            vec!["nothing.yaml"],
            true,
            vec![],
            vec!["error: {}/nothing.yaml: cannot read: No such file or directory"],
            0,
        ),
    ];
    for (what, files, names, failed, pods, lines, notes) in cases {
        let dir = dir_with(&files);
        let paths: Vec<PathBuf> = names
            .iter()
            .map(|n| if n.is_empty() { dir.path().to_path_buf() } else { dir.path().join(n) })
            .collect();
        let report = check(&paths, "node1", &Allowlist::default());
        let text = render_text(&report);
        assert_eq!(report.failed(), failed, "{what}:\n{text}");
        let got: Vec<&str> = report.pods().map(|p| p.key.name.as_str()).collect();
        assert_eq!(got, pods, "{what}:\n{text}");
        for line in lines {
            let line = line.replace("{}", &dir.path().display().to_string());
            assert!(
                text.lines().any(|l| l.starts_with(&line)),
                "{what}: want a line starting {line:?} in\n{text}"
            );
        }
        assert_eq!(report.notes.len(), notes, "{what}: notes {:?}", report.notes);
    }
}

#[test]
fn the_node_name_is_part_of_the_uid() {
    let dir = dir_with(&[("web.yaml", GOOD, 0o644)]);
    let uid = |node| {
        check(&[dir.path().to_path_buf()], node, &Allowlist::default()).pods().next().map(|p| p.uid.clone())
    };
    assert_ne!(uid("node1"), uid("node2"));
    assert_eq!(uid("node1"), uid("node1"));
}

#[test]
fn text_and_json_rendering() {
    let dir = dir_with(&[("web.yaml", GOOD, 0o644), ("warned.yaml", WARN, 0o644)]);
    let report = check(&[dir.path().to_path_buf()], "node1", &Allowlist::default());
    let d = dir.path().display().to_string();
    let uid =
        |name: &str| report.pods().find(|p| p.key.name == name).map(|p| p.uid.clone()).unwrap_or_default();
    let text = render_text(&report);
    let want_table = tabwriter::align(
        &format!(
            "NAMESPACE\tNAME\tUID\tCONTAINERS\tSOURCE\n\
             default\twarned\t{}\tapp\t{d}/warned.yaml (document 0)\n\
             default\tweb\t{}\tinit:prep,sidecar:log,app\t{d}/web.yaml (document 0)\n",
            uid("warned"),
            uid("web")
        ),
        TABLE,
    );
    let want = format!(
        "warning: {d}/warned.yaml: document 0: spec.nodeSelector: {}\n\n{want_table}\
         OK: 2 pods would run; 0 errors, 1 warning, 0 conflicts\n",
        report.problems().next().map(|p| p.reason.clone()).unwrap_or_default()
    );
    assert_eq!(text, want);

    let v = render_json(&report);
    assert_eq!(v["failed"], false);
    assert_eq!(v["problems"][0]["kind"], "warning");
    assert_eq!(v["problems"][0]["field"], "spec.nodeSelector");
    assert_eq!(v["pods"][1]["initContainers"], json!(["prep", "log"]));
    assert_eq!(v["pods"][1]["containers"], json!(["app"]));
    assert_eq!(v["pods"][0]["warnings"].as_array().map(Vec::len), Some(1));
}
