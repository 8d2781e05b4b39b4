//! The atomic writer on a temporary directory: files, modes, the `..data` swap, stale entries.

use std::os::unix::fs::MetadataExt;

use super::*;

fn payload(files: &[(&str, &str, u32)]) -> Payload {
    files
        .iter()
        .map(|(p, d, m)| (p.to_string(), FileProjection { data: d.as_bytes().to_vec(), mode: *m }))
        .collect()
}

fn versions(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .expect("list")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("..") && n != DATA_DIR)
        .collect();
    v.sort();
    v
}

fn visible(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .expect("list")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with(".."))
        .collect();
    v.sort();
    v
}

fn read(dir: &Path, p: &str) -> String {
    std::fs::read_to_string(dir.join(p)).unwrap_or_else(|e| panic!("{p}: {e}"))
}

#[test]
fn path_validation() {
    let cases = [
        ("plain", "a", Ok("a")),
        ("nested", "a/b/c", Ok("a/b/c")),
        ("cleaned", "a//b/./c/", Ok("a/b/c")),
        ("dot in a name", "a..b", Ok("a..b")),
        ("hidden file", ".a", Ok(".a")),
        ("empty", "", Err("must not be empty")),
        ("absolute", "/etc/passwd", Err("must be relative path")),
        ("dot dot", "a/../b", Err("must not contain '..'")),
        ("only dot dot", "..", Err("must not contain '..'")),
        ("reserved prefix", "..data", Err("must not start with '..'")),
        ("reserved prefix below", "..x/y", Err("must not start with '..'")),
        ("long name", &*"n".repeat(256), Err("filenames must be less than or equal to 255 characters")),
    ];
    for (name, path, want) in cases {
        match (validate_path(path), want) {
            (Ok(got), Ok(w)) => assert_eq!(got, w, "{name}"),
            (Err(WriteError::InvalidPath { reason, .. }), Err(w)) => assert_eq!(reason, w, "{name}"),
            (got, want) => panic!("{name}: got {got:?}, want {want:?}"),
        }
    }
    assert!(validate_path(&"a/".repeat(2049)).is_err(), "longer than 4096");
}

#[test]
fn first_write_makes_files_links_and_modes() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    let p = payload(&[("ca.crt", "CA", 0o644), ("token", "T", 0o600), ("sub/dir/file", "F", 0o400)]);
    assert!(write(dir, &p).expect("write"));
    assert_eq!(visible(dir), ["ca.crt", "sub", "token"]);
    assert_eq!(std::fs::read_link(dir.join("ca.crt")).expect("link"), Path::new("..data/ca.crt"));
    assert_eq!(std::fs::read_link(dir.join("sub")).expect("link"), Path::new("..data/sub"));
    assert_eq!(read(dir, "ca.crt"), "CA");
    assert_eq!(read(dir, "sub/dir/file"), "F");
    let mode = |p: &str| std::fs::metadata(dir.join(p)).expect("stat").mode() & 0o7777;
    assert_eq!((mode("ca.crt"), mode("token"), mode("sub/dir/file")), (0o644, 0o600, 0o400));
    let v = versions(dir);
    assert_eq!(v.len(), 1, "{v:?}");
    assert!(v[0].starts_with(&format!("..{}", jiff::Timestamp::now().strftime("%Y_"))), "{v:?}");
    assert_eq!(std::fs::read_link(dir.join(DATA_DIR)).expect("data link"), Path::new(&v[0]));
    assert_eq!(mode(&v[0]), 0o755);
}

#[test]
fn unchanged_payload_writes_nothing() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    let p = payload(&[("a", "1", 0o644), ("b/c", "2", 0o644)]);
    assert!(write(dir, &p).expect("first"));
    let before = versions(dir);
    assert!(!write(dir, &p).expect("second"), "no new version for the same payload");
    assert_eq!(versions(dir), before);
    // A missing visible link is made again without a new version (kubernetes#121472).
    std::fs::remove_file(dir.join("a")).expect("remove link");
    assert!(!write(dir, &p).expect("third"));
    assert_eq!(read(dir, "a"), "1");
    assert_eq!(versions(dir), before);
}

#[test]
fn update_swaps_data_and_removes_stale_entries() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    let p1 = payload(&[
        ("keep", "old", 0o644),
        ("gone", "x", 0o644),
        ("d/one", "1", 0o644),
        ("d/two", "2", 0o644),
    ]);
    assert!(write(dir, &p1).expect("first"));
    let v1 = versions(dir);
    // An open reader of the old version keeps its contents: the swap never writes in place.
    let held = std::fs::File::open(dir.join("keep")).expect("open");
    let p2 = payload(&[("keep", "new", 0o644), ("d/one", "1", 0o644), ("added", "+", 0o640)]);
    assert!(write(dir, &p2).expect("second"));
    let v2 = versions(dir);
    assert_eq!(v2.len(), 1, "the old version is removed: {v2:?}");
    assert_ne!(v1, v2);
    assert_eq!(visible(dir), ["added", "d", "keep"]);
    assert_eq!(read(dir, "keep"), "new");
    assert!(!dir.join("d/two").exists());
    assert_eq!(read(dir, "d/one"), "1");
    assert!(!dir.join("..data_tmp").exists());
    drop(held);
    // A mode change alone is a new version.
    let p3 = payload(&[("keep", "new", 0o600), ("d/one", "1", 0o644), ("added", "+", 0o640)]);
    assert!(write(dir, &p3).expect("third"));
    assert_eq!(std::fs::metadata(dir.join("keep")).expect("stat").mode() & 0o777, 0o600);
    // An empty payload empties the volume (an optional object that is gone).
    assert!(write(dir, &Payload::new()).expect("empty"));
    assert!(visible(dir).is_empty(), "{:?}", visible(dir));
    assert_eq!(versions(dir).len(), 1);
}

#[test]
fn leftovers_of_an_interrupted_write_are_cleaned() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    let p = payload(&[("a", "1", 0o644)]);
    assert!(write(dir, &p).expect("first"));
    std::fs::create_dir(dir.join("..2020_01_01_00_00_00.42")).expect("orphan");
    std::os::unix::fs::symlink("..2020_01_01_00_00_00.42", dir.join(NEW_DATA_DIR)).expect("tmp link");
    assert!(write(dir, &payload(&[("a", "2", 0o644)])).expect("second"));
    assert_eq!(read(dir, "a"), "2");
    assert_eq!(versions(dir).len(), 1, "{:?}", versions(dir));
}

#[test]
fn invalid_payload_writes_nothing() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    let p = payload(&[("ok", "1", 0o644), ("../escape", "x", 0o644)]);
    assert!(matches!(write(dir, &p), Err(WriteError::InvalidPath { .. })));
    assert_eq!(std::fs::read_dir(dir).expect("list").count(), 0);
}
