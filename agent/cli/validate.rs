//! `crilet validate PATH…`: the problems `crilet run` would report for these manifests, and the
//! pods it would run, without a running agent (DESIGN "crilet validate").
//!
//! Nothing is re-implemented: a directory goes through [`source::load_dir`], the very scan the
//! agent runs on `--pod-manifest-path`, and named files through [`source::load_files`], the same
//! per-file checks. So every line is the agent's own problem line (`FILE: document N: FIELD:
//! REASON`), prefixed with its kind as the agent's log gives it.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use super::output::to_json;
use super::tabwriter::{self, TABLE};
use crate::model::DesiredPod;
use crate::podspec::is_sidecar;
use crate::source::{self, ManifestProblem, ManifestSet, ProblemKind};
use crate::sysctl::Allowlist;

/// `crilet validate PATH…`.
#[derive(clap::Args, Debug)]
#[command(after_help = "\
A directory is scanned exactly as `crilet run --pod-manifest-path DIR` scans it: only *.yaml, \
*.yml and *.json files directly in it, dotfiles and editor or package-manager leftovers skipped, \
a directory or file writable by group or others refused, symlinks leading out of it refused, and \
two documents naming the same pod reported as a conflict (the file that sorts first wins).

A file named on the command line is checked whatever its name (a note says when the agent would \
skip that name in a manifest directory), with the agent's other per-file rules: its type, its \
permissions (a file writable by group or others is refused, as the agent refuses it), a symlink \
must stay in the file's directory, at most 1 MiB. Conflicts are resolved among all named files \
together, and separately within each named directory. The directories holding named files are not \
checked.

Exit status: 0 when the agent would report no error (warnings allowed), 1 when it would report an \
error or a conflict, 2 on a usage error.")]
pub struct ValidateArgs {
    /// Manifest files or directories.
    #[arg(required = true, value_name = "PATH")]
    pub paths: Vec<PathBuf>,
    /// The node name the pods would get (it is part of each pod's UID) [default: the hostname,
    /// as `crilet run`]
    #[arg(long)]
    pub node_name: Option<String>,
    /// Sysctls allowed beyond the safe set, as `crilet run --allowed-unsafe-sysctls` [default:
    /// none]
    #[arg(long, value_delimiter = ',')]
    pub allowed_unsafe_sysctls: Vec<String>,
    /// Output format (default: problem lines, then a table of the pods).
    #[arg(short, long, value_enum)]
    pub output: Option<ValidateOutput>,
}

/// `-o` for `validate`.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValidateOutput {
    Json,
}

/// What `validate` found: one [`ManifestSet`] per named directory, one for all named files, and
/// notes that are not the agent's problems (a named file the agent would skip by its name).
#[derive(Debug, Default)]
pub(crate) struct Report {
    pub sets: Vec<ManifestSet>,
    pub notes: Vec<String>,
}

impl Report {
    fn problems(&self) -> impl Iterator<Item = &ManifestProblem> {
        self.sets.iter().flat_map(|s| s.problems.iter())
    }

    fn pods(&self) -> impl Iterator<Item = &DesiredPod> {
        self.sets.iter().flat_map(|s| s.pods.values())
    }

    /// Whether the agent would report an error or a conflict.
    pub fn failed(&self) -> bool {
        self.sets.iter().any(ManifestSet::has_errors)
    }
}

/// Runs `crilet validate`; returns the exit status.
pub fn run(args: &ValidateArgs) -> i32 {
    let node_name = match &args.node_name {
        Some(n) => n.clone(),
        None => match crate::node::default_node_name() {
            Ok(h) => h,
            Err(e) => {
                eprintln!("error: cannot read the hostname for --node-name: {e}");
                return 2;
            }
        },
    };
    let sysctls = match Allowlist::for_host(&args.allowed_unsafe_sysctls) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return 2;
        }
    };
    let report = check(&args.paths, &node_name, &sysctls);
    let text = match args.output {
        None => render_text(&report),
        Some(ValidateOutput::Json) => match to_json(&render_json(&report)) {
            Ok(text) => text,
            Err(e) => {
                eprintln!("error: cannot encode the report as JSON: {e}");
                return 2;
            }
        },
    };
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        eprintln!("error: cannot write to stdout: {e}");
        return 2;
    }
    if report.failed() { 1 } else { 0 }
}

/// Checks `paths` as the agent would (blocking: reads and parses files).
pub(crate) fn check(paths: &[PathBuf], node_name: &str, sysctls: &Allowlist) -> Report {
    let mut report = Report::default();
    let mut files = Vec::new();
    let mut missing = Vec::new();
    for path in paths {
        match std::fs::metadata(path) {
            Ok(meta) if meta.is_dir() => {
                report.sets.push(source::load_dir(path, node_name, sysctls, &ManifestSet::default()))
            }
            // Anything else (a file, FIFO, device, symlink) is checked as the agent checks an
            // entry of its directory; a dangling symlink is refused there with the agent's words.
            Ok(_) => files.push(path.clone()),
            Err(_) if std::fs::symlink_metadata(path).is_ok() => files.push(path.clone()),
            Err(e) => {
                missing.push(ManifestProblem::file(ProblemKind::Error, path, format!("cannot read: {e}")))
            }
        }
    }
    for file in &files {
        let Some(name) = file.file_name() else { continue };
        if let Err(why) = source::manifest_name(name) {
            report.notes.push(format!(
                "{}: checked because it was named, but the agent skips it in a manifest directory ({why})",
                file.display()
            ));
        }
    }
    if !files.is_empty() {
        report.sets.push(source::load_files(&files, node_name, sysctls));
    }
    if !missing.is_empty() {
        report.sets.push(ManifestSet { pods: BTreeMap::new(), problems: missing, ..Default::default() });
    }
    report
}

/// The containers of a pod as one cell: `init:NAME`, `sidecar:NAME`, then the app containers.
pub(crate) fn containers_cell(pod: &DesiredPod) -> String {
    let Some(spec) = pod.pod.spec.as_ref() else { return String::new() };
    let inits = spec.init_containers.iter().flatten().map(|c| {
        let kind = if is_sidecar(c) { "sidecar" } else { "init" };
        format!("{kind}:{}", c.name)
    });
    inits.chain(spec.containers.iter().map(|c| c.name.clone())).collect::<Vec<_>>().join(",")
}

fn source_cell(file: &Path, doc: usize) -> String {
    format!("{} (document {doc})", file.display())
}

fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// Problem lines (`KIND: FILE: document N: FIELD: REASON`, as the agent logs them), notes, the
/// pods table and a summary line.
pub(crate) fn render_text(report: &Report) -> String {
    let mut text = String::new();
    for p in report.problems() {
        text.push_str(&format!("{}: {p}\n", p.kind));
    }
    for note in &report.notes {
        text.push_str(&format!("note: {note}\n"));
    }
    let pods: Vec<&DesiredPod> = report.pods().collect();
    if !pods.is_empty() {
        if !text.is_empty() {
            text.push('\n');
        }
        let mut table = String::from("NAMESPACE\tNAME\tUID\tCONTAINERS\tSOURCE\n");
        for p in &pods {
            table.push_str(&format!(
                "{}\t{}\t{}\t{}\t{}\n",
                p.key.namespace,
                p.key.name,
                p.uid,
                containers_cell(p),
                source_cell(p.source.manifest().unwrap_or(std::path::Path::new("")), p.doc)
            ));
        }
        text.push_str(&tabwriter::align(&table, TABLE));
    }
    let count = |kind| report.problems().filter(|p| p.kind == kind).count();
    let verdict = if report.failed() { "FAIL" } else { "OK" };
    text.push_str(&format!(
        "{verdict}: {} would run; {}, {}, {}\n",
        plural(pods.len(), "pod", "pods"),
        plural(count(ProblemKind::Error), "error", "errors"),
        plural(count(ProblemKind::Warning), "warning", "warnings"),
        plural(count(ProblemKind::Conflict), "conflict", "conflicts"),
    ));
    text
}

/// The same as one JSON object: `problems`, `notes`, `pods` and `failed`.
pub(crate) fn render_json(report: &Report) -> Value {
    let problems: Vec<Value> = report
        .problems()
        .map(|p| {
            json!({
                "kind": p.kind.to_string(),
                "file": p.file.display().to_string(),
                "document": p.doc,
                "field": p.field,
                "reason": p.reason,
                "line": p.to_string(),
            })
        })
        .collect();
    let pods: Vec<Value> = report
        .pods()
        .map(|p| {
            let spec = p.pod.spec.as_ref();
            let names = |list: Option<&Vec<k8s_openapi::api::core::v1::Container>>| -> Vec<String> {
                list.into_iter().flatten().map(|c| c.name.clone()).collect()
            };
            json!({
                "namespace": p.key.namespace,
                "name": p.key.name,
                "uid": p.uid,
                "file": p.source_text(),
                "document": p.doc,
                "initContainers": names(spec.and_then(|s| s.init_containers.as_ref())),
                "containers": names(spec.map(|s| &s.containers)),
                "warnings": p.warnings,
            })
        })
        .collect();
    json!({"problems": problems, "notes": report.notes, "pods": pods, "failed": report.failed()})
}

#[cfg(test)]
#[path = "validate_tests.rs"]
mod tests;
