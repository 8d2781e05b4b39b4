//! Container log rotation against the real containerd: a container that writes ~50 MiB of
//! numbered lines fast is rotated (renamed, gzip-compressed, trimmed to max-files) with its
//! log directory's size bounded all along, containerd keeps writing at the original path after
//! each `ReopenContainerLog`, no record is torn or lost, `crilet logs -f` follows across the
//! rotations without a gap, and a container that logs little is never rotated.

mod common;

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;

const MAX_SIZE: u64 = 1 << 20;
const MAX_FILES: u64 = 3;
const INTERVAL: Duration = Duration::from_millis(500);
/// Lines the writer prints: `line NNNNNNN ` plus padding, 128 bytes of payload each (51 MB),
/// numbered from FIRST + 1 (so every number has 7 digits), in 200 bursts of 2000 lines 0.1 s
/// apart: about 3 MB/s, fast enough to need a rotation every pass, slow enough that the
/// directory's bound (which grows with the write rate) is well below what is written.
const LINES: u64 = 400_000;
const FIRST: u64 = 1_000_000;
const PAYLOAD: usize = 128;
/// A CRI record's bytes besides its payload: an RFC 3339 nano time (at most 35 bytes with a
/// zone offset), ` stdout F ` and the newline.
const RECORD_OVERHEAD: u64 = 35 + 10 + 1;
/// The longest a log can stay over the limit before it is rotated: until the next pass (one
/// interval), plus one second when this second's rotated name is taken (rotations are at most
/// one per second, as the timestamp has seconds), plus a second for the pass itself and for
/// scheduling on a loaded 2-core machine.
const OVERSHOOT_WINDOW: Duration = Duration::from_millis(500 + 1000 + 1000);

fn manifest() -> String {
    let pad = "x".repeat(PAYLOAD - "line 0000000 ".len());
    format!(
        r#"
apiVersion: v1
kind: Pod
metadata: {{name: rot, namespace: t-logrot}}
spec:
  terminationGracePeriodSeconds: 1
  volumes:
  - name: out
    hostPath: {{path: OUT}}
  containers:
  - name: writer
    image: ${{CRILET_IMAGE_BUSYBOX}}
    volumeMounts: [{{name: out, mountPath: /out}}]
    command: [sh, -c, 'echo waiting; until [ -f /out/go ]; do sleep 0.1; done; i=0; while [ $i -lt 200 ]; do seq $(({FIRST}+1+i*2000)) $(({FIRST}+i*2000+2000)); i=$((i+1)); sleep 0.1; done | sed "s/.*/line & {pad}/"; echo done; trap "exit 0" TERM; sleep 3600 & wait']
  - name: quiet
    image: ${{CRILET_IMAGE_BUSYBOX}}
    command: [sh, -c, 'trap "exit 0" TERM; i=0; while true; do i=$((i+1)); echo tick $i; sleep 0.5; done']
"#
    )
}

/// One CRI record `<time> stdout <F|P> <payload>`: (partial, payload), or None if it is
/// anything else.
fn record(text: &str) -> Option<(bool, &str)> {
    let mut parts = text.splitn(4, ' ');
    let time = parts.next()?;
    time.parse::<jiff::Timestamp>().ok()?;
    (parts.next()? == "stdout").then_some(())?;
    let partial = match parts.next()? {
        "F" => false,
        "P" => true,
        _ => return None,
    };
    Some((partial, parts.next()?))
}

/// The payload of a whole (`F`) record.
fn payload(text: &str) -> Option<&str> {
    record(text).and_then(|(partial, p)| (!partial).then_some(p))
}

/// The writer's line number `n`, exactly as it prints it.
fn line(n: u64) -> String {
    format!("line {n} {}", "x".repeat(PAYLOAD - "line 0000000 ".len()))
}

/// The number of a whole writer line, if `payload` is one.
fn seq_of(payload: &str) -> Option<u64> {
    let n: u64 = payload.strip_prefix("line ")?.split(' ').next()?.parse().ok()?;
    (payload == line(n)).then_some(n)
}

/// The records of a log file as (partial, payload); each must be `<time> stdout F|P <payload>`.
fn records(what: &str, text: &str) -> Vec<(bool, String)> {
    text.lines()
        .enumerate()
        .map(|(i, r)| {
            let (partial, p) = record(r)
                .unwrap_or_else(|| panic!("{what}: record {i} is not `<time> stdout F|P <payload>`: {r:?}"));
            (partial, p.to_string())
        })
        .collect()
}

/// Checks that `segments` (files in order, or one follower's output) hold the writer's lines
/// whole, each once, in order, and returns (first, last, split) line numbers seen.
///
/// A line in flight when containerd switches to the reopened file is split in two records: the
/// head, a partial (`P`) record, ends the old file and the tail opens the new one. Such a pair
/// is accepted only there (a partial record must end its segment) and must join to exactly the
/// line that is due. The first segment may open with the tail of a line whose head was in a
/// file already removed.
fn check_lines(what: &str, segments: &[Vec<(bool, String)>]) -> (u64, u64, u64) {
    let mut want: Option<u64> = None;
    let mut first = None;
    let mut head: Option<String> = None;
    let mut split = 0;
    for (s, seg) in segments.iter().enumerate() {
        for (i, (partial, p)) in seg.iter().enumerate() {
            let at = format!("{what}: segment {s} record {i}");
            if *partial {
                assert!(i + 1 == seg.len() && head.is_none(), "{at}: partial record {p:?} inside a file");
                head = Some(p.clone());
                continue;
            }
            if let Some(h) = head.take() {
                assert_eq!(i, 0, "{at}: a split line continues in the next file");
                let joined = format!("{h}{p}");
                if want.is_none() {
                    // The first line seen was split: its number is in the head.
                    let n = seq_of(&joined).unwrap_or_else(|| panic!("{at}: {joined:?} is not a line"));
                    (first, want) = (Some(n), Some(n));
                }
                let due = want.map(line).unwrap_or_default();
                assert_eq!(joined, due, "{at}: split line");
                split += 1;
                want = want.map(|w| w + 1);
                continue;
            }
            if p == "waiting" || p == "done" {
                continue;
            }
            match (want, seq_of(p)) {
                (None, Some(n)) => (first, want) = (Some(n), Some(n + 1)),
                (None, None) if s == 0 && i == 0 => {} // the tail of a line from a removed file
                (Some(w), Some(n)) if n == w => want = Some(w + 1),
                _ => panic!("{at}: {p:?} where line {want:?} was due"),
            }
        }
    }
    assert!(head.is_none(), "{what}: ends with the head of a line: {head:?}");
    let first = first.unwrap_or_else(|| panic!("{what}: no writer line"));
    (first, want.map_or(first, |w| w - 1), split)
}

/// A log file: (name, size, inode).
type FileInfo = (String, u64, u64);

/// The files of a container's log directory.
fn listing(dir: &Path) -> Vec<FileInfo> {
    let mut out: Vec<FileInfo> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(Result::ok)
                .filter_map(|e| {
                    let m = e.metadata().ok()?;
                    Some((e.file_name().to_string_lossy().into_owned(), m.len(), m.ino()))
                })
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

fn is_rotated_name(name: &str) -> bool {
    let Some(rest) = name.strip_prefix("0.log.") else { return false };
    let stamp = rest.strip_suffix(".gz").unwrap_or(rest);
    stamp.len() == 15 && stamp.as_bytes()[8] == b'-' && stamp.bytes().filter(u8::is_ascii_digit).count() == 14
}

/// `crilet logs -f --timestamps` as a child process; its lines with their arrival times.
struct Follower {
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
    /// Payloads `waiting` and `done` seen.
    marks: Arc<Mutex<BTreeSet<String>>>,
}

impl Follower {
    fn start(a: &Agent) -> Follower {
        let mut child = Command::new(bin())
            .args(["logs", "rot", "-n", "t-logrot", "-c", "writer", "-f", "--timestamps", "--control-socket"])
            .arg(&a.socket)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn crilet logs -f");
        let out = child.stdout.take().expect("piped stdout");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let marks = Arc::new(Mutex::new(BTreeSet::new()));
        let (sink, seen) = (lines.clone(), marks.clone());
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { return };
                if let Some((_, p @ ("waiting" | "done"))) = line.split_once(' ') {
                    seen.lock().expect("marks lock").insert(p.to_string());
                }
                sink.lock().expect("lines lock").push(line);
            }
        });
        Follower { child, lines, marks }
    }

    fn seen(&self, payload: &str) -> bool {
        self.marks.lock().expect("marks lock").contains(payload)
    }
}

impl Drop for Follower {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The most bytes of log the writer produced within any `window`, from the follower's
/// timestamped lines (the runtime's receive times).
fn max_bytes_in_window(lines: &[String], window: Duration) -> u64 {
    let times: Vec<i128> = lines
        .iter()
        .filter_map(|l| l.split_once(' ')?.0.parse::<jiff::Timestamp>().ok())
        .map(|t| t.as_nanosecond())
        .collect();
    let w = window.as_nanos() as i128;
    let (mut best, mut start) = (0usize, 0usize);
    for end in 0..times.len() {
        while times[end] - times[start] > w {
            start += 1;
        }
        best = best.max(end + 1 - start);
    }
    best as u64 * (PAYLOAD as u64 + RECORD_OVERHEAD)
}

#[tokio::test(flavor = "multi_thread")]
async fn rotation_bounds_the_log_and_loses_nothing() {
    let args = [
        "--container-log-max-size",
        "1Mi",
        "--container-log-max-files",
        "3",
        "--container-log-monitor-interval",
        "500ms",
    ];
    let a = Agent::start_with_args("logrot", &args, &[]).await;
    let out = a.dir.join("out");
    std::fs::create_dir_all(&out).expect("mkdir out");
    std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o777)).expect("chmod out");
    a.write_manifest("rot.yaml", &manifest().replace("OUT", &out.display().to_string()));
    let p = running_pod(&a, "rot").await;
    let uid = p["metadata"]["uid"].as_str().expect("uid").to_string();
    let pod_dir = a.logs.join(format!("t-logrot_rot_{uid}"));
    let (dir, quiet_dir) = (pod_dir.join("writer"), pod_dir.join("quiet"));
    let current = dir.join("0.log");

    let follower = Follower::start(&a);
    wait_for("crilet logs -f to print the writer's first line", Duration::from_secs(30), || async {
        follower.seen("waiting").then_some(())
    })
    .await;
    std::fs::write(out.join("go"), "").expect("touch go");
    let started = Instant::now();

    // Sample the directory while the writer writes, until the follower has seen it all.
    // (when, bytes in the directory, its files)
    let mut samples: Vec<(Duration, u64, Vec<FileInfo>)> = Vec::new();
    let mut rotated_names: BTreeSet<String> = BTreeSet::new();
    let mut inodes_with_data: BTreeSet<u64> = BTreeSet::new();
    while !follower.seen("done") {
        assert!(
            started.elapsed() < Duration::from_secs(180),
            "the writer did not finish in 180 s\n{}",
            a.log()
        );
        let files = listing(&dir);
        let total: u64 = files.iter().map(|f| f.1).sum();
        for (name, size, ino) in &files {
            if is_rotated_name(name) {
                rotated_names.insert(name.trim_end_matches(".gz").to_string());
            }
            if name == "0.log" && *size > 0 {
                inodes_with_data.insert(*ino);
            }
        }
        samples.push((started.elapsed(), total, files));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let wrote_for = started.elapsed();
    let lines = follower.lines.lock().expect("lines lock").clone();
    let overshoot = max_bytes_in_window(&lines, OVERSHOOT_WINDOW);
    eprintln!(
        "logrot: {LINES} lines in {wrote_for:?}; {} samples; {} rotations seen; most bytes in {OVERSHOOT_WINDOW:?}: {overshoot}",
        samples.len(),
        rotated_names.len()
    );

    // Rotations happened, and containerd wrote to a fresh file at the original path each time.
    assert!(rotated_names.len() >= 3, "expected several rotations, saw {rotated_names:?}\n{}", a.log());
    assert!(
        inodes_with_data.len() >= 3,
        "new lines must keep arriving at {} after rotations (reopen): files with data {inodes_with_data:?}",
        current.display()
    );

    // Bounded while writing: every file is at most max-size plus what one overshoot window adds
    // (a file is over the limit only until the next pass renames it); compressed and .tmp files
    // are smaller than the file they come from; at most max-files files exist at once.
    let bound = MAX_FILES * (MAX_SIZE + overshoot);
    let peak = samples.iter().max_by_key(|s| s.1).expect("samples");
    eprintln!("logrot: peak {} bytes at {:?} (bound {bound}): {:?}", peak.1, peak.0, peak.2);
    for (at, total, files) in &samples {
        assert!(*total <= bound, "log dir {total} bytes at {at:?} > bound {bound}: {files:?}");
        let kept = files.iter().filter(|f| !f.0.ends_with(".tmp")).count() as u64;
        // A directory listing is not atomic: a file renamed while it is read can show twice.
        assert!(kept <= MAX_FILES + 1, "too many log files at {at:?}: {files:?}");
    }

    // Settles once writing stopped: at most max-files files; max-files × max-size plus the
    // newest rotated file's overshoot.
    let settled = wait_for("the log directory to settle", Duration::from_secs(30), || async {
        let before = listing(&dir);
        tokio::time::sleep(INTERVAL * 4).await;
        let after = listing(&dir);
        (before == after && !after.iter().any(|f| f.0.ends_with(".tmp"))).then_some(after)
    })
    .await;
    let total: u64 = settled.iter().map(|f| f.1).sum();
    eprintln!("logrot: settled at {total} bytes: {settled:?}");
    assert!(settled.len() as u64 <= MAX_FILES, "more than {MAX_FILES} files: {settled:?}");
    assert!(total <= MAX_FILES * MAX_SIZE + overshoot, "settled log dir {total} bytes: {settled:?}");
    assert!(settled.iter().all(|f| f.0 == "0.log" || is_rotated_name(&f.0)), "unexpected files: {settled:?}");

    // Compressed rotated files are gzip; the newest rotated file is still plain (compressed at
    // the next rotation, as the kubelet does). The kept files, oldest first, hold one contiguous
    // run of whole records ending with the last line; the current file, written by containerd
    // after the last reopen, has whole records.
    let mut segments = Vec::new();
    let mut gz_files = 0;
    for (name, _, _) in
        settled.iter().filter(|f| f.0 != "0.log").chain(settled.iter().filter(|f| f.0 == "0.log"))
    {
        let bytes = std::fs::read(dir.join(name)).expect("read log file");
        let text = if name.ends_with(".gz") {
            gz_files += 1;
            assert_eq!(&bytes[..2], &[0x1f, 0x8b], "{name} is not gzip");
            let mut text = String::new();
            flate2::read::GzDecoder::new(&bytes[..]).read_to_string(&mut text).expect("gunzip");
            text
        } else {
            String::from_utf8(bytes).expect("utf-8 log")
        };
        segments.push(records(name, &text));
    }
    assert!(gz_files >= 1, "no compressed rotated file: {settled:?}");
    let (_, last, split) = check_lines("kept files", &segments);
    assert_eq!(last, FIRST + LINES, "the kept files end with the last line");
    eprintln!("logrot: {split} lines split across kept files by a reopen");
    let text = std::fs::read_to_string(&current).expect("read current log");

    // `crilet logs -f` saw every line once, whole (split records joined), in order, across every
    // rotation.
    let followed: Vec<(bool, String)> = lines
        .iter()
        .map(|l| (false, l.split_once(' ').map(|(_, p)| p).unwrap_or_default().to_string()))
        .collect();
    let (first, last, _) = check_lines("crilet logs -f", &[followed]);
    assert_eq!((first, last), (FIRST + 1, FIRST + LINES), "crilet logs -f saw every line");

    // `crilet logs` (no -f) prints the current file only, as the kubelet serves it.
    let (ok, stdout, stderr) = a.cli(&["logs", "rot", "-n", "t-logrot", "-c", "writer"]);
    assert!(ok, "crilet logs: {stderr}");
    let want: String = text.lines().filter_map(payload).map(|p| format!("{p}\n")).collect();
    assert_eq!(stdout, want, "crilet logs prints the current file");

    // The container that logs little was never rotated.
    let quiet = listing(&quiet_dir);
    assert_eq!(quiet.iter().map(|f| f.0.as_str()).collect::<Vec<_>>(), ["0.log"], "{quiet:?}");
    assert!(quiet[0].1 > 0, "the quiet container logs");
    assert!(a.log().contains("rotated container log"), "the agent logs its rotations");

    drop(follower);
    let mut a = a;
    a.kill();
    remove_pods_of(&a.env.cri(), &a.manifests).await;
}

/// Runs `crilet run` with `args`; it must exit within 20 s. Returns (success, stderr).
fn run_briefly(args: &[String]) -> (bool, String) {
    let dir = PathBuf::from("/var/lib/crilet-dev/tests/logrot-flags");
    std::fs::create_dir_all(&dir).expect("mkdir");
    let mut cmd = testkit::AgentCmd::in_dir(bin(), "unix:///nonexistent/crilet-logrot.sock", &dir);
    cmd.manifests = dir.join("m");
    cmd.root = dir.join("r");
    cmd.pod_logs = dir.join("l");
    cmd.socket = dir.join("s.sock");
    // The flags under test alone, and the caller's RUST_LOG: stderr is what is checked.
    cmd.container_logs = None;
    cmd.rust_log = None;
    cmd.args = args.to_vec();
    let mut child = cmd.command().stdout(Stdio::null()).stderr(Stdio::piped()).spawn().expect("run crilet");
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait crilet") {
            break status;
        }
        if start.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("crilet run {args:?} did not exit: the settings were accepted");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut stderr = String::new();
    child.stderr.take().expect("stderr").read_to_string(&mut stderr).expect("read stderr");
    (status.success(), stderr)
}

#[test]
fn bad_rotation_settings_are_refused() {
    let config = PathBuf::from("/var/lib/crilet-dev/tests/logrot-flags/config.yaml");
    std::fs::create_dir_all(config.parent().expect("parent")).expect("mkdir");
    std::fs::write(&config, "container-log-max-files: 1\ncontainer-log-max-size: 2Mi\n")
        .expect("write config");
    let cases: [(&[&str], &str); 5] = [
        (&["--container-log-max-files", "1"], "--container-log-max-files 1: must be 2 or more"),
        (&["--container-log-max-size", "0"], "--container-log-max-size \"0\": must be greater than zero"),
        (&["--container-log-max-size", "10MB"], "--container-log-max-size \"10MB\": not a quantity"),
        (
            &["--container-log-monitor-interval", "10"],
            "--container-log-monitor-interval \"10\": not a duration",
        ),
        (&["--config", "CONFIG"], "--container-log-max-files 1"),
    ];
    for (args, says) in cases {
        let args: Vec<String> =
            args.iter().map(|a| a.replace("CONFIG", &config.display().to_string())).collect();
        let (ok, stderr) = run_briefly(&args);
        assert!(!ok, "{args:?} must be refused");
        assert!(stderr.contains(says), "{args:?}: want {says:?} in {stderr}");
    }
}
