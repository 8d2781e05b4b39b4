//! The control socket file: created with mode 0600 *before* it appears at its path (bound in a
//! private 0700 directory, chmod-ed, then renamed into place), so no other user can ever connect;
//! a stale file from a crashed agent is replaced, a live agent's socket is not.

use std::fs::{self, DirBuilder};
use std::io;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use tokio::net::{UnixListener, UnixStream};
use tracing::warn;

use super::ApiError;

/// The socket file at its final path; removed on drop unless another agent has replaced it.
#[derive(Debug)]
pub(super) struct SocketFile {
    path: PathBuf,
    dev: u64,
    ino: u64,
}

impl Drop for SocketFile {
    fn drop(&mut self) {
        let ours = fs::symlink_metadata(&self.path).is_ok_and(|m| m.dev() == self.dev && m.ino() == self.ino);
        if ours {
            if let Err(e) = fs::remove_file(&self.path) {
                warn!(socket = %self.path.display(), error = %e, "cannot remove the control socket");
            }
        }
    }
}

/// Binds the control socket at `path`.
pub(super) async fn bind(path: &Path) -> Result<(UnixListener, SocketFile), ApiError> {
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(&parent)
        .map_err(|source| ApiError::SocketDir { path: parent.clone(), source })?;
    remove_stale(path).await?;

    let bind_err = |source| ApiError::Bind { path: path.to_path_buf(), source };
    // Short name: a socket path is limited to 107 bytes.
    let private = parent.join(format!(".crilet-{}", std::process::id()));
    let staged = private.join("s");
    let _ = fs::remove_dir_all(&private);
    DirBuilder::new().mode(0o700).create(&private).map_err(bind_err)?;
    let bound = (|| {
        let listener = UnixListener::bind(&staged)?;
        fs::set_permissions(&staged, fs::Permissions::from_mode(0o600))?;
        fs::rename(&staged, path)?;
        let meta = fs::symlink_metadata(path)?;
        Ok::<_, io::Error>((
            listener,
            SocketFile { path: path.to_path_buf(), dev: meta.dev(), ino: meta.ino() },
        ))
    })();
    let _ = fs::remove_dir_all(&private);
    bound.map_err(bind_err)
}

/// Removes a socket file nobody listens on; refuses to touch a live socket or a non-socket.
async fn remove_stale(path: &Path) -> Result<(), ApiError> {
    let meta = match fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(source) => return Err(ApiError::Bind { path: path.to_path_buf(), source }),
    };
    if !meta.file_type().is_socket() {
        return Err(ApiError::NotASocket { path: path.to_path_buf() });
    }
    if UnixStream::connect(path).await.is_ok() {
        return Err(ApiError::InUse { path: path.to_path_buf() });
    }
    fs::remove_file(path).map_err(|source| ApiError::Bind { path: path.to_path_buf(), source })
}
