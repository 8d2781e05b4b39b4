//! Reading one manifest file safely: what kind of directory entry it is (only regular files, and
//! symlinks to regular files in the same directory, are manifests), the permission rule, the
//! size bound, UTF-8, and a file changed while it was being read.
//!
//! Nothing here ever blocks on a FIFO or a device: the entry's type is checked before it is
//! opened, it is opened non-blocking, and the type is checked again on the opened file (a swap
//! between the two is caught). At most [`MAX_FILE_BYTES`] + 1 bytes are read from any file.

use std::fs;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::limits::MAX_FILE_BYTES;

/// How often a read is retried when the file changes under it before that is reported.
const READ_ATTEMPTS: usize = 3;

/// A directory entry with a manifest's name that is not a readable manifest, and why.
pub(super) type Refusal = String;

/// What a directory entry with a manifest's name is.
#[derive(Debug)]
pub(super) enum Entry {
    /// A regular file, or a symlink to one in the same directory (with its target): read it.
    File(Option<PathBuf>),
    /// Refused, with the reason (a directory, FIFO, device, or a symlink leading elsewhere).
    Refused(Refusal),
    /// Gone between listing and looking: nothing to report.
    Gone,
}

/// Classifies `path` (an entry of `dir`, whose canonical path is `canonical_dir`).
pub(super) fn classify(path: &Path, canonical_dir: Option<&Path>) -> Entry {
    let lmeta = match fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Entry::Gone,
        Err(e) => return Entry::Refused(format!("cannot stat: {e}")),
    };
    if !lmeta.file_type().is_symlink() {
        return match kind_of(&lmeta) {
            None => Entry::File(None),
            Some(kind) => Entry::Refused(format!("{kind}, not a regular file; refusing it")),
        };
    }
    let target = fs::read_link(path).map(|t| t.display().to_string()).unwrap_or_else(|_| "?".into());
    let resolved = match fs::canonicalize(path) {
        Ok(r) => r,
        Err(e) => return Entry::Refused(format!("symlink to {target}, which cannot be followed: {e}")),
    };
    if resolved.parent() != canonical_dir {
        return Entry::Refused(format!(
            "symlink to {}, which is outside the manifest directory; refusing it (static pods run \
             as root: only files in the directory itself are manifests)",
            resolved.display()
        ));
    }
    match fs::metadata(&resolved) {
        Ok(meta) => match kind_of(&meta) {
            None => Entry::File(Some(resolved)),
            Some(kind) => Entry::Refused(format!(
                "symlink to {}, {kind}, not a regular file; refusing it",
                resolved.display()
            )),
        },
        Err(e) => Entry::Refused(format!("symlink to {target}, which cannot be followed: {e}")),
    }
}

/// What a non-regular file is, for messages; `None` for a regular file.
fn kind_of(meta: &fs::Metadata) -> Option<&'static str> {
    let t = meta.file_type();
    if t.is_file() {
        return None;
    }
    Some(if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO (named pipe)"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_socket() {
        "a socket"
    } else {
        "a special file"
    })
}

/// The file's text: a regular file not writable by group or others, at most
/// [`MAX_FILE_BYTES`], valid UTF-8, and the same from the first byte read to the last.
/// `Ok(None)` when the file is gone (removed after the directory was listed).
pub(super) fn read_manifest(file: &Path) -> Result<Option<String>, Refusal> {
    let mut last_change = String::new();
    for _ in 0..READ_ATTEMPTS {
        match read_once(file)? {
            Some(Ok(bytes)) => return text(bytes).map(Some),
            Some(Err(change)) => last_change = change,
            None => return Ok(None),
        }
    }
    Err(format!(
        "the file kept changing while it was being read ({last_change}); it is read again at the \
         next change"
    ))
}

/// Identity and state of a file, compared before and after a read.
#[derive(PartialEq, Eq)]
struct Stamp {
    dev: u64,
    ino: u64,
    len: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Stamp {
    fn of(m: &fs::Metadata) -> Self {
        Self {
            dev: m.dev(),
            ino: m.ino(),
            len: m.len(),
            mtime: (m.mtime(), m.mtime_nsec()),
            ctime: (m.ctime(), m.ctime_nsec()),
        }
    }
}

/// One attempt: the bytes, what changed meanwhile (to retry), `None` if the file is gone, or
/// `Err` to refuse it.
fn read_once(file: &Path) -> Result<Option<Result<Vec<u8>, String>>, Refusal> {
    // Non-blocking, so a FIFO swapped in after the type check cannot hang the scan.
    let opened = fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::fcntl::OFlag::O_NONBLOCK.bits() | nix::fcntl::OFlag::O_NOCTTY.bits())
        .open(file);
    let mut handle = match opened {
        Ok(handle) => handle,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("cannot open: {e}")),
    };
    // Checked on the opened file, so a swap between the check and the read cannot slip by.
    let meta = handle.metadata().map_err(|e| format!("cannot stat: {e}"))?;
    if let Some(kind) = kind_of(&meta) {
        return Err(format!("{kind}, not a regular file; refusing it"));
    }
    let mode = meta.permissions().mode();
    if mode & 0o022 != 0 {
        return Err(format!("file is writable by group or others (mode {:04o}); refusing it", mode & 0o7777));
    }
    let too_big = || format!("file is larger than {MAX_FILE_BYTES} bytes (1 MiB); refusing it");
    if meta.len() > MAX_FILE_BYTES {
        return Err(too_big());
    }
    let before = Stamp::of(&meta);
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    handle
        .by_ref()
        .take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read: {e}"))?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(too_big());
    }
    // Timestamps are coarse (a clock tick), so an in-place rewrite of the same size within one
    // tick leaves them unchanged: read a second time and compare as well.
    let mut again = Vec::with_capacity(bytes.len());
    handle.seek(SeekFrom::Start(0)).map_err(|e| format!("cannot read: {e}"))?;
    handle
        .by_ref()
        .take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut again)
        .map_err(|e| format!("cannot read: {e}"))?;
    let after = handle.metadata().map_err(|e| format!("cannot stat: {e}"))?;
    if Stamp::of(&after) != before || bytes.len() as u64 != after.len() || again != bytes {
        return Ok(Some(Err("it was written to meanwhile".to_string())));
    }
    // Replaced (renamed over) meanwhile: what was read is the old file; read the new one.
    let now = fs::metadata(file).map(|m| (m.dev(), m.ino()));
    if now.ok() != Some((before.dev, before.ino)) {
        return Ok(Some(Err("it was replaced meanwhile".to_string())));
    }
    Ok(Some(Ok(bytes)))
}

/// The bytes as text, or where they stop being UTF-8.
fn text(bytes: Vec<u8>) -> Result<String, Refusal> {
    String::from_utf8(bytes).map_err(|e| {
        let at = e.utf8_error().valid_up_to();
        let valid = &e.as_bytes()[..at];
        let line = valid.iter().filter(|b| **b == b'\n').count() + 1;
        let line_start = valid.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
        let column = String::from_utf8_lossy(&valid[line_start..]).chars().count() + 1;
        format!(
            "not UTF-8 text: invalid byte 0x{:02x} at line {line} column {column} (byte {at})",
            e.as_bytes()[at]
        )
    })
}

/// The directory's canonical path, for telling where symlinks lead.
pub(super) fn canonical(dir: &Path) -> Option<PathBuf> {
    fs::canonicalize(dir).ok()
}
