//! Parsing off the caller's thread (`pool`): a slow file neither delays nor hides the others,
//! runs into its deadline, and its late result wakes the owner; unchanged files are parsed once;
//! a parser panic is that file's error. The slow parse is a test parse function that blocks
//! until released, so nothing here depends on timing beyond generous deadlines.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use super::NODE;
use crate::source::dir::load_dir_with;
use crate::source::pool::Parser;
use crate::source::{ManifestSet, ProblemKind, parse_manifest};

fn pod(name: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  containers:\n  - name: app\n    image: busybox:1\n"
    )
}

fn write(dir: &Path, name: &str, content: &str) {
    let path = dir.join(name);
    fs::write(&path, content).expect("write");
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

fn reason_for<'a>(set: &'a ManifestSet, file: &str) -> &'a str {
    set.problems.iter().find(|p| p.file.ends_with(file)).map_or("", |p| p.reason.as_str())
}

#[test]
fn a_slow_file_neither_delays_nor_hides_the_others() {
    let dir = tempdir();
    write(dir.path(), "a.yaml", &pod("a"));
    write(dir.path(), "slow.yaml", &format!("# SLOW\n{}", pod("slow")));
    write(dir.path(), "z.yaml", "apiVersion: v1\nkind: Pod\nmetadata: {name: Bad_Name}\n");
    let (release, released) = mpsc::channel::<()>();
    let released = Mutex::new(released);
    let wakes = Arc::new(AtomicUsize::new(0));
    let parser = Parser::with_parse(NODE, Duration::from_millis(300), move |file, text, node| {
        if text.starts_with("# SLOW") {
            let _ = released.lock().map(|rx| rx.recv());
        }
        parse_manifest(file, text, node)
    })
    .on_late_result({
        let wakes = wakes.clone();
        move || {
            wakes.fetch_add(1, Ordering::SeqCst);
        }
    });

    // The scan returns while the slow parse is still blocked: the others are all there.
    let set = load_dir_with(&parser, dir.path(), &ManifestSet::default(), Duration::from_millis(50));
    assert_eq!(names(&set), ["a"]);
    assert_eq!(
        reason_for(&set, "slow.yaml"),
        "still being parsed; its pods are kept as they are until that is done"
    );
    assert!(reason_for(&set, "z.yaml").contains("Bad_Name"), "{:#?}", set.problems);
    assert!(set.problems.iter().all(|p| p.kind == ProblemKind::Error));

    // Past its deadline it is refused, and not started again.
    let set = load_dir_with(&parser, dir.path(), &set, Duration::from_secs(5));
    assert!(
        reason_for(&set, "slow.yaml").starts_with("parsing took longer than 0.3 s; refusing it"),
        "{:#?}",
        set.problems
    );
    assert_eq!(names(&set), ["a"]);

    // Its late result wakes the owner, and the next scan has it.
    release.send(()).expect("release the slow parse");
    let start = Instant::now();
    while wakes.load(Ordering::SeqCst) == 0 {
        assert!(start.elapsed() < Duration::from_secs(10), "no wake-up after the late result");
        std::thread::sleep(Duration::from_millis(10));
    }
    let set = load_dir_with(&parser, dir.path(), &set, Duration::from_secs(5));
    assert_eq!(names(&set), ["a", "slow"]);
    assert!(set.problems.iter().all(|p| p.file.ends_with("z.yaml")), "only z.yaml: {:#?}", set.problems);
}

#[test]
fn unchanged_files_are_parsed_once() {
    let dir = tempdir();
    write(dir.path(), "a.yaml", &pod("a"));
    write(dir.path(), "b.yaml", &pod("b"));
    let calls = Arc::new(AtomicUsize::new(0));
    let parser = Parser::with_parse(NODE, Duration::from_secs(10), {
        let calls = calls.clone();
        move |file, text, node| {
            calls.fetch_add(1, Ordering::SeqCst);
            parse_manifest(file, text, node)
        }
    });
    let wait = Duration::from_secs(10);
    let first = load_dir_with(&parser, dir.path(), &ManifestSet::default(), wait);
    let second = load_dir_with(&parser, dir.path(), &first, wait);
    assert_eq!((calls.load(Ordering::SeqCst), &second), (2, &first));
    write(dir.path(), "b.yaml", &pod("b2"));
    let third = load_dir_with(&parser, dir.path(), &second, wait);
    assert_eq!((calls.load(Ordering::SeqCst), names(&third)), (3, vec!["a".to_string(), "b2".to_string()]));
}

#[test]
fn a_parser_panic_is_that_files_error() {
    let dir = tempdir();
    write(dir.path(), "a.yaml", &pod("a"));
    write(dir.path(), "boom.yaml", "# PANIC\n");
    let parser = Parser::with_parse(NODE, Duration::from_secs(10), |file, text, node| {
        assert!(!text.starts_with("# PANIC"), "boom");
        parse_manifest(file, text, node)
    });
    let set = load_dir_with(&parser, dir.path(), &ManifestSet::default(), Duration::from_secs(10));
    assert_eq!(names(&set), ["a"]);
    assert!(
        reason_for(&set, "boom.yaml").starts_with("the manifest parser failed on this file (boom)"),
        "{:#?}",
        set.problems
    );
}
