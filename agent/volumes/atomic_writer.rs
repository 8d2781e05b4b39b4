//! The kubelet's atomic writer (`pkg/volume/util/atomic_writer.go`): projects a set of files into
//! a volume directory so that a reader never sees a mix of two versions.
//!
//! Layout of a written volume:
//! ```text
//! <dir>/..2026_12_01_21_40_00.1234567   the files of one version (mode 0755 directory)
//! <dir>/..data -> ..2026_12_01_21_40_00.1234567
//! <dir>/key    -> ..data/key            one link per first path component
//! <dir>/sub    -> ..data/sub            (so `sub/file` is reached through `..data` too)
//! ```
//! A new version goes into a new timestamped directory; one `rename` of a `..data_tmp` link over
//! `..data` switches every file at once. Names starting with `..` are the writer's own.
//! The writer is not synchronized: callers serialize writes to one directory.

use std::collections::{BTreeMap, BTreeSet};
use std::io::ErrorKind;
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};

/// The link to the current version.
pub const DATA_DIR: &str = "..data";
/// The link that is renamed over `..data`.
const NEW_DATA_DIR: &str = "..data_tmp";
const MAX_FILE_NAME: usize = 255;
const MAX_PATH: usize = 4096;

/// The contents and mode of one projected file.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct FileProjection {
    pub data: Vec<u8>,
    pub mode: u32,
}

impl std::fmt::Debug for FileProjection {
    // The data may be a Secret's: never printed.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "FileProjection {{ {} bytes, mode {:o} }}", self.data.len(), self.mode)
    }
}

/// A volume's files: relative path → contents and mode.
pub type Payload = BTreeMap<String, FileProjection>;

/// Why a payload could not be written.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error("invalid path {path:?}: {reason}")]
    InvalidPath { path: String, reason: &'static str },
    #[error("{op} {}", path.display())]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

fn io<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> WriteError + 'a {
    move |source| WriteError::Io { op, path: path.to_path_buf(), source }
}

/// Checks one payload path as upstream's `validatePath` does and returns it cleaned
/// (`a//b/./c` → `a/b/c`): not empty, relative, no `..` element, not starting with `..`, each
/// name at most 255 bytes and the whole at most 4096.
pub fn validate_path(path: &str) -> Result<String, WriteError> {
    let bad = |reason| WriteError::InvalidPath { path: path.to_string(), reason };
    if path.is_empty() {
        return Err(bad("must not be empty"));
    }
    if path.starts_with('/') {
        return Err(bad("must be relative path"));
    }
    if path.len() > MAX_PATH {
        return Err(bad("must be less than or equal to 4096 characters"));
    }
    let items: Vec<&str> = path.split('/').collect();
    if items.contains(&"..") {
        return Err(bad("must not contain '..'"));
    }
    if items.iter().any(|i| i.len() > MAX_FILE_NAME) {
        return Err(bad("filenames must be less than or equal to 255 characters"));
    }
    if items[0].starts_with("..") {
        return Err(bad("must not start with '..'"));
    }
    let clean: Vec<&str> = items.into_iter().filter(|i| !i.is_empty() && *i != ".").collect();
    if clean.is_empty() {
        return Err(bad("must name a file"));
    }
    Ok(clean.join("/"))
}

fn validate_payload(payload: &Payload) -> Result<Payload, WriteError> {
    payload.iter().map(|(path, file)| Ok((validate_path(path)?, file.clone()))).collect()
}

/// Writes `payload` into `dir` (which must exist) as the volume's new version. Returns whether a
/// new version was written: `false` when the files on disk already are the payload. Blocks on
/// the disk: async callers run it on the blocking pool (`VolumeManager`'s passes do).
pub fn write(dir: &Path, payload: &Payload) -> Result<bool, WriteError> {
    let payload = validate_payload(payload)?;
    let data_link = dir.join(DATA_DIR);
    let old = match std::fs::read_link(&data_link) {
        Ok(target) => Some(target),
        Err(e) if e.kind() == ErrorKind::NotFound => None,
        Err(e) => return Err(io("reading link", &data_link)(e)),
    };
    // A `..data` that leads out of the volume is not the writer's: never walked or removed.
    let old = old.filter(|t| {
        let mut c = t.components();
        matches!((c.next(), c.next()), (Some(Component::Normal(n)), None) if n.to_string_lossy().starts_with(".."))
    });
    let old_dir = old.as_ref().map(|t| dir.join(t));

    let mut stale = BTreeSet::new();
    let mut changed = true;
    if let Some(old_dir) = &old_dir {
        stale = paths_to_remove(&payload, old_dir)?;
        changed = differs(&payload, old_dir)?;
    }
    if changed || !stale.is_empty() {
        let new_dir = new_timestamp_dir(dir)?;
        let written = write_files(&payload, &new_dir).and_then(|()| swap_data_link(dir, &new_dir));
        if let Err(e) = written {
            let _ = std::fs::remove_dir_all(&new_dir);
            return Err(e);
        }
    }
    // The visible links are made even when nothing changed: an earlier write may have been
    // interrupted after the swap (kubernetes#121472).
    create_visible_links(dir, &payload)?;
    if !changed && stale.is_empty() {
        return Ok(false);
    }
    remove_visible(dir, &stale)?;
    if let Some(old_dir) = &old_dir {
        std::fs::remove_dir_all(old_dir).or_else(not_found_ok).map_err(io("removing", old_dir))?;
    }
    remove_orphan_versions(dir);
    Ok(true)
}

fn not_found_ok(e: std::io::Error) -> std::io::Result<()> {
    if e.kind() == ErrorKind::NotFound { Ok(()) } else { Err(e) }
}

/// Whether any file of the payload is missing from `old_dir` or has other contents or mode.
fn differs(payload: &Payload, old_dir: &Path) -> Result<bool, WriteError> {
    for (path, file) in payload {
        let full = old_dir.join(path);
        let meta = match std::fs::symlink_metadata(&full) {
            Ok(m) => m,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(true),
            Err(e) => return Err(io("inspecting", &full)(e)),
        };
        if !meta.is_file() || meta.permissions().mode() & 0o7777 != file.mode & 0o7777 {
            return Ok(true);
        }
        if std::fs::read(&full).map_err(io("reading", &full))? != file.data {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Paths of the old version that the payload no longer has (directories that still hold a
/// payload file excepted).
fn paths_to_remove(payload: &Payload, old_dir: &Path) -> Result<BTreeSet<String>, WriteError> {
    let mut present = BTreeSet::new();
    walk(old_dir, "", &mut present)?;
    let mut wanted = BTreeSet::new();
    for path in payload.keys() {
        let mut p = path.as_str();
        loop {
            wanted.insert(p.to_string());
            match p.rfind('/') {
                Some(i) => p = &p[..i],
                None => break,
            }
        }
    }
    Ok(present.difference(&wanted).cloned().collect())
}

fn walk(dir: &Path, prefix: &str, out: &mut BTreeSet<String>) -> Result<(), WriteError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io("listing", dir)(e)),
    };
    for entry in entries {
        let entry = entry.map_err(io("listing", dir))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let rel = if prefix.is_empty() { name } else { format!("{prefix}/{name}") };
        let is_dir = entry.file_type().map_err(io("inspecting", &entry.path()))?.is_dir();
        out.insert(rel.clone());
        if is_dir {
            walk(&entry.path(), &rel, out)?;
        }
    }
    Ok(())
}

/// `..<UTC time>.<random>`, mode 0755 whatever the umask (group and others must traverse it).
fn new_timestamp_dir(dir: &Path) -> Result<PathBuf, WriteError> {
    let stamp = jiff::Timestamp::now().strftime("%Y_%m_%d_%H_%M_%S").to_string();
    loop {
        let path = dir.join(format!("..{stamp}.{}", fastrand::u32(..)));
        match std::fs::create_dir(&path) {
            Ok(()) => {
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
                    .map_err(io("setting the mode of", &path))?;
                return Ok(path);
            }
            Err(e) if e.kind() == ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(io("creating", &path)(e)),
        }
    }
}

fn write_files(payload: &Payload, dir: &Path) -> Result<(), WriteError> {
    for (path, file) in payload {
        let full = dir.join(path);
        if let Some(parent) = full.parent() {
            std::fs::create_dir_all(parent).map_err(io("creating", parent))?;
        }
        std::fs::write(&full, &file.data).map_err(io("writing", &full))?;
        // Set explicitly: the mode given at creation is cut by the umask.
        std::fs::set_permissions(&full, std::fs::Permissions::from_mode(file.mode & 0o7777))
            .map_err(io("setting the mode of", &full))?;
    }
    Ok(())
}

/// `..data_tmp` → the new version, renamed over `..data`: the one atomic step.
fn swap_data_link(dir: &Path, new_dir: &Path) -> Result<(), WriteError> {
    let Some(name) = new_dir.file_name() else {
        return Err(WriteError::InvalidPath { path: new_dir.display().to_string(), reason: "no file name" });
    };
    let tmp = dir.join(NEW_DATA_DIR);
    // A link left by a write that died between its creation and the rename.
    std::fs::remove_file(&tmp).or_else(not_found_ok).map_err(io("removing", &tmp))?;
    std::os::unix::fs::symlink(name, &tmp).map_err(io("creating link", &tmp))?;
    let data = dir.join(DATA_DIR);
    if let Err(e) = std::fs::rename(&tmp, &data) {
        let _ = std::fs::remove_file(&tmp);
        return Err(io("renaming link to", &data)(e));
    }
    Ok(())
}

/// `<dir>/<first component>` → `..data/<first component>` for every payload path, where missing.
fn create_visible_links(dir: &Path, payload: &Payload) -> Result<(), WriteError> {
    let firsts: BTreeSet<&str> = payload.keys().map(|p| p.split('/').next().unwrap_or(p)).collect();
    for first in firsts {
        let link = dir.join(first);
        match std::fs::symlink_metadata(&link) {
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::NotFound => {
                std::os::unix::fs::symlink(Path::new(DATA_DIR).join(first), &link)
                    .map_err(io("creating link", &link))?;
            }
            Err(e) => return Err(io("inspecting", &link)(e)),
        }
    }
    Ok(())
}

/// Removes the visible links of top-level paths the payload no longer has (deeper paths went
/// with the old version).
fn remove_visible(dir: &Path, stale: &BTreeSet<String>) -> Result<(), WriteError> {
    let mut last = Ok(());
    for p in stale.iter().filter(|p| !p.contains('/')) {
        let path = dir.join(p);
        if let Err(e) = std::fs::remove_file(&path).or_else(not_found_ok) {
            tracing::warn!(path = %path.display(), error = %e, "cannot remove a stale volume entry");
            last = Err(io("removing", &path)(e));
        }
    }
    last
}

/// Version directories other than the current one: left by a writer that died mid-write.
fn remove_orphan_versions(dir: &Path) {
    let current = std::fs::read_link(dir.join(DATA_DIR)).ok();
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let b = name.as_bytes();
        let is_version = b.len() > 6 && b.starts_with(b"..") && b[2..6].iter().all(u8::is_ascii_digit);
        if is_version && current.as_deref() != Some(Path::new(&*name)) {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

#[cfg(test)]
mod tests;
