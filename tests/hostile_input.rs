//! Hostile input (issue 9): the manifest corpus in `tests/manifest_corpus/` through the real
//! loader, alone and all together with a good pod, and the worst of it dropped into a running
//! agent on the real containerd: the running pod is not disturbed, new pods still start, every
//! bad file is named in the log, memory stays bounded, and SIGTERM still stops the agent.

mod common;

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::corpus::*;
use common::*;
use crilet::source::{ManifestProblem, ManifestSet, load_dir};
use crilet::sysctl::Allowlist;

const NODE: &str = "hostile-node";
/// The generated entry that is rewritten while it is read (a property, not one outcome).
const MID_READ: &str = "@rewritten-mid-read.yaml";

/// The problem of `set` that meets `e`, if any.
fn find<'a>(set: &'a ManifestSet, dir: &Path, e: &Expectation) -> Option<&'a ManifestProblem> {
    let prefix = format!("{}: ", dir.join(&e.file).display());
    set.problems.iter().find(|p| {
        let line = p.to_string();
        p.kind == e.kind && line.starts_with(&prefix) && line[prefix.len()..].contains(&e.text)
    })
}

/// `load_dir` on a thread, with a deadline: a loader that blocks on a file fails here instead
/// of hanging the test.
fn load_within(dir: &Path, deadline: Duration) -> ManifestSet {
    let (tx, rx) = mpsc::channel();
    let dir = dir.to_path_buf();
    std::thread::spawn(move || {
        let _ = tx.send(load_dir(&dir, NODE, &Allowlist::default(), &ManifestSet::default()));
    });
    rx.recv_timeout(deadline).unwrap_or_else(|_| panic!("load_dir did not return within {deadline:?}"))
}

fn lines(set: &ManifestSet) -> String {
    set.problems.iter().map(|p| format!("  {} {p}\n", p.kind)).collect()
}

#[test]
fn the_corpus_has_at_least_fifty_entries_and_every_file_is_listed() {
    let listed: Vec<_> = expectations();
    assert!(listed.len() >= 50, "only {} corpus entries", listed.len());
    let committed: Vec<String> = fs::read_dir(CORPUS)
        .expect("corpus dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n != "expected.txt")
        .collect();
    for name in &committed {
        assert!(listed.iter().any(|e| !e.generated && &e.file == name), "{name} has no line in expected.txt");
    }
    for e in listed.iter().filter(|e| !e.generated) {
        assert!(committed.contains(&e.file), "expected.txt names {} which is not in the corpus", e.file);
    }
}

#[test]
fn every_corpus_entry_alone_gives_its_problem() {
    let mut failures = Vec::new();
    for e in expectations().iter().filter(|e| format!("@{}", e.file) != MID_READ) {
        let (dir, outside) = (manifest_dir(), manifest_dir());
        create(e, dir.path(), outside.path());
        let set = load_within(dir.path(), Duration::from_secs(60));
        if find(&set, dir.path(), e).is_none() {
            failures.push(format!("{}: want {} {:?}, got\n{}", e.file, e.kind, e.text, lines(&set)));
        }
    }
    assert!(
        failures.is_empty(),
        "{} entries did not give their problem:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn all_entries_together_hide_nothing_and_the_good_pod_loads() {
    let (dir, outside) = (manifest_dir(), manifest_dir());
    write(&dir.path().join("00-good.yaml"), pod("good").as_bytes(), 0o644);
    let all = expectations();
    for e in all.iter().filter(|e| format!("@{}", e.file) != MID_READ) {
        create(e, dir.path(), outside.path());
    }
    let set = load_within(dir.path(), Duration::from_secs(60));
    assert!(set.pods.keys().any(|k| k.name == "good"), "the good pod is loaded: {:?}", set.pods.keys());
    let missing: Vec<_> = all
        .iter()
        .filter(|e| format!("@{}", e.file) != MID_READ && find(&set, dir.path(), e).is_none())
        .map(|e| format!("{}: {} {:?}", e.file, e.kind, e.text))
        .collect();
    assert!(
        missing.is_empty(),
        "hidden when together:\n{}\nall problems:\n{}",
        missing.join("\n"),
        lines(&set)
    );
    // No bad file gave a pod: only the good one, the warning-only files, the first document of a
    // conflict and the valid documents before a bad one in the same file.
    let mut pods: Vec<_> = set.pods.keys().map(|k| k.name.as_str()).collect();
    pods.sort();
    assert_eq!(
        pods,
        [
            "anchor-first",
            "conflict-same-pod",
            "good",
            "sc-windows-options",
            "second-document-ok",
            "unknown-field",
            "unknown-top-level"
        ]
    );
}

/// A writer rewrites the file in place without pause while it is loaded again and again: each
/// load sees one whole version (or the file empty, between truncation and write), or reports
/// the expected problem; never a mix of two versions.
#[test]
fn a_file_rewritten_mid_read_is_never_read_torn() {
    let e =
        expectations().into_iter().find(|e| format!("@{}", e.file) == MID_READ).expect("the mid-read entry");
    let (dir, outside) = (manifest_dir(), manifest_dir());
    create(&e, dir.path(), outside.path());
    let path = dir.path().join(&e.file);
    let images = ["busybox:1.36", "registry.example/some/much/longer/image/name:2"];
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (path, stop) = (path.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut i = 0usize;
            while !stop.load(Ordering::Relaxed) {
                let text = pod("rewritten-mid-read").replace("busybox:1.36", images[i % 2]);
                if let Ok(mut f) = fs::OpenOptions::new().write(true).truncate(true).open(&path) {
                    let _ = f.write_all(text.as_bytes());
                }
                i += 1;
            }
        })
    };
    let mut outcomes: BTreeMap<&str, usize> = BTreeMap::new();
    for _ in 0..300 {
        let set = load_within(dir.path(), Duration::from_secs(60));
        let outcome = match set.pods.values().next() {
            Some(p) => {
                let image =
                    p.pod.spec.as_ref().and_then(|s| s.containers[0].image.clone()).unwrap_or_default();
                assert!(images.contains(&image.as_str()), "a torn read: image {image:?}");
                "whole"
            }
            None if set.problems.is_empty() => "empty",
            None => {
                assert!(find(&set, dir.path(), &e).is_some(), "want {:?}, got\n{}", e.text, lines(&set));
                "reported"
            }
        };
        *outcomes.entry(outcome).or_default() += 1;
    }
    stop.store(true, Ordering::Relaxed);
    writer.join().expect("writer");
    assert!(outcomes.get("whole").copied().unwrap_or(0) > 0, "never a whole version: {outcomes:?}");
    eprintln!("mid-read outcomes over 300 loads: {outcomes:?}");
}

// ---- end to end, against the real containerd ----

const GOOD: &str = r#"
apiVersion: v1
kind: Pod
metadata:
  name: NAME
  namespace: t-hostile
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: app
    image: ${CRILET_IMAGE_BUSYBOX}
    command: [sh, -c, 'trap "exit 0" TERM; while true; do sleep 1; done']
"#;

/// Peak and current resident memory of a process, in KiB (`VmHWM`, `VmRSS`).
fn memory_kib(pid: u32) -> (u64, u64) {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (field("VmHWM:"), field("VmRSS:"))
}

/// CPU seconds (user + system) the process has used.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> = stat.rsplit(')').next().unwrap_or("").split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / 100.0
}

/// Whether the process has exited (gone, or a zombie waiting to be reaped).
fn exited(pid: u32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/status")) {
        Err(_) => true,
        Ok(s) => s.lines().any(|l| l.starts_with("State:") && (l.contains('Z') || l.contains('X'))),
    }
}

fn full_log(a: &Agent) -> String {
    fs::read_to_string(&a.log_file).unwrap_or_default()
}

/// The agent's log names every file in `files` in a manifest error (after byte `from`).
async fn log_names_all(a: &Agent, files: &[&str], from: usize) {
    wait_for("the agent's log to name every bad file", Duration::from_secs(60), || async {
        let log = full_log(a);
        let log = log.get(from..).unwrap_or("");
        files
            .iter()
            .all(|f| log.lines().any(|l| l.contains("manifest error") && l.contains(&format!("/{f}:"))))
            .then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn hostile_files_never_disturb_a_running_pod() {
    const RSS_LIMIT_KIB: u64 = 200 * 1024;
    let mut a = Agent::start("hostile").await;
    a.write_manifest("good.yaml", &GOOD.replace("NAME", "good"));
    let before = running_pod(&a, "good").await;
    let id = container_id(&before, "app").expect("container id");
    let pid = a.pid().expect("agent pid");

    // The issue's files: 100 000 nested brackets, an alias bomb, 100 MB, and the bad files
    // that each give a clear error alone (NUL bytes, `..` in a subPath, activeDeadlineSeconds).
    let bad = [
        "nested-100000.yaml",
        "alias-bomb.yaml",
        "huge-100mb.yaml",
        "nul-byte.yaml",
        "subpath-dotdot.yaml",
        "deadline-i64-max.yaml",
        "deep-braces.yaml",
        "alias-wide.yaml",
    ];
    let all = expectations();
    let outside = manifest_dir();
    let cpu_before = cpu_seconds(pid);
    let dropped = Instant::now();
    for name in bad {
        let e =
            all.iter().find(|e| e.file == name).unwrap_or_else(|| panic!("{name} is not in expected.txt"));
        // Written under a hidden name and renamed, as an editor would, so the agent never sees
        // half a file.
        let hidden = a.manifests.join(format!(".{name}.tmp"));
        create_at(e, &hidden, &a.manifests, outside.path());
        fs::rename(&hidden, a.manifests.join(name)).expect("rename into place");
    }
    log_names_all(&a, &bad, 0).await;
    eprintln!("all bad files reported {:?} after they were dropped", dropped.elapsed());

    // The watcher is not blocked: a pod added now starts.
    a.write_manifest("second.yaml", &GOOD.replace("NAME", "second"));
    running_pod(&a, "second").await;

    // New versions of the bomb are parsed and reported each time (no growth from repeating it).
    for i in 1..=3 {
        let text = format!("{}{}{}", "\n".repeat(i), "[".repeat(100_000), "]".repeat(100_000));
        let hidden = a.manifests.join(".nested.tmp");
        fs::write(&hidden, text).expect("write");
        fs::set_permissions(&hidden, fs::Permissions::from_mode(0o644)).expect("chmod");
        fs::rename(&hidden, a.manifests.join("nested-100000.yaml")).expect("rename");
        let want =
            format!("nested-100000.yaml: document 0: nested more than 64 levels deep at line {}", i + 1);
        wait_for("the new version to be reported", Duration::from_secs(30), || async {
            full_log(&a).contains(&want).then_some(())
        })
        .await;
    }
    // A measurement window that spans one resync (every 20 s): every file is looked at again.
    tokio::time::sleep(Duration::from_secs(21)).await;
    // The running pod is the same container, the agent answers, its memory stayed bounded.
    let after = a.pod("good").expect("the agent answers");
    assert_eq!(
        container_id(&after, "app").as_deref(),
        Some(id.as_str()),
        "the good pod's container was replaced"
    );
    assert!(running(&after, "app"), "the good pod runs: {after:#}");
    let (peak, now) = memory_kib(pid);
    eprintln!(
        "agent: peak RSS {peak} KiB, RSS {now} KiB, {:.2} s of CPU over the {:.0} s since the files were dropped",
        cpu_seconds(pid) - cpu_before,
        dropped.elapsed().as_secs_f64()
    );
    assert!(peak > 0 && peak < RSS_LIMIT_KIB, "agent peak RSS {peak} KiB (limit {RSS_LIMIT_KIB} KiB)");

    // SIGTERM still stops it (observed as the process exiting, within a generous deadline).
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::Signal::SIGTERM)
        .expect("SIGTERM");
    wait_for("the agent to exit after SIGTERM", Duration::from_secs(20), || async {
        exited(pid).then_some(())
    })
    .await;
    a.stop(); // reaps it

    // Started again with the bad files present: the pod is adopted, not restarted, and every
    // bad file is reported again.
    let log_len = full_log(&a).len();
    a.spawn();
    log_names_all(&a, &bad, log_len).await;
    let again = running_pod(&a, "good").await;
    assert_eq!(
        container_id(&again, "app").as_deref(),
        Some(id.as_str()),
        "restarting the agent restarted the pod"
    );
    let new_pid = a.pid().expect("agent pid");
    let (peak, _) = memory_kib(new_pid);
    assert!(
        peak > 0 && peak < RSS_LIMIT_KIB,
        "restarted agent peak RSS {peak} KiB (limit {RSS_LIMIT_KIB} KiB)"
    );

    // Clean up: the pods go with their manifests.
    for name in bad {
        let _ = fs::remove_file(a.manifests.join(name));
    }
    a.remove_manifest("good.yaml");
    a.remove_manifest("second.yaml");
    wait_for("the pods to be gone", Duration::from_secs(60), || async {
        a.pods().filter(|p| p.is_empty()).map(drop)
    })
    .await;
}
