//! What `load_dir` does with entries that are not plain manifest files: symlinks (inside and
//! outside the directory, dangling, to a writable file), devices, and files that change while
//! they are read.

use std::fs;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use super::NODE;
use crate::source::{ManifestSet, ProblemKind, load_dir};
use crate::sysctl::Allowlist;

fn pod(name: &str, image: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  containers:\n  - name: app\n    image: {image}\n"
    )
}

fn write(path: &Path, content: &str, mode: u32) {
    fs::write(path, content).expect("write");
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).expect("chmod");
}

fn tempdir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).expect("chmod");
    dir
}

/// (file name, reason) of every problem.
fn problems(set: &ManifestSet) -> Vec<(String, String)> {
    set.problems
        .iter()
        .map(|p| {
            assert_eq!(p.kind, ProblemKind::Error, "{p}");
            (p.file.file_name().unwrap_or_default().to_string_lossy().into_owned(), p.reason.clone())
        })
        .collect()
}

#[test]
fn symlinks_and_special_files() {
    let dir = tempdir();
    let outside = tempdir();
    write(&dir.path().join("real.yaml"), &pod("real", "busybox:1"), 0o644);
    write(&outside.path().join("elsewhere.yaml"), &pod("elsewhere", "busybox:1"), 0o644);
    write(&dir.path().join(".writable"), &pod("writable", "busybox:1"), 0o666);
    symlink(dir.path().join("real.yaml"), dir.path().join("alias.yml")).expect("symlink");
    symlink(outside.path().join("elsewhere.yaml"), dir.path().join("out.yaml")).expect("symlink");
    symlink("/etc/passwd", dir.path().join("passwd.yaml")).expect("symlink");
    symlink(dir.path().join(".writable"), dir.path().join("writable.yaml")).expect("symlink");
    symlink(dir.path().join("nothing"), dir.path().join("dangling.yaml")).expect("symlink");
    symlink(dir.path().join("loop.yaml"), dir.path().join("loop.yaml")).expect("symlink");
    nix::sys::stat::mknod(
        &dir.path().join("null.yaml"),
        nix::sys::stat::SFlag::S_IFCHR,
        nix::sys::stat::Mode::from_bits_truncate(0o644),
        nix::sys::stat::makedev(1, 3),
    )
    .expect("mknod /dev/null twin");
    let set = load_dir(dir.path(), NODE, &Allowlist::default(), &ManifestSet::default());
    // A symlink inside the directory is one more file naming the same pod: a conflict.
    assert_eq!(set.pods.keys().map(|k| k.name.as_str()).collect::<Vec<_>>(), ["real"]);
    let got = problems(&ManifestSet {
        problems: set.problems.iter().filter(|p| p.kind == ProblemKind::Error).cloned().collect(),
        ..Default::default()
    });
    let want = [
        ("dangling.yaml", "which cannot be followed"),
        ("loop.yaml", "which cannot be followed"),
        ("null.yaml", "a character device, not a regular file; refusing it"),
        ("out.yaml", "which is outside the manifest directory; refusing it"),
        ("passwd.yaml", "symlink to /etc/passwd, which is outside the manifest directory"),
        ("writable.yaml", "file is writable by group or others (mode 0666); refusing it"),
    ];
    assert_eq!(got.len(), want.len(), "{got:#?}");
    for ((file, reason), (want_file, want_reason)) in got.iter().zip(want) {
        assert_eq!(file, want_file);
        assert!(reason.contains(want_reason), "{file}: {reason}");
    }
    assert!(got[5].1.starts_with("symlink to "), "names the target: {}", got[5].1);
    let conflict = set.problems.iter().find(|p| p.kind == ProblemKind::Conflict).expect("conflict");
    assert!(conflict.file.ends_with("real.yaml"), "alias.yml sorts first: {conflict}");
}

/// A writer rewriting the file in place (truncate, then one write) while it is read: every load
/// sees the file empty, or one whole version, or says it kept changing; never a torn mix.
#[test]
fn a_file_rewritten_while_it_is_read_is_never_torn() {
    let dir = tempdir();
    let path = dir.path().join("busy.yaml");
    let images = ["busybox:1.36.1", "registry.local/very/long/image/name:2"];
    let versions = images.map(|image| pod("busy", image));
    write(&path, &versions[0], 0o644);
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (path, versions, stop) = (path.clone(), versions.clone(), stop.clone());
        std::thread::spawn(move || {
            use std::io::Write;
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) {
                if let Ok(mut f) = fs::OpenOptions::new().write(true).truncate(true).open(&path) {
                    let _ = f.write_all(versions[i % 2].as_bytes());
                }
                i += 1;
            }
        })
    };
    let (mut whole, mut changing, mut empty) = (0, 0, 0);
    for _ in 0..300 {
        let set = load_dir(dir.path(), NODE, &Allowlist::default(), &ManifestSet::default());
        if let Some(p) = set.pods.values().next() {
            let image = p.pod.spec.as_ref().and_then(|s| s.containers[0].image.clone()).unwrap_or_default();
            assert!(images.contains(&image.as_str()), "torn read gave image {image:?}");
            whole += 1;
        } else if set.problems.is_empty() {
            empty += 1; // read between the truncation and the write: the file was empty then
        } else {
            assert_eq!(set.problems.len(), 1, "{:#?}", set.problems);
            assert!(
                set.problems[0].reason.contains("kept changing while it was being read"),
                "{}",
                set.problems[0]
            );
            changing += 1;
        }
    }
    stop.store(true, Ordering::Relaxed);
    writer.join().expect("writer");
    assert!(whole > 0, "some loads must see a whole version ({changing} changing, {empty} empty)");
}
