//! One read of the manifest directory → a [`ManifestSet`]: which files are manifests, the
//! permission rules, keeping pods of files that went bad, and resolving conflicts.
//!
//! Rules (DESIGN "Manifests", R3.1): only `*.yaml`, `*.yml`, `*.json` directly in the directory,
//! in name order; dotfiles and editor or package-manager leftovers are not manifests (debug log,
//! no problem). A directory or file writable by group or others is refused (static pods run as
//! root): a refused directory keeps every previous pod, a refused file is treated as a bad file.
//! When a file has errors, the pods it gave before and no longer gives are kept unchanged, so a
//! bad edit never disturbs a running pod. A missing directory is an empty set.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fs;
use std::io::Read;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use tracing::debug;

use super::{ManifestProblem, ManifestSet, ProblemKind, parse_manifest};
use crate::model::{DesiredPod, PodKey};

/// Largest manifest file read; anything bigger is surely not a pod.
const MAX_FILE_BYTES: u64 = 4 * 1024 * 1024;

/// Suffixes of editor swap/backup and package-manager files (checked case-insensitively).
const LEFTOVER_SUFFIXES: &[&str] = &[
    "~",
    ".swp",
    ".swo",
    ".swx",
    ".bak",
    ".orig",
    ".rej",
    ".tmp",
    ".temp",
    ".save",
    ".kate-swp",
    ".dpkg-old",
    ".dpkg-new",
    ".dpkg-dist",
    ".dpkg-tmp",
    ".dpkg-bak",
    ".ucf-old",
    ".ucf-new",
    ".ucf-dist",
    ".rpmnew",
    ".rpmsave",
    ".rpmorig",
];

/// Reads the directory once. `previous` is the last set: when a file has errors, pods that came
/// from that file in `previous` and are not among the file's new valid documents are kept
/// unchanged (a bad edit never disturbs a running pod). A refused or unreadable directory keeps
/// all of `previous.pods`.
pub fn load_dir(dir: &Path, node_name: &str, previous: &ManifestSet) -> ManifestSet {
    let refuse = |reason: String| ManifestSet {
        pods: previous.pods.clone(),
        problems: vec![ManifestProblem::file(ProblemKind::Error, dir, reason)],
    };
    let meta = match fs::metadata(dir) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let problem =
                ManifestProblem::file(ProblemKind::Warning, dir, "manifest directory does not exist");
            return ManifestSet { pods: BTreeMap::new(), problems: vec![problem] };
        }
        Err(e) => return refuse(format!("cannot read the manifest directory: {e}")),
    };
    if !meta.is_dir() {
        return refuse("the manifest path is not a directory".to_string());
    }
    let mode = meta.permissions().mode();
    if mode & 0o022 != 0 {
        return refuse(format!(
            "manifest directory is writable by group or others (mode {:04o}); refusing every manifest in it",
            mode & 0o7777
        ));
    }
    let files = match manifest_files(dir) {
        Ok(files) => files,
        Err(e) => return refuse(format!("cannot list the manifest directory: {e}")),
    };

    let mut candidates: Vec<DesiredPod> = Vec::new();
    let mut problems = Vec::new();
    for file in files {
        let (pods, file_problems) = load_file(&file, node_name);
        if file_problems.iter().any(|p| p.kind == ProblemKind::Error) {
            let kept =
                previous.pods.values().filter(|p| p.file == file && !pods.iter().any(|n| n.key == p.key));
            for pod in kept {
                debug!(file = %file.display(), pod = %pod.key, "file has errors; keeping the pod it gave before");
                candidates.push(pod.clone());
            }
        }
        candidates.extend(pods);
        problems.extend(file_problems);
    }
    let (pods, conflicts) = resolve_conflicts(candidates);
    problems.extend(conflicts);
    ManifestSet { pods, problems }
}

/// The manifest files in `dir`, sorted by name. Skipped entries are logged at debug level.
fn manifest_files(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        if let Err(why) = manifest_name(&name) {
            debug!(file = ?name, why, "not a manifest");
            continue;
        }
        let path = entry.path();
        match fs::metadata(&path) {
            Ok(meta) if meta.is_file() => files.push(path),
            Ok(_) => debug!(file = %path.display(), "not a regular file; not a manifest"),
            // A dangling symlink or a file removed meanwhile: nothing to run from it.
            Err(e) => debug!(file = %path.display(), error = %e, "cannot stat; skipped"),
        }
    }
    files.sort();
    Ok(files)
}

/// Whether a directory entry's name is a manifest's, and if not, why.
pub(super) fn manifest_name(name: &OsStr) -> Result<(), &'static str> {
    let Some(name) = name.to_str() else { return Err("file name is not UTF-8") };
    if name.starts_with('.') {
        return Err("hidden file");
    }
    let lower = name.to_ascii_lowercase();
    if name.starts_with('#') || name.ends_with('#') || name.starts_with('~') {
        return Err("editor lock or autosave file");
    }
    if LEFTOVER_SUFFIXES.iter().any(|s| lower.ends_with(s)) {
        return Err("editor swap/backup or package-manager file");
    }
    let ext = Path::new(&lower).extension().and_then(OsStr::to_str);
    if !matches!(ext, Some("yaml" | "yml" | "json")) {
        return Err("not a .yaml, .yml or .json file");
    }
    Ok(())
}

/// One file: permission and size checks, then [`parse_manifest`].
fn load_file(file: &Path, node_name: &str) -> (Vec<DesiredPod>, Vec<ManifestProblem>) {
    let error = |reason: String| (Vec::new(), vec![ManifestProblem::file(ProblemKind::Error, file, reason)]);
    let content = match read_manifest(file) {
        Ok(content) => content,
        Err(reason) => return error(reason),
    };
    parse_manifest(file, &content, node_name)
}

fn read_manifest(file: &Path) -> Result<String, String> {
    // Non-blocking, so a FIFO swapped in after the directory listing cannot hang the scan.
    let mut handle = fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::fcntl::OFlag::O_NONBLOCK.bits())
        .open(file)
        .map_err(|e| format!("cannot open: {e}"))?;
    // Checked on the opened file, so a swap between the check and the read cannot slip by.
    let meta = handle.metadata().map_err(|e| format!("cannot stat: {e}"))?;
    if !meta.is_file() {
        return Err("not a regular file".to_string());
    }
    let mode = meta.permissions().mode();
    if mode & 0o022 != 0 {
        return Err(format!("file is writable by group or others (mode {:04o}); refusing it", mode & 0o7777));
    }
    if meta.len() > MAX_FILE_BYTES {
        return Err(format!("file is larger than {MAX_FILE_BYTES} bytes; refusing it"));
    }
    let mut bytes = Vec::new();
    handle
        .by_ref()
        .take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read: {e}"))?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(format!("file is larger than {MAX_FILE_BYTES} bytes; refusing it"));
    }
    String::from_utf8(bytes).map_err(|e| format!("not UTF-8 text: {e}"))
}

/// Picks one document per pod key: the one from the file that sorts first by path, then the
/// lower document index. Every loser is a Conflict problem naming both places.
fn resolve_conflicts(
    mut candidates: Vec<DesiredPod>,
) -> (BTreeMap<PodKey, DesiredPod>, Vec<ManifestProblem>) {
    candidates.sort_by(|a, b| (&a.file, a.doc).cmp(&(&b.file, b.doc)));
    let mut pods: BTreeMap<_, DesiredPod> = BTreeMap::new();
    let mut problems = Vec::new();
    for pod in candidates {
        if let Some(winner) = pods.get(&pod.key) {
            let reason = format!(
                "pod {} is also defined in {} document {}, which takes precedence (first by file name); \
                 this document is not run",
                pod.key,
                winner.file.display(),
                winner.doc
            );
            problems.push(ManifestProblem::doc(
                ProblemKind::Conflict,
                &pod.file,
                pod.doc,
                Some("metadata.name".to_string()),
                reason,
            ));
            continue;
        }
        pods.insert(pod.key.clone(), pod);
    }
    (pods, problems)
}
