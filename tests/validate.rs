//! `crilet validate` (issue 10): the built binary, no agent and no containerd, on the examples,
//! on every entry of the hostile manifest corpus (each must give the problem `expected.txt`
//! records for it, with the agent's own words, and the right exit status), on a directory
//! mixing a good and a bad file, and on a manifest with warnings only.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use common::corpus::*;

mod common;

const EXAMPLES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples");
/// The generated entry that is rewritten while it is read: a property of a concurrent writer
/// (tests/hostile_input.rs), not one outcome.
const MID_READ: &str = "rewritten-mid-read.yaml";
/// Longest one `crilet validate` run may take (the corpus's worst files are refused in ms).
const DEADLINE: Duration = Duration::from_secs(60);

/// Runs `crilet validate ARGS`; (exit code, stdout, stderr). Killed and failed after
/// [`DEADLINE`], so a validator that blocks on a FIFO fails here instead of hanging.
fn validate(args: &[&Path]) -> (i32, String, String) {
    let child = Command::new(env!("CARGO_BIN_EXE_crilet"))
        .arg("validate")
        .args(["--node-name", "validate-node"])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn crilet validate");
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let out = match rx.recv_timeout(DEADLINE) {
        Ok(out) => out.expect("wait for crilet validate"),
        Err(_) => {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
            panic!("crilet validate {args:?} did not finish within {DEADLINE:?}");
        }
    };
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The exit status the agent's verdict gives: errors and conflicts fail, warnings do not.
fn want_code(kind: &str) -> i32 {
    if kind == "warning" { 0 } else { 1 }
}

/// Whether `stdout` has the problem line `KIND: PATH: …TEXT…`.
fn has_problem(stdout: &str, kind: &str, path: &Path, text: &str) -> bool {
    let prefix = format!("{kind}: {}: ", path.display());
    stdout.lines().any(|l| l.strip_prefix(&prefix).is_some_and(|rest| rest.contains(text)))
}

/// The pod names of the table `validate` prints.
fn listed_pods(stdout: &str) -> Vec<String> {
    let mut lines = stdout.lines().skip_while(|l| !l.starts_with("NAMESPACE"));
    lines.next();
    lines
        .take_while(|l| !l.starts_with("OK:") && !l.starts_with("FAIL:"))
        .filter_map(|l| l.split_whitespace().nth(1).map(str::to_string))
        .collect()
}

#[test]
fn the_examples_are_valid_and_listed() {
    let (code, out, err) = validate(&[Path::new(EXAMPLES)]);
    assert_eq!(code, 0, "exit status\nstdout:\n{out}\nstderr:\n{err}");
    assert!(!out.lines().any(|l| l.starts_with("error:") || l.starts_with("conflict:")), "{out}");
    let mut pods = listed_pods(&out);
    pods.sort();
    assert_eq!(pods, ["init-demo", "sidecar-demo", "web"], "{out}");
    assert!(
        out.contains("init:prepare,app") && out.contains("sidecar:log-shipper,app"),
        "containers:\n{out}"
    );
    assert!(out.contains(&format!("{EXAMPLES}/web.yaml (document 0)")), "sources:\n{out}");
    assert!(out.lines().last().is_some_and(|l| l.starts_with("OK: 3 pods would run")), "{out}");
}

#[test]
fn every_corpus_entry_in_a_directory_gives_the_agents_problem() {
    let mut failures = Vec::new();
    let entries: Vec<Expectation> = expectations().into_iter().filter(|e| e.file != MID_READ).collect();
    assert!(entries.len() >= 97, "only {} corpus entries", entries.len());
    for e in &entries {
        let (dir, outside) = (manifest_dir(), manifest_dir());
        create(e, dir.path(), outside.path());
        let (code, out, err) = validate(&[dir.path()]);
        let found = has_problem(&out, kind_name(e.kind), &dir.path().join(&e.file), &e.text);
        if !found || code != want_code(kind_name(e.kind)) {
            failures.push(format!(
                "{}: want {} {:?} and exit {}, got exit {code}:\n{out}{err}",
                e.file,
                e.kind,
                e.text,
                want_code(kind_name(e.kind))
            ));
        }
    }
    assert!(failures.is_empty(), "{} of {} entries:\n{}", failures.len(), entries.len(), failures.join("\n"));
}

#[test]
fn committed_corpus_files_named_on_the_command_line_give_the_same_problems() {
    let dir = manifest_dir();
    let entries: Vec<Expectation> = expectations().into_iter().filter(|e| !e.generated).collect();
    let mut paths: Vec<PathBuf> = Vec::new();
    for e in &entries {
        create(e, dir.path(), dir.path());
        paths.push(dir.path().join(&e.file));
    }
    let args: Vec<&Path> = paths.iter().map(PathBuf::as_path).collect();
    let (code, out, err) = validate(&args);
    assert_eq!(code, 1, "errors fail the run\n{err}");
    let missing: Vec<String> = entries
        .iter()
        .filter(|e| !has_problem(&out, kind_name(e.kind), &dir.path().join(&e.file), &e.text))
        .map(|e| format!("{}: {} {:?}", e.file, e.kind, e.text))
        .collect();
    assert!(missing.is_empty(), "not reported when named:\n{}\n--- output ---\n{out}", missing.join("\n"));
}

#[test]
fn a_bad_file_beside_a_good_one_fails_and_the_good_pod_is_listed() {
    let dir = manifest_dir();
    write(&dir.path().join("good.yaml"), pod("good").as_bytes(), 0o644);
    let bad = pod("bad").replace("name: app", "name: App_Container");
    write(&dir.path().join("bad.yaml"), bad.as_bytes(), 0o644);
    // Skipped by the directory rules, as the agent skips them.
    write(&dir.path().join(".hidden.yaml"), b"not: [a pod", 0o644);
    write(&dir.path().join("good.yaml.swp"), b"not: [a pod", 0o644);

    let (code, out, err) = validate(&[dir.path()]);
    assert_eq!(code, 1, "{out}{err}");
    assert_eq!(listed_pods(&out), ["good"], "{out}");
    let bad_path = dir.path().join("bad.yaml");
    assert!(has_problem(&out, "error", &bad_path, "document 0: spec.containers[0].name: "), "{out}");
    assert!(!out.contains(".hidden.yaml") && !out.contains("good.yaml.swp"), "skipped files:\n{out}");
    assert!(out.lines().last().is_some_and(|l| l.starts_with("FAIL: 1 pod would run; 1 error")), "{out}");

    // Named, a skipped file is checked anyway, and a note says the agent would skip it.
    let swp = dir.path().join("good.yaml.swp");
    let (code, out, _) = validate(&[&swp]);
    assert_eq!(code, 1, "{out}");
    assert!(has_problem(&out, "error", &swp, "document 0: invalid YAML"), "{out}");
    assert!(out.contains(&format!("note: {}: checked because it was named", swp.display())), "{out}");

    let (code, out, _) = validate(&[&dir.path().join("good.yaml")]);
    assert_eq!((code, listed_pods(&out)), (0, vec!["good".to_string()]), "{out}");
}

#[test]
fn warnings_alone_pass() {
    let dir = manifest_dir();
    let warned = pod("warned").replace("spec:\n", "spec:\n  nodeSelector: {disk: ssd}\n");
    let path = dir.path().join("warned.yaml");
    write(&path, warned.as_bytes(), 0o644);
    let (code, out, err) = validate(&[&path]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(has_problem(&out, "warning", &path, "document 0: spec.nodeSelector: "), "{out}");
    assert_eq!(listed_pods(&out), ["warned"], "{out}");

    // The same as JSON.
    let out = Command::new(env!("CARGO_BIN_EXE_crilet"))
        .args(["validate", "-o", "json", "--node-name", "validate-node"])
        .arg(&path)
        .output()
        .expect("run crilet validate -o json");
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON output");
    assert_eq!(v["failed"], false);
    assert_eq!(v["problems"][0]["kind"], "warning");
    assert_eq!(v["pods"][0]["name"], "warned");
    assert_eq!(v["pods"][0]["containers"], serde_json::json!(["app"]));
}

#[test]
fn a_missing_path_fails() {
    let dir = manifest_dir();
    let missing = dir.path().join("nothing.yaml");
    let (code, out, _) = validate(&[&missing]);
    assert_eq!(code, 1, "{out}");
    assert!(has_problem(&out, "error", &missing, "cannot read: No such file or directory"), "{out}");
}
