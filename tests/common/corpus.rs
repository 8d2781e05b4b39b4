//! The hostile-manifest corpus (`tests/manifest_corpus`): its `expected.txt` (one line per entry:
//! FILE, KIND, TEXT of the problem the agent must report) and the entries themselves, copied or
//! generated into a manifest directory. Shared by `hostile_input` (the agent's loader) and
//! `validate` (`crilet validate`).

use std::fs;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::Path;

use crilet::source::ProblemKind;

pub const CORPUS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/manifest_corpus");

/// One line of `expected.txt`.
#[derive(Debug, Clone)]
pub struct Expectation {
    /// File name in the manifest directory (without the `@` of generated entries).
    pub file: String,
    pub generated: bool,
    pub kind: ProblemKind,
    pub text: String,
}

pub fn expectations() -> Vec<Expectation> {
    let list = fs::read_to_string(Path::new(CORPUS).join("expected.txt")).expect("read expected.txt");
    let mut out = Vec::new();
    for line in list.lines().filter(|l| !l.is_empty() && !l.starts_with('#')) {
        let mut cols = line.splitn(3, '\t');
        let (Some(file), Some(kind), Some(text)) = (cols.next(), cols.next(), cols.next()) else {
            panic!("expected.txt: not FILE<TAB>KIND<TAB>TEXT: {line:?}");
        };
        let kind = match kind {
            "error" => ProblemKind::Error,
            "warning" => ProblemKind::Warning,
            "conflict" => ProblemKind::Conflict,
            other => panic!("expected.txt: unknown kind {other:?} in {line:?}"),
        };
        let generated = file.starts_with('@');
        let file = file.trim_start_matches('@').to_string();
        out.push(Expectation { file, generated, kind, text: text.to_string() });
    }
    out
}

pub fn pod(name: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  containers:\n  - name: app\n    image: busybox:1.36\n"
    )
}

pub fn write(path: &Path, content: &[u8], mode: u32) {
    fs::write(path, content).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).expect("chmod");
}

pub fn manifest_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).expect("chmod");
    dir
}

/// Puts the entry into `dir`: a copy of the committed file, or the generated thing. `outside`
/// is a directory for symlink targets that must not be in `dir`.
pub fn create(e: &Expectation, dir: &Path, outside: &Path) {
    create_at(e, &dir.join(&e.file), dir, outside);
}

/// [`create`] under another name (`path`, in `dir`).
pub fn create_at(e: &Expectation, path: &Path, dir: &Path, outside: &Path) {
    let path = path.to_path_buf();
    if !e.generated {
        let bytes = fs::read(Path::new(CORPUS).join(&e.file)).expect("read corpus file");
        return write(&path, &bytes, 0o644);
    }
    match e.file.as_str() {
        "huge-100mb.yaml" => {
            let f = fs::File::create(&path).expect("create");
            f.set_len(100 * 1024 * 1024).expect("grow to 100 MB");
            fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).expect("chmod");
        }
        "nested-100000.yaml" => {
            let text = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
            write(&path, text.as_bytes(), 0o644);
        }
        "fifo.yaml" => {
            nix::unistd::mkfifo(&path, nix::sys::stat::Mode::from_bits_truncate(0o644)).expect("mkfifo");
        }
        "device.yaml" => {
            nix::sys::stat::mknod(
                &path,
                nix::sys::stat::SFlag::S_IFCHR,
                nix::sys::stat::Mode::from_bits_truncate(0o644),
                nix::sys::stat::makedev(1, 5), // /dev/zero: reading it would never end
            )
            .expect("mknod");
        }
        "directory.yaml" => {
            fs::create_dir(&path).expect("mkdir");
            write(&path.join("inner.yaml"), pod("inner").as_bytes(), 0o644);
        }
        "symlink-outside.yaml" => {
            let target = outside.join("elsewhere.yaml");
            write(&target, pod("elsewhere").as_bytes(), 0o644);
            symlink(&target, &path).expect("symlink");
        }
        "symlink-writable.yaml" => {
            let target = dir.join(".writable-target");
            write(&target, pod("writable-target").as_bytes(), 0o666);
            symlink(&target, &path).expect("symlink");
        }
        "symlink-dangling.yaml" => symlink(dir.join("nothing-here"), &path).expect("symlink"),
        "writable.yaml" => write(&path, pod("writable").as_bytes(), 0o666),
        "rewritten-mid-read.yaml" => write(&path, pod("rewritten-mid-read").as_bytes(), 0o644),
        other => panic!("expected.txt names a generated entry this test cannot make: @{other}"),
    }
}

/// How `crilet validate` names a problem's kind (`error:`, `warning:`, `conflict:`).
pub fn kind_name(kind: ProblemKind) -> &'static str {
    match kind {
        ProblemKind::Error => "error",
        ProblemKind::Warning => "warning",
        ProblemKind::Conflict => "conflict",
    }
}
