//! The manifest source: watches `--pod-manifest-path`, parses each `*.yaml`/`*.yml`/`*.json` file
//! into Kubernetes `Pod`s (k8s-openapi), applies the API server's defaults, validates them as the
//! API server would for what crilet supports, gives each pod its UID, and publishes the whole set.
//!
//! It owns everything between the directory and a [`ManifestSet`]: which files are manifests,
//! the permission rules (a directory or file writable by group or others is refused), the
//! allow-list of supported fields (anything else is a warning or an error, never silent), the
//! UID scheme (stable across image-only edits and across crilet upgrades), conflict resolution
//! between documents that name the same pod, and keeping a running pod when its file goes bad.
//! What happens to pods when the set changes (start, in-place update, termination) belongs to
//! the pod workers.
//!
//! Hostile input is bounded (issue 9): [`limits`] holds every bound. `read` reads one file
//! (entry type, permissions, at most 1 MiB, UTF-8, changed while read), `scan` checks the text's
//! nesting and size before any parser sees it, `value` builds each document within a budget
//! (alias bombs), and `pool` parses each changed file on its own thread with a deadline and
//! remembers outcomes by content, so one bad file never delays or hides the others.
//!
//! Layout: `dir` reads the directory once ([`load_dir`]) or named files ([`load_files`], for
//! `crilet validate`), `parse` turns one file's text into
//! pods ([`parse_manifest`]), `allow` is the field allow-list, `defaults` and `validate` /
//! `validate_container` do what the API server does, `names` and `quantity` are the value
//! syntaxes, `uid` is [`pod_uid`], `watch` is [`watch_dir`].

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use crate::model::{DesiredPod, PodKey};

mod allow;
mod defaults;
mod dir;
pub mod limits;
mod names;
mod parse;
mod pool;
pub mod quantity;
mod read;
mod scan;
mod uid;
mod validate;
mod validate_container;
mod validate_stop_signal;
mod value;
mod watch;

#[cfg(test)]
mod tests;

pub use dir::{load_dir, load_files, manifest_name};
pub use parse::parse_manifest;
pub use uid::{UID_NAMESPACE, pod_uid};
pub use watch::{DEFAULT_RESYNC, watch_dir};

/// Everything valid in the manifest directory right now, plus what was wrong.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ManifestSet {
    /// The pods to run, by namespace/name (conflicts already resolved).
    pub pods: BTreeMap<PodKey, DesiredPod>,
    /// Errors, warnings and conflicts, in file order, then conflicts.
    pub problems: Vec<ManifestProblem>,
    /// Cluster mode: API pods being deleted (`deletionTimestamp` set), with the grace budget
    /// their deletion gives. They are not in `pods`.
    pub deleting: BTreeMap<PodKey, Deleting>,
    /// Cluster mode: the API server's pods for this node have been listed, so an API pod the
    /// runtime runs and `pods` lacks is gone and may be reaped.
    pub api_synced: bool,
}

/// An API pod being deleted.
#[derive(Debug, Clone, PartialEq)]
pub struct Deleting {
    pub uid: String,
    pub grace: std::time::Duration,
}

impl ManifestSet {
    /// True when any problem is an error or a conflict (warnings do not count).
    pub fn has_errors(&self) -> bool {
        self.problems.iter().any(|p| p.kind != ProblemKind::Warning)
    }
}

/// How bad a [`ManifestProblem`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ProblemKind {
    /// The document (or file, or directory) is refused; nothing in it is run.
    Error,
    /// The document is run, but something in it is ignored or not implemented.
    Warning,
    /// Two documents name the same pod; the one reported here is not run.
    Conflict,
}

impl fmt::Display for ProblemKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ProblemKind::Error => "error",
            ProblemKind::Warning => "warning",
            ProblemKind::Conflict => "conflict",
        })
    }
}

/// One thing wrong with the manifest directory, a file, or a document in it.
///
/// Displays as one line: `FILE: document N: FIELD: REASON` (document and field when known).
#[derive(Debug, Clone, PartialEq, Eq, Hash, thiserror::Error)]
#[error("{}", problem_line(.file, *.doc, .field.as_deref(), .reason))]
pub struct ManifestProblem {
    /// The manifest file, or the directory for directory-wide problems.
    pub file: PathBuf,
    /// 0-based index of the YAML document in the file (counting empty ones), when known.
    pub doc: Option<usize>,
    /// Field path such as `spec.containers[1].name`, when the problem is about one field.
    pub field: Option<String>,
    pub reason: String,
    pub kind: ProblemKind,
}

impl ManifestProblem {
    /// A problem about a whole file or directory.
    pub fn file(kind: ProblemKind, file: &Path, reason: impl Into<String>) -> Self {
        Self { file: file.to_path_buf(), doc: None, field: None, reason: reason.into(), kind }
    }

    /// A problem about one document, optionally one field in it.
    pub fn doc(kind: ProblemKind, file: &Path, doc: usize, field: Option<String>, reason: String) -> Self {
        Self { file: file.to_path_buf(), doc: Some(doc), field, reason, kind }
    }
}

fn problem_line(file: &Path, doc: Option<usize>, field: Option<&str>, reason: &str) -> String {
    let mut line = file.display().to_string();
    if let Some(doc) = doc {
        line.push_str(&format!(": document {doc}"));
    }
    if let Some(field) = field {
        line.push_str(&format!(": {field}"));
    }
    line.push_str(&format!(": {reason}"));
    line
}

/// What checking one document found, before it is tied to a file: errors refuse the document,
/// warnings do not.
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct Findings {
    pub errors: Vec<Finding>,
    pub warnings: Vec<Finding>,
}

/// One finding: the field path (empty for the whole document) and why.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Finding {
    pub field: String,
    pub reason: String,
}

impl Finding {
    /// `field: reason`, the form kept in [`DesiredPod::warnings`].
    pub fn line(&self) -> String {
        if self.field.is_empty() { self.reason.clone() } else { format!("{}: {}", self.field, self.reason) }
    }
}

impl Findings {
    pub fn error(&mut self, field: impl Into<String>, reason: impl Into<String>) {
        self.errors.push(Finding { field: field.into(), reason: reason.into() });
    }

    pub fn warn(&mut self, field: impl Into<String>, reason: impl Into<String>) {
        self.warnings.push(Finding { field: field.into(), reason: reason.into() });
    }
}
