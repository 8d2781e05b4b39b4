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
//! `validate_container` do what the API server does, `names` is a value syntax (quantities are
//! `crate::quantity`), `watch` is [`watch_dir`]. The UID scheme ([`pod_uid`]) and the set handed
//! to the pod engine ([`ManifestSet`]) are vocabulary, in `crate::model`.

mod allow;
mod defaults;
mod dir;
pub mod limits;
mod names;
mod parse;
mod pool;
mod read;
mod scan;
mod validate;
mod validate_apparmor;
mod validate_container;
mod validate_seccomp;
mod validate_stop_signal;
mod value;
mod watch;

#[cfg(test)]
mod tests;

pub use crate::model::manifest::{Deleting, ManifestProblem, ManifestSet, ProblemKind};
pub use crate::model::uid::{UID_NAMESPACE, pod_uid};
pub use dir::{load_dir, load_files, manifest_name};
pub use parse::parse_manifest;
pub use watch::{DEFAULT_RESYNC, watch_dir};

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
