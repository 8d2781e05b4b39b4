//! The I/O of one container's rotation pass: status, stat and, for a log due, the directory
//! listing, then the plan's removals and compressions (on a blocking thread), the rename and
//! the runtime's reopen.

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufWriter};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use flate2::Compression;
use flate2::write::GzEncoder;
use tracing::{debug, error, info, warn};

use super::Policy;
use super::plan::{self, Action, COMPRESS_SUFFIX, TIMESTAMP_FORMAT, TMP_SUFFIX};
use crate::cri::{CriClient, CriError};

/// Each running container's log path, from where this agent lays it out or else from its CRI
/// status. A container's log path never changes while it exists, so it is found once, not on
/// every pass (220 containers would cost 22 status calls a second at the default interval).
#[derive(Debug, Default)]
pub(super) struct LogPaths(std::sync::Mutex<std::collections::HashMap<String, PathBuf>>);

impl LogPaths {
    fn get(&self, id: &str) -> Option<PathBuf> {
        self.0.lock().ok()?.get(id).cloned()
    }

    fn insert(&self, id: &str, path: PathBuf) {
        if let Ok(mut m) = self.0.lock() {
            m.insert(id.to_string(), path);
        }
    }

    /// Forgets containers that no longer run.
    pub(super) fn retain(&self, running: &std::collections::HashSet<&str>) {
        if let Ok(mut m) = self.0.lock() {
            m.retain(|id, _| running.contains(id.as_str()));
        }
    }
}

/// Why one container's pass failed.
#[derive(Debug, thiserror::Error)]
pub(super) enum RotateError {
    #[error("cannot read the status of container {id}")]
    Status { id: String, source: CriError },
    #[error("container log {path} is missing and the runtime did not reopen it")]
    ReopenMissing { path: PathBuf, source: CriError },
    #[error("cannot {op} {path}")]
    Io { op: &'static str, path: PathBuf, source: io::Error },
    #[error("cannot reopen the container log at {path} after renaming it to {rotated}")]
    Reopen { path: PathBuf, rotated: PathBuf, source: CriError },
    #[error("the removal and compression of rotated logs of {path} did not finish")]
    Interrupted { path: PathBuf },
}

fn io_err(op: &'static str, path: &Path) -> impl FnOnce(io::Error) -> RotateError {
    let path = path.to_path_buf();
    move |source| RotateError::Io { op, path, source }
}

/// Checks one container and rotates its log if due; failures are logged with the container and
/// path, and retried on the next pass.
pub(super) async fn check_container(
    cri: &CriClient,
    id: &str,
    laid_out: Option<&Path>,
    pod_logs_dir: &Path,
    policy: &Policy,
    paths: &LogPaths,
) {
    if let Err(e) = try_check(cri, id, laid_out, pod_logs_dir, policy, paths).await {
        warn!(container = %id, error = %crate::error_chain(&e), "container log rotation failed; retrying next interval");
    }
}

async fn try_check(
    cri: &CriClient,
    id: &str,
    laid_out: Option<&Path>,
    pod_logs_dir: &Path,
    policy: &Policy,
    paths: &LogPaths,
) -> Result<(), RotateError> {
    let path = match paths.get(id) {
        Some(path) => path,
        // The file where this agent lays the container's log out exists: that is its log. (Not
        // there, it is asked for: a rotation cut short may have left no current file, see below.)
        None if laid_out.is_some_and(Path::is_file) => {
            let path = laid_out.map(Path::to_path_buf).unwrap_or_default();
            paths.insert(id, path.clone());
            path
        }
        None => {
            let status = cri
                .container_status(id, "")
                .await
                .map_err(|source| RotateError::Status { id: id.to_string(), source })?;
            let path = PathBuf::from(&status.log_path);
            paths.insert(id, path.clone());
            path
        }
    };
    tracing::Span::current().record("path", tracing::field::display(path.display()));
    // Only files under our own log directory are ever renamed or removed.
    let (Some(dir), Some(name)) = (path.parent(), path.file_name().and_then(|n| n.to_str())) else {
        return Ok(());
    };
    if !path.is_absolute() || !path.starts_with(pod_logs_dir) {
        debug!(path = %path.display(), "log outside the pod logs directory; not rotating it");
        return Ok(());
    }
    let size = match fs::metadata(&path) {
        Ok(m) => m.len(),
        // A rotation cut short (agent killed between rename and reopen) left no current file.
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            cri.reopen_container_log(id)
                .await
                .map_err(|source| RotateError::ReopenMissing { path: path.clone(), source })?;
            info!(path = %path.display(), "container log was missing; reopened it");
            fs::metadata(&path).map_err(io_err("stat the reopened log", &path))?.len()
        }
        Err(e) => return Err(io_err("stat", &path)(e)),
    };
    // Below the limit nothing is listed: as the kubelet does, an interrupted pass's leftovers
    // are removed when the log is next due (220 containers would otherwise cost 22 directory
    // reads a second at the default interval).
    if size < policy.max_size {
        return Ok(());
    }
    let siblings = list_names(dir)?;
    let stamp = jiff::Zoned::now().strftime(TIMESTAMP_FORMAT).to_string();
    let p = plan::plan(name, &siblings, size, policy.max_size, policy.max_files, &stamp);
    let (remove, compress, rename_to) = match p.action {
        Action::Keep => (Vec::new(), Vec::new(), None),
        Action::Defer { taken } => {
            debug!(size, taken = %taken, "rotation due, but this second's rotated file exists; next pass");
            (Vec::new(), Vec::new(), None)
        }
        Action::Rotate { remove, compress, rename_to } => (remove, compress, Some(rename_to)),
    };
    let unused = p.unused;
    if !unused.is_empty() || !remove.is_empty() {
        let base = dir.to_path_buf();
        tokio::task::spawn_blocking(move || tidy(&base, &unused, &remove, &[]))
            .await
            .map_err(|_| RotateError::Interrupted { path: path.clone() })??;
    }
    let Some(rename_to) = rename_to else { return Ok(()) };
    // Unlike the kubelet, the current file is rotated before the older one is compressed: it is
    // over its limit and still growing, so compressing first would let it grow for as long as
    // the compression takes.
    let rotated = dir.join(rename_to);
    fs::rename(&path, &rotated).map_err(io_err("rename the current log", &path))?;
    if let Err(source) = cri.reopen_container_log(id).await {
        // Put the file back so the next pass can try again; the runtime still writes to it.
        if let Err(e) = fs::rename(&rotated, &path) {
            error!(container = %id, path = %path.display(), rotated = %rotated.display(), error = %e,
                "cannot rename the rotated log back; the runtime writes to the rotated file until the next pass reopens the log");
        }
        return Err(RotateError::Reopen { path, rotated, source });
    }
    info!(size, rotated = %rotated.display(), "rotated container log");
    if !compress.is_empty() {
        let base = dir.to_path_buf();
        tokio::task::spawn_blocking(move || tidy(&base, &[], &[], &compress))
            .await
            .map_err(|_| RotateError::Interrupted { path: path.clone() })??;
    }
    Ok(())
}

/// File names in a container's log directory.
fn list_names(dir: &Path) -> Result<Vec<String>, RotateError> {
    let mut names = Vec::new();
    for entry in fs::read_dir(dir).map_err(io_err("list", dir))? {
        let entry = entry.map_err(io_err("list", dir))?;
        if let Ok(n) = entry.file_name().into_string() {
            names.push(n);
        }
    }
    Ok(names)
}

/// Removes leftovers and excess rotated files (oldest first), then compresses `compress`.
pub(super) fn tidy(
    dir: &Path,
    unused: &[String],
    remove: &[String],
    compress: &[String],
) -> Result<(), RotateError> {
    for name in unused.iter().chain(remove) {
        let path = dir.join(name);
        match fs::remove_file(&path) {
            Ok(()) => debug!(path = %path.display(), "removed old log file"),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_err("remove", &path)(e)),
        }
    }
    for name in compress {
        compress_log(&dir.join(name))?;
    }
    Ok(())
}

/// Compresses `path` to `path.gz` through `path.tmp` (so a half-written archive never carries
/// the `.gz` name), then removes `path`.
pub(super) fn compress_log(path: &Path) -> Result<(), RotateError> {
    let tmp = with_suffix(path, TMP_SUFFIX);
    let gz = with_suffix(path, COMPRESS_SUFFIX);
    let result = write_gzip(path, &tmp).and_then(|()| fs::rename(&tmp, &gz).map_err(io_err("rename", &tmp)));
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result?;
    fs::remove_file(path).map_err(io_err("remove the compressed", path))
}

fn write_gzip(src: &Path, tmp: &Path) -> Result<(), RotateError> {
    let mut input = File::open(src).map_err(io_err("open", src))?;
    let mode = input.metadata().map_err(io_err("stat", src))?.permissions().mode();
    let out = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode & 0o777)
        .open(tmp)
        .map_err(io_err("create", tmp))?;
    let mut encoder = GzEncoder::new(BufWriter::new(out), Compression::default());
    io::copy(&mut input, &mut encoder).map_err(io_err("compress", src))?;
    let writer = encoder.finish().map_err(io_err("write", tmp))?;
    writer.into_inner().map_err(|e| io_err("write", tmp)(e.into_error()))?;
    Ok(())
}

fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut s = path.as_os_str().to_os_string();
    s.push(suffix);
    PathBuf::from(s)
}
