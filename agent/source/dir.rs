//! One read of the manifest directory → a [`ManifestSet`]: which files are manifests, the
//! permission rules, keeping pods of files that went bad, and resolving conflicts.
//!
//! Rules (DESIGN "Manifests", R3.1): only `*.yaml`, `*.yml`, `*.json` directly in the directory,
//! in name order; dotfiles and editor or package-manager leftovers are not manifests (debug log,
//! no problem). A directory or file writable by group or others is refused (static pods run as
//! root): a refused directory keeps every previous pod, a refused file is treated as a bad file.
//! When a file has errors, the pods it gave before and no longer gives are kept unchanged, so a
//! bad edit never disturbs a running pod. A missing directory is an empty set. Entries with a
//! manifest's name that are not regular files (a directory, FIFO, device, a symlink leading out
//! of the directory) are reported as errors, never opened for reading. Reading one file is
//! `read`; parsing runs in `pool`, one thread per changed file, bounded in time.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tracing::debug;

use super::limits::PARSE_DEADLINE;
use super::pool::{Parsed, Parser};
use super::read::{self, Entry};
use super::{ManifestProblem, ManifestSet, ProblemKind};
use crate::model::{DesiredPod, PodKey};
use crate::sysctl::Allowlist;

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
///
/// Blocking: reads files and waits for their parses (each on its own thread, each bounded by
/// [`PARSE_DEADLINE`](super::limits::PARSE_DEADLINE)); call it from a blocking context.
pub fn load_dir(dir: &Path, node_name: &str, sysctls: &Allowlist, previous: &ManifestSet) -> ManifestSet {
    load_dir_with(&Parser::new(node_name, sysctls), dir, previous, PARSE_DEADLINE)
}

/// [`load_dir`] with a parser that remembers earlier parses, waiting at most `wait` for parses
/// still running (files still being parsed then count as broken; see `pool`).
pub(crate) fn load_dir_with(
    parser: &Parser,
    dir: &Path,
    previous: &ManifestSet,
    wait: Duration,
) -> ManifestSet {
    let refuse = |reason: String| ManifestSet {
        pods: previous.pods.clone(),
        problems: vec![ManifestProblem::file(ProblemKind::Error, dir, reason)],
        ..Default::default()
    };
    let meta = match fs::metadata(dir) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let problem =
                ManifestProblem::file(ProblemKind::Warning, dir, "manifest directory does not exist");
            return ManifestSet { pods: BTreeMap::new(), problems: vec![problem], ..Default::default() };
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

    let canonical_dir = read::canonical(dir);
    let outcomes = read_and_parse(parser, files.into_iter().map(|f| (f, canonical_dir.clone())), wait);
    assemble(outcomes, previous)
}

/// Checks the files a user names, each as [`load_dir`] checks a file of the directory that holds
/// it, whatever its name (it was named): entry type (symlinks must stay in that directory),
/// permissions, size, parse and validation. Conflicts among them are resolved as within one
/// directory. The directories themselves are not checked. For `crilet validate`.
///
/// Blocking, like [`load_dir`].
pub fn load_files(files: &[PathBuf], node_name: &str, sysctls: &Allowlist) -> ManifestSet {
    let entries = files.iter().map(|f| {
        let parent = f.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        (f.clone(), read::canonical(parent))
    });
    let outcomes = read_and_parse(&Parser::new(node_name, sysctls), entries, PARSE_DEADLINE);
    assemble(outcomes, &ManifestSet::default())
}

/// Reads every file first (cheap and bounded), then parses the texts in parallel: each file's
/// outcome. Each file comes with the canonical path of the directory it must stay in.
fn read_and_parse(
    parser: &Parser,
    files: impl IntoIterator<Item = (PathBuf, Option<PathBuf>)>,
    wait: Duration,
) -> BTreeMap<PathBuf, Parsed> {
    let mut outcomes: BTreeMap<PathBuf, Parsed> = BTreeMap::new();
    let mut texts = Vec::new();
    for (file, canonical_dir) in files {
        let refused =
            |reason: String| (Vec::new(), vec![ManifestProblem::file(ProblemKind::Error, &file, reason)]);
        match read::classify(&file, canonical_dir.as_deref()) {
            Entry::Gone => {}
            Entry::Refused(reason) => {
                outcomes.insert(file.clone(), refused(reason));
            }
            Entry::File(target) => match read::read_manifest(&file) {
                Ok(Some(text)) => texts.push((file, text)),
                Ok(None) => {}
                Err(reason) => {
                    let reason = match target {
                        Some(target) => format!("symlink to {}: {reason}", target.display()),
                        None => reason,
                    };
                    outcomes.insert(file.clone(), refused(reason));
                }
            },
        }
    }
    outcomes.extend(parser.parse_all(texts, wait));
    outcomes
}

/// The set from each file's outcome: pods of files with errors that `previous` had are kept,
/// then conflicts are resolved.
fn assemble(outcomes: BTreeMap<PathBuf, Parsed>, previous: &ManifestSet) -> ManifestSet {
    let mut candidates: Vec<DesiredPod> = Vec::new();
    let mut problems = Vec::new();
    for (file, (pods, file_problems)) in outcomes {
        if file_problems.iter().any(|p| p.kind == ProblemKind::Error) {
            let kept = previous.pods.values().filter(|p| {
                p.source.manifest() == Some(file.as_path()) && !pods.iter().any(|n| n.key == p.key)
            });
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
    ManifestSet { pods, problems, ..Default::default() }
}

/// The entries of `dir` with a manifest's name, sorted by name (whatever their type: `load_dir`
/// reports those that are not regular files). Skipped names are logged at debug level.
fn manifest_files(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        if let Err(why) = manifest_name(&name) {
            debug!(file = ?name, why, "not a manifest");
            continue;
        }
        files.push(entry.path());
    }
    files.sort();
    Ok(files)
}

/// Whether a directory entry's name is a manifest's, and if not, why.
pub fn manifest_name(name: &OsStr) -> Result<(), &'static str> {
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

/// Picks one document per pod key: the one from the file that sorts first by path, then the
/// lower document index. Every loser is a Conflict problem naming both places.
fn resolve_conflicts(
    mut candidates: Vec<DesiredPod>,
) -> (BTreeMap<PodKey, DesiredPod>, Vec<ManifestProblem>) {
    candidates.sort_by(|a, b| (a.source.manifest(), a.doc).cmp(&(b.source.manifest(), b.doc)));
    let mut pods: BTreeMap<_, DesiredPod> = BTreeMap::new();
    let mut problems = Vec::new();
    for pod in candidates {
        if let Some(winner) = pods.get(&pod.key) {
            let reason = format!(
                "pod {} is also defined in {} document {}, which takes precedence (first by file name); \
                 this document is not run",
                pod.key,
                winner.source_text(),
                winner.doc
            );
            problems.push(ManifestProblem::doc(
                ProblemKind::Conflict,
                pod.source.manifest().unwrap_or(Path::new("")),
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
