//! The summary text, the watchdog decision and the protocol over a real socket.

use k8s_openapi::api::core::v1::{Pod, PodCondition, PodStatus};

use super::status::MAX_ERROR_CHARS;
use super::*;

fn summary(pods: usize, ready: usize, error: Option<&str>, stuck: bool) -> Summary {
    Summary {
        pods,
        ready,
        runtime: "containerd 2.1.9".into(),
        pleg_mode: "events",
        runtime_error: error.map(str::to_string),
        sync_loop_stuck: stuck,
    }
}

#[test]
fn summary_lines() {
    let long = "x".repeat(400);
    let cases = [
        ("a busy node", summary(12, 11, None, false), "12 pods, 11 ready, runtime containerd 2.1.9, events"),
        ("one pod: singular", summary(1, 1, None, false), "1 pod, 1 ready, runtime containerd 2.1.9, events"),
        ("no pods", summary(0, 0, None, false), "0 pods, 0 ready, runtime containerd 2.1.9, events"),
        (
            "runtime down: its error instead of its version",
            summary(3, 2, Some("CRI ListContainers failed: connection refused"), false),
            "3 pods, 2 ready, runtime unavailable: CRI ListContainers failed: connection refused",
        ),
        (
            "an error over lines stays on one",
            summary(1, 0, Some("first\nsecond\r\n  third"), false),
            "1 pod, 0 ready, runtime unavailable: first second third",
        ),
        ("down without a message", summary(2, 0, Some(" "), false), "2 pods, 0 ready, runtime unavailable"),
        (
            "a stuck sync loop is said",
            summary(2, 2, None, true),
            "2 pods, 2 ready, runtime containerd 2.1.9, events; sync loop stuck",
        ),
    ];
    for (name, s, want) in cases {
        assert_eq!(s.to_string(), want, "{name}");
    }
    assert_eq!(first_sync(1), "first sync of 1 pod");
    assert_eq!(first_sync(0), "first sync of 0 pods");
    let line = summary(1, 1, Some(&long), false).to_string();
    assert_eq!(
        line.chars().count(),
        "1 pod, 1 ready, runtime unavailable: ".len() + MAX_ERROR_CHARS,
        "{line}"
    );
    assert!(line.ends_with("x…"), "a long error is cut: {line}");
}

#[test]
fn ready_pods() {
    let pod = |conds: &[(&str, &str)]| Pod {
        status: Some(PodStatus {
            conditions: Some(
                conds
                    .iter()
                    .map(|(t, s)| PodCondition {
                        type_: t.to_string(),
                        status: s.to_string(),
                        ..Default::default()
                    })
                    .collect(),
            ),
            ..Default::default()
        }),
        ..Default::default()
    };
    let cases = [
        ("Ready=True", pod(&[("PodScheduled", "True"), ("Ready", "True")]), true),
        ("Ready=False", pod(&[("ContainersReady", "True"), ("Ready", "False")]), false),
        ("no Ready condition", pod(&[("ContainersReady", "True")]), false),
        ("no status yet", Pod::default(), false),
    ];
    for (name, p, want) in cases {
        assert_eq!(pod_ready(&p), want, "{name}");
    }
}

#[test]
fn watchdog_intervals() {
    let cases = [
        ("systemd's usual pair", Some("60000000"), Some("42"), Some(Duration::from_secs(60))),
        ("no WATCHDOG_PID: meant for us", Some("2000000"), None, Some(Duration::from_secs(2))),
        ("another process's watchdog", Some("2000000"), Some("7"), None),
        ("a PID that is not a number", Some("2000000"), Some("x"), None),
        ("no WATCHDOG_USEC", None, Some("42"), None),
        ("0 means off", Some("0"), None, None),
        ("not a number", Some("60s"), None, None),
    ];
    for (name, usec, pid, want) in cases {
        assert_eq!(watchdog_interval(usec, pid, 42), want, "{name}");
    }
}

#[test]
fn watchdog_pings_only_while_alive() {
    let stuck = || Err(vec![Unhealthy::SyncLoop(Some(Duration::from_secs(31)))]);
    let silent = || Err(vec![Unhealthy::Runtime(Some(Duration::from_secs(11)))]);
    let withheld = |why: &str| Some(Change::Withheld(why.to_string()));
    // (case, health at each tick, (ping?, change) at each tick)
    let cases = [
        ("alive: a ping each tick, nothing to log", vec![Ok(()), Ok(())], vec![(true, None), (true, None)]),
        (
            "a silent runtime stops pings, logged once; its answer resumes them",
            vec![Ok(()), silent(), silent(), Ok(())],
            vec![
                (true, None),
                (false, withheld("container runtime: no relist answered for 11s")),
                (false, None),
                (true, Some(Change::Resumed)),
            ],
        ),
        ("a stuck sync loop stops pings", vec![stuck()], vec![(false, withheld("sync loop: stuck for 31s"))]),
        (
            "a dead loop stops pings",
            vec![Err(vec![Unhealthy::LoopEnded { name: "node lease", panicked: true }])],
            vec![(false, withheld("node lease: loop panicked"))],
        ),
        (
            "every reason is named",
            vec![Err(vec![Unhealthy::SyncLoop(None), Unhealthy::Runtime(None)])],
            vec![(false, withheld("sync loop: not started; container runtime: no relist answered yet"))],
        ),
    ];
    for (name, ticks, want) in cases {
        let mut w = Watchdog::default();
        let got: Vec<(bool, Option<Change>)> = ticks
            .iter()
            .map(|h| {
                let d = w.decide(h);
                (d.ping, d.change)
            })
            .collect();
        assert_eq!(got, want, "{name}");
    }
}

#[test]
fn status_is_not_repeated_and_nothing_follows_stopping() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("notify.sock");
    let listener = UnixDatagram::bind(&path).expect("bind");
    listener.set_nonblocking(true).expect("nonblocking");
    let n = Notifier {
        inner: Arc::new(Inner {
            target: Some(open_target(path.to_str().expect("utf-8 path")).expect("target")),
            watchdog: None,
            sent: Mutex::default(),
        }),
    };
    n.starting("loading manifests");
    n.status("1 pod, 0 ready");
    n.status("1 pod, 0 ready");
    n.ready();
    n.status("1 pod, 1 ready");
    n.stopping();
    n.status("0 pods, 0 ready");
    n.ready();
    let mut got = Vec::new();
    let mut buf = [0u8; 512];
    while let Ok(len) = listener.recv(&mut buf) {
        got.push(String::from_utf8_lossy(&buf[..len]).into_owned());
    }
    assert_eq!(
        got,
        [
            "STATUS=starting: loading manifests\n",
            "STATUS=1 pod, 0 ready\n",
            "READY=1\n",
            "STATUS=1 pod, 1 ready\n",
            "STOPPING=1\nSTATUS=stopping; containers keep running\n",
        ]
    );
}
