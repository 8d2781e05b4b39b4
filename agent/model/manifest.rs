//! What a pod source hands the pod engine: the desired pods of one moment and what was wrong
//! with the input (the manifest directory's files, or the API server's pods in cluster mode).

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use super::{DesiredPod, PodKey};

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
