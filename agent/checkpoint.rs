//! Durable replacement of the agent's small state files (status, back-off, kill deadline, probe
//! results, ... under each pod's dir). The agent restarts from them, so a crash or a power loss
//! must leave the old content or the new one, never a torn or empty file: the bytes go to a
//! sibling temp file that is fsynced, renamed over the target, and the directory is fsynced so
//! the rename itself survives. What each file holds is its owner's business; projected volumes
//! have their own writer (`volumes::atomic_writer`), log files theirs (`logrotate`).

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// A checkpoint could not be written; the target is as it was.
#[derive(Debug, thiserror::Error)]
#[error("cannot {op} checkpoint {path}")]
pub struct CheckpointError {
    pub op: &'static str,
    pub path: PathBuf,
    #[source]
    pub source: io::Error,
}

/// Replaces `path` with `bytes`, durably (see the module doc). Blocks on the disk: async code
/// calls [`write_async`].
pub fn write(path: &Path, bytes: &[u8]) -> Result<(), CheckpointError> {
    replace(path, bytes, None)
}

/// [`write`] for a file only its owner may read (a private key, a kubeconfig): the new content
/// is made with mode 0600 before it holds a byte.
pub fn write_private(path: &Path, bytes: &[u8]) -> Result<(), CheckpointError> {
    replace(path, bytes, Some(0o600))
}

/// [`write`] with the temp file made with `mode` (`None`: the process's default).
fn replace(path: &Path, bytes: &[u8], mode: Option<u32>) -> Result<(), CheckpointError> {
    let fail = |op| move |source| CheckpointError { op, path: path.to_path_buf(), source };
    let tmp = temp_path(path).ok_or_else(|| fail("name")(io::ErrorKind::InvalidInput.into()))?;
    let written = write_synced(&tmp, bytes, mode)
        .map_err(fail("write"))
        .and_then(|()| std::fs::rename(&tmp, path).map_err(fail("rename into place")));
    if written.is_err() {
        // The target is untouched; a temp file left behind would only collect.
        let _ = std::fs::remove_file(&tmp);
    }
    written?;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    File::open(dir).and_then(|d| d.sync_all()).map_err(fail("sync the directory of"))
}

/// [`write`] of `value` as JSON, the format of every checkpoint the agent keeps.
pub fn write_json(path: &Path, value: &impl serde::Serialize) -> Result<(), CheckpointError> {
    let json = serde_json::to_vec(value).map_err(|e| CheckpointError {
        op: "encode",
        path: path.to_path_buf(),
        source: e.into(),
    })?;
    write(path, &json)
}

/// [`write`] on the blocking pool, so an fsync never stalls a runtime thread.
pub async fn write_async(path: PathBuf, bytes: Vec<u8>) -> Result<(), CheckpointError> {
    let p = path.clone();
    match tokio::task::spawn_blocking(move || write(&p, &bytes)).await {
        Ok(r) => r,
        Err(e) => Err(CheckpointError { op: "write", path, source: io::Error::other(e) }),
    }
}

/// [`write_json`] on the blocking pool.
pub async fn write_json_async(path: PathBuf, value: &impl serde::Serialize) -> Result<(), CheckpointError> {
    match serde_json::to_vec(value) {
        Ok(json) => write_async(path, json).await,
        Err(e) => Err(CheckpointError { op: "encode", path, source: e.into() }),
    }
}

/// `<name>.tmp` beside `path`: the same directory, hence the same filesystem, so the rename is
/// atomic. One writer per file at a time (each pod's worker owns its pod's files).
fn temp_path(path: &Path) -> Option<PathBuf> {
    let mut name = path.file_name()?.to_os_string();
    name.push(".tmp");
    Some(path.with_file_name(name))
}

fn write_synced(tmp: &Path, bytes: &[u8], mode: Option<u32>) -> io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut opts = OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    if let Some(mode) = mode {
        // A temp file left by a crash keeps its own mode when reopened: made anew.
        let _ = std::fs::remove_file(tmp);
        opts.mode(mode);
    }
    let mut f = opts.open(tmp)?;
    f.write_all(bytes)?;
    f.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .expect("read dir")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    /// A private file is 0600 from its first byte, also over a world-readable one, and a
    /// temp file a crash left with another mode does not pass its mode on.
    #[test]
    fn private_files_are_owner_only() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("kubeconfig");
        let mode = |p: &Path| std::fs::metadata(p).expect("stat").permissions().mode() & 0o777;
        write(&path, b"old").expect("plain write");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        let stale = dir.path().join("kubeconfig.tmp");
        std::fs::write(&stale, b"left by a crash").expect("stale temp");
        std::fs::set_permissions(&stale, std::fs::Permissions::from_mode(0o666)).expect("chmod");
        write_private(&path, b"new").expect("private write");
        assert_eq!(std::fs::read(&path).expect("read"), b"new");
        assert_eq!(mode(&path), 0o600);
        assert_eq!(names(dir.path()), ["kubeconfig"], "no temp file left");
    }

    #[test]
    fn writes_land_whole_and_leave_no_temp_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("status.json");
        let cases: [(&str, &[u8]); 3] = [
            ("a new file", b"{\"phase\":\"Pending\"}"),
            ("replaced", b"{\"phase\":\"Running\"}"),
            ("emptied", b""),
        ];
        for (name, bytes) in cases {
            write(&path, bytes).expect(name);
            assert_eq!(std::fs::read(&path).expect(name), bytes, "{name}");
            assert_eq!(names(dir.path()), ["status.json"], "{name}: no temp file left");
        }
    }

    #[tokio::test]
    async fn the_async_writes_land_too() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("crash-backoff.json");
        write_async(path.clone(), b"{}".to_vec()).await.expect("write");
        assert_eq!(std::fs::read(&path).expect("read"), b"{}");
        write_json_async(path.clone(), &["a"]).await.expect("write");
        assert_eq!(std::fs::read(&path).expect("read"), br#"["a"]"#);
        assert_eq!(names(dir.path()), ["crash-backoff.json"]);
    }

    /// Targets that cannot be written (root writes through a read-only mode, so the cases are
    /// ones root cannot write either): each error names the path, and nothing is left behind.
    #[test]
    fn unwritable_targets_are_errors_naming_the_path() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("file"), b"old").expect("write");
        // A directory in the target's place: the rename fails after the temp file was written.
        std::fs::create_dir(dir.path().join("termination.json")).expect("mkdir");
        let cases = [
            ("no such directory", "gone/status.json"),
            ("the directory is a file", "file/status.json"),
            ("a directory in the target's place", "termination.json"),
        ];
        for (name, rel) in cases {
            let path = dir.path().join(rel);
            let e = write(&path, b"new").expect_err(name);
            assert_eq!(e.path, path, "{name}");
            assert!(e.to_string().contains(&path.display().to_string()), "{name}: {e}");
            assert_eq!(names(dir.path()), ["file", "termination.json"], "{name}: no temp file left");
        }
        assert_eq!(std::fs::read(dir.path().join("file")).expect("read"), b"old");
    }
}
