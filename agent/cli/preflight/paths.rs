//! Preflight checks of what the agent keeps on the filesystem: the manifest directory (read
//! with the agent's own `source::load_dir`), the root and log directories, the control socket.

use std::fs;
use std::io;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};

use nix::unistd::{AccessFlags, access};

use super::{
    CONTAINER_LOGS_DIR, CONTROL_SOCKET, Check, Config, LOCAL_TIMEOUT, MANIFEST_DIR, MAX_SOCKET_PATH,
    POD_LOGS_DIR, ROOT_DIR, blocking, local,
};
use crate::source::{self, ManifestSet};
use crate::sysctl::Allowlist;

/// The directory and socket checks, in report order.
pub(super) async fn checks(cfg: &Config) -> Vec<Check> {
    let mut checks = Vec::new();
    let dir = cfg.manifest_dir.clone();
    let (node, sysctls) = (cfg.node_name.clone(), cfg.sysctls.clone());
    checks.push(
        local(MANIFEST_DIR, move || manifest_dir_check(&dir, &probe_manifest_dir(&dir, &node, &sysctls)))
            .await,
    );
    let mut dirs = vec![(ROOT_DIR, cfg.root_dir.clone()), (POD_LOGS_DIR, cfg.pod_logs_dir.clone())];
    if let Some(d) = &cfg.container_logs_dir {
        dirs.push((CONTAINER_LOGS_DIR, d.clone()));
    }
    for (name, dir) in dirs {
        checks.push(local(name, move || writable_dir_check(name, &dir, &probe_dir(&dir))).await);
    }
    let probe = probe_control_socket(&cfg.control_socket).await;
    checks.push(control_socket_check(&cfg.control_socket, &probe));
    checks
}

/// The manifest directory as the agent would read it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum ManifestDirProbe {
    Missing,
    Read { mode: u32, set: ManifestSet },
}

pub(super) fn probe_manifest_dir(dir: &Path, node_name: &str, sysctls: &Allowlist) -> ManifestDirProbe {
    let mode = match fs::metadata(dir) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return ManifestDirProbe::Missing,
        // Other errors (not a directory, permissions) are load_dir's to report, as the agent does.
        meta => meta.map(|m| m.permissions().mode() & 0o7777).unwrap_or(0),
    };
    ManifestDirProbe::Read { mode, set: source::load_dir(dir, node_name, sysctls, &ManifestSet::default()) }
}

/// `manifest-dir`: a problem `load_dir` reports about the directory itself means the agent
/// runs nothing from it (FAIL); problems in single manifests only affect those pods (WARN).
pub(crate) fn manifest_dir_check(dir: &Path, probe: &ManifestDirProbe) -> Check {
    let (mode, set) = match probe {
        ManifestDirProbe::Missing => {
            return Check::fail(
                MANIFEST_DIR,
                format!("{} does not exist; create it (mode 0755) or set --pod-manifest-path", dir.display()),
            );
        }
        ManifestDirProbe::Read { mode, set } => (mode, set),
    };
    if let Some(p) = set.problems.iter().find(|p| p.file == dir && p.doc.is_none()) {
        return Check::fail(MANIFEST_DIR, p.to_string());
    }
    let pods = match set.pods.len() {
        1 => "1 pod".to_string(),
        n => format!("{n} pods"),
    };
    let bad: Vec<_> = set.problems.iter().filter(|p| p.kind != source::ProblemKind::Warning).collect();
    match bad.first() {
        Some(first) => Check::warn(
            MANIFEST_DIR,
            format!(
                "{} (mode {mode:04o}, {pods}); {} manifest problem(s), first: {first}",
                dir.display(),
                bad.len()
            ),
        ),
        None => Check::pass(MANIFEST_DIR, format!("{} (mode {mode:04o}, {pods})", dir.display())),
    }
}

/// Whether a directory the agent writes to is usable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum DirProbe {
    Writable,
    NotWritable(String),
    NotADir,
    /// Missing; `creatable` when its nearest existing ancestor is a writable directory.
    Missing {
        ancestor: PathBuf,
        creatable: bool,
    },
    Unreadable(String),
}

pub(super) fn probe_dir(path: &Path) -> DirProbe {
    match fs::metadata(path) {
        Ok(m) if !m.is_dir() => DirProbe::NotADir,
        Ok(_) => match access(path, AccessFlags::W_OK | AccessFlags::X_OK) {
            Ok(()) => DirProbe::Writable,
            Err(e) => DirProbe::NotWritable(e.desc().to_string()),
        },
        // ENOTDIR: a file where a parent directory should be; the ancestor search finds it.
        Err(e) if matches!(e.kind(), io::ErrorKind::NotFound | io::ErrorKind::NotADirectory) => {
            let ancestor = path
                .ancestors()
                .skip(1)
                .map(|a| if a.as_os_str().is_empty() { Path::new(".") } else { a })
                .find(|a| fs::symlink_metadata(a).is_ok())
                .unwrap_or(Path::new("/"))
                .to_path_buf();
            let creatable =
                ancestor.is_dir() && access(&ancestor, AccessFlags::W_OK | AccessFlags::X_OK).is_ok();
            DirProbe::Missing { ancestor, creatable }
        }
        Err(e) => DirProbe::Unreadable(e.to_string()),
    }
}

/// `root-dir`, `pod-logs-dir`, `container-logs-dir`: the agent creates them at start.
pub(crate) fn writable_dir_check(name: &'static str, path: &Path, probe: &DirProbe) -> Check {
    let p = path.display();
    match probe {
        DirProbe::Writable => Check::pass(name, format!("{p} (writable)")),
        DirProbe::NotWritable(why) => Check::fail(name, format!("{p} is not writable: {why}")),
        DirProbe::NotADir => Check::fail(name, format!("{p} exists and is not a directory")),
        DirProbe::Missing { ancestor, creatable: true } => {
            Check::warn(name, format!("{p} does not exist; will be created (in {})", ancestor.display()))
        }
        DirProbe::Missing { ancestor, creatable: false } => Check::fail(
            name,
            format!(
                "{p} does not exist and cannot be created: {} is not a writable directory",
                ancestor.display()
            ),
        ),
        DirProbe::Unreadable(why) => Check::fail(name, format!("cannot check {p}: {why}")),
    }
}

/// What is at the control socket's path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SocketProbe {
    TooLong(usize),
    /// Nothing there yet; the probe of the directory it goes in.
    Free(DirProbe),
    /// A socket something answers on (or does not refuse within the timeout).
    Live {
        mode: u32,
    },
    /// A socket file nobody listens on (an agent that crashed).
    Stale {
        mode: u32,
    },
    NotASocket,
    Unreadable(String),
}

pub(super) async fn probe_control_socket(path: &Path) -> SocketProbe {
    let len = path.as_os_str().len();
    if len > MAX_SOCKET_PATH {
        return SocketProbe::TooLong(len);
    }
    let meta = match fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            let dir = match path.parent() {
                Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
                _ => PathBuf::from("."),
            };
            return blocking("checking the socket directory", move || probe_dir(&dir))
                .await
                .map_or_else(SocketProbe::Unreadable, SocketProbe::Free);
        }
        Err(e) => return SocketProbe::Unreadable(e.to_string()),
    };
    if !meta.file_type().is_socket() {
        return SocketProbe::NotASocket;
    }
    let mode = meta.permissions().mode() & 0o7777;
    match tokio::time::timeout(LOCAL_TIMEOUT, tokio::net::UnixStream::connect(path)).await {
        Ok(Err(e)) if e.kind() == io::ErrorKind::ConnectionRefused => SocketProbe::Stale { mode },
        Ok(Err(e)) => SocketProbe::Unreadable(format!("cannot connect: {e}")),
        Ok(Ok(_)) | Err(_) => SocketProbe::Live { mode },
    }
}

/// `control-socket`: the agent binds it with mode 0600, replaces a stale one, and refuses to
/// start when something answers on it or the path holds something else.
pub(crate) fn control_socket_check(path: &Path, probe: &SocketProbe) -> Check {
    let p = path.display();
    let loose = |mode: u32| mode & 0o077 != 0;
    match probe {
        SocketProbe::TooLong(len) => Check::fail(
            CONTROL_SOCKET,
            format!("{p} is {len} bytes long; a Unix socket path holds at most {MAX_SOCKET_PATH}"),
        ),
        SocketProbe::Free(DirProbe::Writable) => Check::pass(CONTROL_SOCKET, format!("{p} (free)")),
        // The directory is usually under /run, so missing after every boot: not worth a WARN.
        SocketProbe::Free(DirProbe::Missing { creatable: true, .. }) => {
            Check::pass(CONTROL_SOCKET, format!("{p} (free; its directory will be created)"))
        }
        SocketProbe::Free(dir) => {
            let why = writable_dir_check(CONTROL_SOCKET, path.parent().unwrap_or(Path::new(".")), dir).detail;
            Check::fail(CONTROL_SOCKET, format!("cannot create {p}: {why}"))
        }
        SocketProbe::Live { mode } => {
            let perms = if loose(*mode) {
                format!(" (and its mode {mode:04o} lets group/others connect)")
            } else {
                String::new()
            };
            Check::fail(
                CONTROL_SOCKET,
                format!("an agent already listens on {p}: stop it or choose another --control-socket{perms}"),
            )
        }
        SocketProbe::Stale { mode } if loose(*mode) => Check::warn(
            CONTROL_SOCKET,
            format!(
                "stale socket {p} has mode {mode:04o} (group/others can connect); the agent replaces it with a 0600 one"
            ),
        ),
        SocketProbe::Stale { .. } => {
            Check::pass(CONTROL_SOCKET, format!("{p} (stale socket of an earlier agent; will be replaced)"))
        }
        SocketProbe::NotASocket => Check::fail(
            CONTROL_SOCKET,
            format!("{p} exists and is not a socket; the agent will not replace it"),
        ),
        SocketProbe::Unreadable(why) => Check::fail(CONTROL_SOCKET, format!("cannot check {p}: {why}")),
    }
}
