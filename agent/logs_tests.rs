use std::io::Cursor;

use serde_json::json;

use super::*;
use crate::fixtures::{running, waiting, with_last_exit};

/// A record and what it parses to: (partial, content).
type Case = (&'static [u8], Option<(bool, &'static [u8])>);

#[test]
fn parse_cri_lines() {
    let ts = b"2024-05-06T12:00:00.123456789Z";
    let cases: [Case; 6] = [
        (b"2024-05-06T12:00:00.123456789Z stdout F hello world\n", Some((false, b"hello world"))),
        (b"2024-05-06T12:00:00.123456789Z stderr P part", Some((true, b"part"))),
        (b"2024-05-06T12:00:00.123456789Z stdout F:x \n", Some((false, b""))),
        (b"2024-05-06T12:00:00.123456789Z stdout F", Some((false, b""))),
        (b"not-a-time stdout F x\n", None),
        (b"2024-05-06T12:00:00.123456789Z console F x\n", None),
    ];
    for (line, want) in cases {
        let got = parse_cri_line(line).map(|l| {
            assert_eq!(l.time, ts);
            (l.partial, l.content)
        });
        assert_eq!(got, want, "{}", String::from_utf8_lossy(line));
    }
}

#[test]
fn printer_joins_partials_and_prefixes_timestamps() {
    let records: [&[u8]; 4] = [
        b"2024-05-06T12:00:01Z stdout P hel\n",
        b"2024-05-06T12:00:02Z stdout F lo\n",
        b"garbage\n",
        b"2024-05-06T12:00:03Z stderr F oops\n",
    ];
    for (timestamps, want) in
        [(false, "hello\noops\n"), (true, "2024-05-06T12:00:01Z hello\n2024-05-06T12:00:03Z oops\n")]
    {
        let mut printer = LogPrinter::new(timestamps);
        let mut out = Vec::new();
        for r in records {
            printer.push(r, &mut out);
        }
        assert_eq!(String::from_utf8_lossy(&out), want, "timestamps={timestamps}");
    }
}

#[test]
fn tail_offsets() {
    let text = b"a\nbb\nccc\n";
    for (n, want) in [(0, 9), (1, 5), (2, 2), (3, 0), (10, 0)] {
        assert_eq!(tail_offset(&mut Cursor::new(text), n).expect("in memory"), want, "tail {n}");
    }
    // Like the kubelet, lines are counted by their newlines: an unterminated record is extra.
    assert_eq!(tail_offset(&mut Cursor::new(b"a\nb\nunterminated"), 1).expect("in memory"), 2);
}

#[test]
fn log_file_choice() {
    let status =
        |v: serde_json::Value| -> ContainerStatus { serde_json::from_value(v).expect("valid status") };
    let run2 = status(with_last_exit(running("app", true, 2), 5));
    let backoff2 = status(with_last_exit(waiting("app", "CrashLoopBackOff", 2), 5));
    let first = status(running("app", true, 0));
    let pulling = status(waiting("app", "ErrImagePull", 0));
    let lagging =
        status(json!({"name": "app", "image": "b", "imageID": "", "ready": false, "restartCount": 0,
                                "state": {"terminated": {"exitCode": 1}}}));
    let not_found = Err("previous terminated container \"app\" in pod \"web\" not found".to_string());
    let cases = [
        ("running: the newest instance", vec![0, 1, 2], Some(&run2), false, Ok(2)),
        ("running --previous: the one before", vec![0, 1, 2], Some(&run2), true, Ok(1)),
        ("running --previous, a skipped number", vec![0, 2], Some(&run2), true, Ok(0)),
        ("back-off: the instance that just exited", vec![0, 1, 2], Some(&backoff2), false, Ok(2)),
        (
            "back-off --previous: the last state is that same instance",
            vec![0, 1, 2],
            Some(&backoff2),
            true,
            Ok(2),
        ),
        ("first instance --previous", vec![0], Some(&first), true, not_found.clone()),
        ("status lags behind a restart: --previous reads the files", vec![0, 1], Some(&lagging), true, Ok(0)),
        (
            "status lags behind a restart: the newest file is current",
            vec![0, 1],
            Some(&lagging),
            false,
            Ok(1),
        ),
        ("only the files' newest instance: no previous", vec![1], Some(&lagging), true, not_found),
        (
            "image pull failing",
            vec![],
            Some(&pulling),
            false,
            Err("container \"app\" in pod \"web\" is waiting to start: image can't be pulled".to_string()),
        ),
        (
            "no status yet",
            vec![],
            None,
            false,
            Err("container \"app\" in pod \"web\" is waiting to start - no logs yet".to_string()),
        ),
    ];
    for (name, files, st, previous, want) in cases {
        assert_eq!(select_log_file(&files, st, previous, "app", "web"), want, "{name}");
    }
}

/// One step of a follow scenario in a temporary log directory (`0.log` is the followed path).
#[derive(Clone, Copy)]
enum Step {
    /// Append CRI records with these payloads to a file (created if missing).
    Write(&'static str, &'static [&'static str]),
    /// Append an unterminated record.
    WritePartial(&'static str, &'static str),
    Rename(&'static str, &'static str),
    Remove(&'static str),
    /// Poll once; the payloads printed by that poll.
    Poll(&'static [&'static str]),
    /// The instance exited: what is left is printed.
    Finish(&'static [&'static str]),
}

#[test]
fn follow_across_rotations() {
    use Step::*;
    let quiet = ROTATED_QUIET_POLLS as usize;
    let idle: Vec<Step> = vec![Poll(&[]); quiet - 1];
    let scenarios: Vec<(&str, Vec<Step>)> = vec![
        (
            "no rotation: new records as they come",
            vec![
                Write("0.log", &["1", "2"]),
                Poll(&["1", "2"]),
                Poll(&[]),
                Write("0.log", &["3"]),
                Poll(&["3"]),
            ],
        ),
        (
            "records written to the renamed file after the new one appeared come first",
            [
                vec![Write("0.log", &["1"]), Poll(&["1"])],
                vec![Rename("0.log", "0.log.20240506-120000"), Write("0.log", &["4"])],
                vec![Write("0.log.20240506-120000", &["2", "3"]), Poll(&["2", "3"])],
                idle.clone(),
                vec![Poll(&["4"]), Write("0.log", &["5"]), Poll(&["5"])],
            ]
            .concat(),
        ),
        (
            "the old file keeps growing for a while: the new one waits",
            [
                vec![Rename("0.log", "0.log.20240506-120000"), Write("0.log", &["b1"])],
                vec![Write("0.log.20240506-120000", &["a1"]), Poll(&["a1"]), Poll(&[])],
                vec![Write("0.log.20240506-120000", &["a2"]), Poll(&["a2"])],
                idle.clone(),
                vec![Poll(&["b1"])],
            ]
            .concat(),
        ),
        (
            "rotated twice before the first rotated file was finished; then compressed away",
            [
                vec![Write("0.log", &["1"]), Poll(&["1"])],
                vec![Rename("0.log", "0.log.20240506-120000"), Write("0.log", &["2"]), Poll(&[])],
                vec![Rename("0.log", "0.log.20240506-120001"), Write("0.log", &["3"])],
                // The first poll above counted towards the first rotated file's quiet polls.
                vec![Remove("0.log.20240506-120000")],
                vec![Poll(&[]); quiet - 2],
                vec![Poll(&["2"])],
                idle.clone(),
                vec![Poll(&["3"])],
            ]
            .concat(),
        ),
        (
            "the unterminated end of a finished rotated file is printed once it is finished",
            [
                vec![WritePartial("0.log", "torn"), Poll(&[])],
                vec![Rename("0.log", "0.log.20240506-120000"), Write("0.log", &["next"])],
                idle.clone(),
                vec![Poll(&["torn", "next"])],
            ]
            .concat(),
        ),
        (
            "the instance exits during a rotation: everything, in order",
            vec![
                Write("0.log", &["1"]),
                Rename("0.log", "0.log.20240506-120000"),
                Write("0.log", &["3"]),
                Write("0.log.20240506-120000", &["2"]),
                Finish(&["1", "2", "3"]),
            ],
        ),
        (
            "a failed reopen renamed the file back: the same file goes on",
            vec![
                Write("0.log", &["1"]),
                Poll(&["1"]),
                Rename("0.log", "0.log.20240506-120000"),
                Poll(&[]),
                Rename("0.log.20240506-120000", "0.log"),
                Write("0.log", &["2"]),
                Poll(&["2"]),
            ],
        ),
    ];
    for (name, steps) in scenarios {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("0.log");
        std::fs::write(&path, "").expect("create 0.log");
        let mut follower = Follower::new(path.clone(), LogFile::open(&path).expect("open 0.log"));
        let mut printer = LogPrinter::new(false);
        for (i, step) in steps.iter().enumerate() {
            let append = |file: &str, text: String| {
                use std::io::Write as _;
                let mut f = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(dir.path().join(file))
                    .expect("open for append");
                f.write_all(text.as_bytes()).expect("append");
            };
            let mut out = Vec::new();
            let want: &[&str] = match *step {
                Write(file, payloads) => {
                    append(
                        file,
                        payloads.iter().map(|p| format!("2024-05-06T12:00:00Z stdout F {p}\n")).collect(),
                    );
                    continue;
                }
                WritePartial(file, payload) => {
                    append(file, format!("2024-05-06T12:00:00Z stdout F {payload}"));
                    continue;
                }
                Rename(from, to) => {
                    std::fs::rename(dir.path().join(from), dir.path().join(to)).expect("rename");
                    continue;
                }
                Remove(file) => {
                    std::fs::remove_file(dir.path().join(file)).expect("remove");
                    continue;
                }
                Poll(want) => {
                    follower.poll(&mut printer, &mut out).expect("poll");
                    want
                }
                Finish(want) => {
                    follower.finish(&mut printer, &mut out).expect("finish");
                    want
                }
            };
            let want: String = want.iter().map(|p| format!("{p}\n")).collect();
            assert_eq!(String::from_utf8_lossy(&out), want, "{name}: step {i}");
        }
    }
}
