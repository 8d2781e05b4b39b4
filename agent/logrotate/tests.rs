use std::io::Read;
use std::time::Duration;

use super::plan::{Action, RotationPlan, parse_go_duration, plan};
use super::{Policy, PolicyError};

/// (name, files in the directory, size, max files, want unused, want action)
type PlanCase = (&'static str, Vec<&'static str>, u64, usize, Vec<&'static str>, Action);
/// (max size, max files, interval, want policy or the flag its error names)
type PolicyCase =
    (Option<&'static str>, Option<i64>, Option<&'static str>, Result<Option<Policy>, &'static str>);

fn names(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

#[test]
fn rotation_plan_cases() {
    const MB: u64 = 1 << 20;
    let stamp = "20240506-120003";
    let rotate = |remove: &[&str], compress: &[&str]| Action::Rotate {
        remove: names(remove),
        compress: names(compress),
        rename_to: format!("0.log.{stamp}"),
    };
    let cases: Vec<PlanCase> = vec![
        ("under the limit: nothing", vec!["0.log"], MB - 1, 5, vec![], Action::Keep),
        ("at the limit: first rotation", vec!["0.log"], MB, 5, vec![], rotate(&[], &[])),
        (
            "the newest rotated file is compressed before the next rotation",
            vec!["0.log", "0.log.20240506-120000"],
            MB + 10,
            5,
            vec![],
            rotate(&[], &["0.log.20240506-120000"]),
        ),
        (
            "max files 3: one older rotated file is kept, the oldest removed first",
            vec!["0.log", "0.log.20240506-115900.gz", "0.log.20240506-120000.gz", "0.log.20240506-120001"],
            MB,
            3,
            vec![],
            rotate(&["0.log.20240506-115900.gz", "0.log.20240506-120000.gz"], &["0.log.20240506-120001"]),
        ),
        (
            "max files 2: every rotated file goes before the new rotation",
            vec!["0.log", "0.log.20240506-120001"],
            MB,
            2,
            vec![],
            rotate(&["0.log.20240506-120001"], &[]),
        ),
        (
            "under the limit nothing is done, leftovers included (cleaned when the log is due)",
            vec!["0.log", "0.log.20240506-120000.tmp", "0.log.20240506-115900", "0.log.20240506-115900.gz"],
            10,
            5,
            vec![],
            Action::Keep,
        ),
        (
            "other instances' files are not this log's",
            vec!["0.log", "1.log", "10.log.20240506-120000", "1.log.20240506-120000.gz"],
            MB,
            2,
            vec![],
            rotate(&[], &[]),
        ),
        (
            "a rotated file of this second exists: deferred, never overwritten",
            vec!["0.log", "0.log.20240506-120003.gz"],
            MB,
            5,
            vec![],
            Action::Defer { taken: "0.log.20240506-120003.gz".into() },
        ),
        (
            "deferred while its uncompressed twin exists too",
            vec!["0.log", "0.log.20240506-120003", "0.log.x.tmp"],
            MB,
            5,
            vec!["0.log.x.tmp"],
            Action::Defer { taken: "0.log.20240506-120003".into() },
        ),
    ];
    for (name, files, size, max_files, unused, action) in cases {
        let mut got = plan("0.log", &names(&files), size, MB, max_files, stamp);
        got.unused.sort();
        assert_eq!(got, RotationPlan { unused: names(&unused), action }, "{name}");
    }
}

#[test]
fn go_duration_cases() {
    let cases: [(&str, Option<Duration>); 12] = [
        ("10s", Some(Duration::from_secs(10))),
        ("500ms", Some(Duration::from_millis(500))),
        ("1m30s", Some(Duration::from_secs(90))),
        ("1.5h", Some(Duration::from_secs(5400))),
        ("250us", Some(Duration::from_micros(250))),
        ("2µs", Some(Duration::from_micros(2))),
        ("0", Some(Duration::ZERO)),
        ("", None),
        ("10", None),
        ("s", None),
        ("1.2.3s", None),
        ("-1s", None),
    ];
    for (text, want) in cases {
        assert_eq!(parse_go_duration(text), want, "{text:?}");
    }
}

#[test]
fn policy_cases() {
    let ok = |size: u64, files: usize, ms: u64| {
        Some(Policy { max_size: size, max_files: files, monitor_interval: Duration::from_millis(ms) })
    };
    let cases: [PolicyCase; 11] = [
        (None, None, None, Ok(ok(10 << 20, 5, 10_000))),
        (Some("1Mi"), Some(3), Some("500ms"), Ok(ok(1 << 20, 3, 500))),
        (Some("50M"), Some(2), Some("1m"), Ok(ok(50_000_000, 2, 60_000))),
        (Some("1500"), None, None, Ok(ok(1500, 5, 10_000))),
        (Some("0"), None, None, Err("max-size")),
        (Some("-1Mi"), None, None, Err("max-size")),
        (Some("500m"), None, None, Err("max-size")),
        (Some("10MB"), None, None, Err("max-size")),
        (None, Some(1), None, Err("max-files")),
        (None, None, Some("0s"), Err("monitor-interval")),
        (None, None, Some("10"), Err("monitor-interval")),
    ];
    for (size, files, interval, want) in cases {
        let got = Policy::parse(size, files, interval);
        match (got, want) {
            (Ok(p), Ok(w)) => assert_eq!(Some(p), w, "{size:?} {files:?} {interval:?}"),
            (Err(e), Err(flag)) => {
                let flag_ok = match &e {
                    PolicyError::MaxSize { .. } => flag == "max-size",
                    PolicyError::MaxFiles(_) => flag == "max-files",
                    PolicyError::MonitorInterval { .. } => flag == "monitor-interval",
                };
                assert!(flag_ok && e.to_string().contains(flag), "{size:?} {files:?} {interval:?}: {e}");
            }
            (got, want) => panic!("{size:?} {files:?} {interval:?}: got {got:?}, want {want:?}"),
        }
    }
}

#[test]
fn compress_writes_gzip_through_tmp_and_removes_the_original() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("0.log.20240506-120000");
    let text: String = (0..5000).map(|i| format!("2024-05-06T12:00:00Z stdout F line {i:08}\n")).collect();
    std::fs::write(&log, &text).expect("write log");
    std::fs::write(dir.path().join("0.log.20240506-115900.tmp"), "junk").expect("write tmp");
    super::rotate::tidy(
        dir.path(),
        &names(&["0.log.20240506-115900.tmp"]),
        &[],
        &names(&["0.log.20240506-120000"]),
    )
    .expect("tidy");
    let mut left: Vec<String> = std::fs::read_dir(dir.path())
        .expect("list")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, vec!["0.log.20240506-120000.gz".to_string()]);
    let gz = std::fs::read(dir.path().join("0.log.20240506-120000.gz")).expect("read gz");
    assert_eq!(&gz[..2], &[0x1f, 0x8b], "gzip magic");
    let mut back = String::new();
    flate2::read::GzDecoder::new(&gz[..]).read_to_string(&mut back).expect("gunzip");
    assert_eq!(back, text);
    assert!(gz.len() < text.len() / 4, "compressed {} of {} bytes", gz.len(), text.len());
}

#[test]
fn removing_a_container_log_takes_its_rotated_files_only() {
    let dir = tempfile::tempdir().expect("tempdir");
    for f in [
        "0.log",
        "0.log.20240506-120000.gz",
        "0.log.20240506-120001",
        "0.log.x.tmp",
        "1.log",
        "10.log.20240506-120000",
    ] {
        std::fs::write(dir.path().join(f), "x").expect("write");
    }
    super::remove_container_logs(&dir.path().join("0.log")).expect("remove");
    super::remove_container_logs(&dir.path().join("2.log")).expect("nothing to remove");
    let mut left: Vec<String> = std::fs::read_dir(dir.path())
        .expect("list")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, ["1.log", "10.log.20240506-120000"]);
}
