//! Directory loading on a real (temporary) directory: file selection, permissions, keeping pods
//! of files that went bad, conflicts.

use std::ffi::OsStr;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use super::NODE;
use crate::model::PodKey;
use crate::source::dir::manifest_name;
use crate::source::{ManifestSet, ProblemKind, load_dir};
use crate::sysctl::Allowlist;

fn pod(name: &str, image: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  containers:\n  - name: app\n    image: {image}\n"
    )
}

fn write(dir: &Path, name: &str, content: &str) {
    let path = dir.join(name);
    fs::write(&path, content).expect("write manifest");
    fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).expect("chmod");
}

fn tempdir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).expect("chmod");
    dir
}

fn names(set: &ManifestSet) -> Vec<String> {
    set.pods.keys().map(|k| k.name.clone()).collect()
}

fn key(name: &str) -> PodKey {
    PodKey::new("default", name)
}

#[test]
fn file_name_cases() {
    let cases = [
        ("web.yaml", true),
        ("web.yml", true),
        ("web.json", true),
        ("WEB.YAML", true),
        ("two.dots.yaml", true),
        (".web.yaml", false),
        (".web.yaml.swp", false),
        (".#web.yaml", false),
        ("#web.yaml#", false),
        ("web.yaml~", false),
        ("web.yaml.swp", false),
        ("web.yaml.swx", false),
        ("web.yaml.bak", false),
        ("web.yaml.orig", false),
        ("web.yaml.tmp", false),
        ("web.yaml.dpkg-old", false),
        ("web.yaml.dpkg-new", false),
        ("web.yaml.rpmsave", false),
        ("4913", false),
        ("README.md", false),
        ("web", false),
    ];
    for (name, want) in cases {
        assert_eq!(manifest_name(OsStr::new(name)).is_ok(), want, "{name}");
    }
}

#[test]
fn only_manifests_are_read_in_name_order() {
    let dir = tempdir();
    write(dir.path(), "b.yaml", &pod("b", "busybox:1"));
    write(
        dir.path(),
        "a.json",
        r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a"},"spec":{"containers":[{"name":"c","image":"x:1"}]}}"#,
    );
    write(dir.path(), "c.yaml.swp", "garbage");
    write(dir.path(), ".hidden.yaml", &pod("hidden", "x:1"));
    write(dir.path(), "d.yaml~", &pod("backup", "x:1"));
    write(dir.path(), "notes.txt", "not yaml");
    nix::unistd::mkfifo(&dir.path().join("fifo.yaml"), nix::sys::stat::Mode::from_bits_truncate(0o644))
        .expect("mkfifo");
    fs::create_dir(dir.path().join("sub.yaml")).expect("mkdir");
    write(&dir.path().join("sub.yaml"), "nested.yaml", &pod("nested", "x:1"));
    let set = load_dir(dir.path(), NODE, &Allowlist::default(), &ManifestSet::default());
    assert_eq!(names(&set), ["a", "b"]);
    // Entries with a manifest's name that are not regular files are reported, never read.
    let refused: Vec<_> = set
        .problems
        .iter()
        .map(|p| (p.kind, p.file.file_name().unwrap_or_default().to_owned(), p.reason.clone()))
        .collect();
    assert_eq!(
        refused,
        [
            (
                ProblemKind::Error,
                "fifo.yaml".into(),
                "a FIFO (named pipe), not a regular file; refusing it".into()
            ),
            (ProblemKind::Error, "sub.yaml".into(), "a directory, not a regular file; refusing it".into()),
        ]
    );
    assert_eq!(set.pods[&key("a")].source.manifest(), Some(dir.path().join("a.json").as_path()));
}

#[test]
fn missing_directory_is_an_empty_set() {
    let dir = tempdir();
    let missing = dir.path().join("nope");
    let previous = load_dir(dir.path(), NODE, &Allowlist::default(), &ManifestSet::default());
    let set = load_dir(&missing, NODE, &Allowlist::default(), &previous);
    assert!(set.pods.is_empty());
    assert_eq!(set.problems.len(), 1);
    assert_eq!(set.problems[0].kind, ProblemKind::Warning);
}

#[test]
fn writable_directory_is_refused_and_keeps_previous_pods() {
    let dir = tempdir();
    write(dir.path(), "a.yaml", &pod("a", "busybox:1"));
    let good = load_dir(dir.path(), NODE, &Allowlist::default(), &ManifestSet::default());
    assert_eq!(names(&good), ["a"]);
    write(dir.path(), "b.yaml", &pod("b", "busybox:1"));
    for mode in [0o775, 0o757, 0o777] {
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(mode)).expect("chmod");
        let set = load_dir(dir.path(), NODE, &Allowlist::default(), &good);
        assert_eq!(set.pods, good.pods, "mode {mode:o}: previous pods kept, nothing new read");
        assert_eq!(set.problems.len(), 1);
        let p = &set.problems[0];
        assert_eq!((p.kind, p.file.as_path(), p.doc), (ProblemKind::Error, dir.path(), None));
        assert!(p.reason.contains("writable by group or others"), "{p}");
    }
    let fresh = load_dir(dir.path(), NODE, &Allowlist::default(), &ManifestSet::default());
    assert!(fresh.pods.is_empty(), "without previous pods a refused directory runs nothing");
}

#[test]
fn writable_file_is_refused_like_a_bad_file() {
    let dir = tempdir();
    write(dir.path(), "a.yaml", &pod("a", "busybox:1"));
    write(dir.path(), "b.yaml", &pod("b", "busybox:1"));
    let good = load_dir(dir.path(), NODE, &Allowlist::default(), &ManifestSet::default());
    write(dir.path(), "a.yaml", &pod("a", "busybox:2"));
    write(dir.path(), "c.yaml", &pod("c", "busybox:1"));
    for name in ["a.yaml", "c.yaml"] {
        fs::set_permissions(dir.path().join(name), fs::Permissions::from_mode(0o666)).expect("chmod");
    }
    let set = load_dir(dir.path(), NODE, &Allowlist::default(), &good);
    assert_eq!(names(&set), ["a", "b"], "c is never run, a keeps running as it was");
    assert_eq!(set.pods[&key("a")], good.pods[&key("a")], "the edit in the refused file is not applied");
    let refused: Vec<_> =
        set.problems.iter().map(|p| (p.kind, p.file.file_name().unwrap().to_owned())).collect();
    assert_eq!(refused, [(ProblemKind::Error, "a.yaml".into()), (ProblemKind::Error, "c.yaml".into())]);
    assert!(set.problems[0].reason.contains("mode 0666"), "{}", set.problems[0]);
}

#[test]
fn bad_edit_keeps_the_previous_pods_of_that_file() {
    let dir = tempdir();
    write(dir.path(), "pods.yaml", &format!("{}---\n{}", pod("one", "busybox:1"), pod("two", "busybox:1")));
    let good = load_dir(dir.path(), NODE, &Allowlist::default(), &ManifestSet::default());
    assert_eq!(names(&good), ["one", "two"]);

    // Document 1 goes bad while document 0 gets a valid image edit.
    let bad = format!(
        "{}---\n{}",
        pod("one", "busybox:2"),
        pod("two", "busybox:1").replace("image: busybox:1", "image: ''")
    );
    write(dir.path(), "pods.yaml", &bad);
    let set = load_dir(dir.path(), NODE, &Allowlist::default(), &good);
    assert_eq!(names(&set), ["one", "two"]);
    assert_ne!(set.pods[&key("one")], good.pods[&key("one")], "the valid document is applied");
    assert_eq!(set.pods[&key("two")], good.pods[&key("two")], "the bad one keeps the running pod unchanged");
    let errors: Vec<_> = set.problems.iter().map(|p| (p.kind, p.doc, p.field.clone())).collect();
    assert_eq!(errors, [(ProblemKind::Error, Some(1), Some("spec.containers[0].image".to_string()))]);

    // Unparseable file: both kept. Removed file: both gone. Fixed file: applied.
    write(dir.path(), "pods.yaml", "apiVersion: v1\nkind: Pod\nspec: [\n");
    let set = load_dir(dir.path(), NODE, &Allowlist::default(), &good);
    assert_eq!(set.pods, good.pods);
    fs::remove_file(dir.path().join("pods.yaml")).expect("rm");
    assert!(
        load_dir(dir.path(), NODE, &Allowlist::default(), &set).pods.is_empty(),
        "a removed file removes its pods"
    );
    write(dir.path(), "pods.yaml", &pod("one", "busybox:3"));
    let fixed = load_dir(dir.path(), NODE, &Allowlist::default(), &set);
    assert_eq!(names(&fixed), ["one"], "a valid file gives exactly its pods");
}

#[test]
fn conflicts_are_resolved_by_file_then_document() {
    let dir = tempdir();
    write(dir.path(), "b.yaml", &format!("{}---\n{}", pod("web", "nginx:2"), pod("web", "nginx:3")));
    write(dir.path(), "a.yaml", &pod("web", "nginx:1"));
    let set = load_dir(dir.path(), NODE, &Allowlist::default(), &ManifestSet::default());
    assert_eq!(names(&set), ["web"]);
    let winner = &set.pods[&key("web")];
    assert_eq!((winner.source.manifest(), winner.doc), (Some(dir.path().join("a.yaml").as_path()), 0));
    let conflicts: Vec<_> = set.problems.iter().filter(|p| p.kind == ProblemKind::Conflict).collect();
    assert_eq!(conflicts.iter().map(|p| p.doc).collect::<Vec<_>>(), [Some(0), Some(1)]);
    for p in &conflicts {
        assert_eq!(p.file, dir.path().join("b.yaml"));
        let text = p.to_string();
        assert!(
            text.contains("a.yaml document 0") && text.contains("default/web"),
            "names both places: {text}"
        );
    }
    assert!(set.has_errors());
    // Same namespace/name only: another namespace is another pod.
    write(
        dir.path(),
        "b.yaml",
        &pod("web", "nginx:2").replace("  name: web\n", "  name: web\n  namespace: dev\n"),
    );
    let set = load_dir(dir.path(), NODE, &Allowlist::default(), &ManifestSet::default());
    assert_eq!(set.pods.len(), 2);
    assert!(set.problems.is_empty(), "{:#?}", set.problems);
}

#[test]
fn unchanged_directory_gives_an_equal_set() {
    let dir = tempdir();
    write(dir.path(), "a.yaml", &pod("a", "busybox:1").replace("spec:\n", "spec:\n  nodeSelector: {a: b}\n"));
    let first = load_dir(dir.path(), NODE, &Allowlist::default(), &ManifestSet::default());
    assert_eq!(first.problems.len(), 1, "the warning");
    assert_eq!(load_dir(dir.path(), NODE, &Allowlist::default(), &first), first);
}

#[test]
fn binary_and_huge_files_are_errors() {
    let dir = tempdir();
    fs::write(dir.path().join("bin.yaml"), [0xff, 0xfe, 0x00]).expect("write");
    fs::write(dir.path().join("huge.yaml"), vec![b'#'; 5 * 1024 * 1024]).expect("write");
    for name in ["bin.yaml", "huge.yaml"] {
        fs::set_permissions(dir.path().join(name), fs::Permissions::from_mode(0o644)).expect("chmod");
    }
    let set = load_dir(dir.path(), NODE, &Allowlist::default(), &ManifestSet::default());
    let reasons: Vec<_> = set.problems.iter().map(|p| (p.kind, p.reason.as_str())).collect();
    assert_eq!(
        reasons,
        [
            (ProblemKind::Error, "not UTF-8 text: invalid byte 0xff at line 1 column 1 (byte 0)"),
            (ProblemKind::Error, "file is larger than 1048576 bytes (1 MiB); refusing it")
        ]
    );
}
