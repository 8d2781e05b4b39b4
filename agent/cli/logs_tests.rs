use std::io::Cursor;

use serde_json::json;

use super::*;
use crate::cli::fixtures::{pod, running, waiting, with_last_exit};

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
fn container_choice() {
    let two =
        pod(json!({"spec": {"containers": [{"name": "app", "image": "b"}, {"name": "side", "image": "b"}],
                                  "initContainers": [{"name": "setup", "image": "b"}]}}));
    assert_eq!(
        pick_container(&two, None),
        Ok((
            "app".to_string(),
            vec!["Defaulted container \"app\" out of: app, side, setup (init)".to_string()]
        ))
    );
    assert_eq!(pick_container(&two, Some("setup")), Ok(("setup".to_string(), vec![])));
    assert_eq!(pick_container(&two, Some("x")), Err("container x is not valid for pod web".to_string()));
    let annotated = pod(
        json!({"metadata": {"annotations": {"kubectl.kubernetes.io/default-container": "side"}},
                               "spec": {"containers": [{"name": "app", "image": "b"}, {"name": "side", "image": "b"}]}}),
    );
    assert_eq!(pick_container(&annotated, None), Ok(("side".to_string(), vec![])));
    assert_eq!(pick_container(&pod(json!({})), None), Ok(("app".to_string(), vec![])));
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
