use jiff::SignedDuration;
use serde_json::json;

use super::*;

fn t0() -> Timestamp {
    "2024-05-06T12:00:00Z".parse().expect("valid time")
}

fn at(secs: i64) -> Timestamp {
    t0() + SignedDuration::from_secs(secs)
}

fn pod() -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {
            "initContainers": [{"name": "prep", "image": "busybox"}],
            "containers": [
                {"name": "app", "image": "busybox",
                 "startupProbe": {"exec": {"command": ["true"]}},
                 "readinessProbe": {"exec": {"command": ["true"]}}},
                {"name": "plain", "image": "busybox"},
            ],
        },
    }))
    .expect("valid pod")
}

fn running(name: &str, id: &str, started: bool, ready: bool) -> serde_json::Value {
    json!({"name": name, "image": "busybox", "imageID": "", "restartCount": 0,
           "containerID": format!("containerd://{id}"), "started": started, "ready": ready,
           "state": {"running": {"startedAt": at(0).to_string()}}})
}

fn exited(name: &str, id: &str, code: i32, reason: &str, finished: i64) -> serde_json::Value {
    json!({"name": name, "image": "busybox", "imageID": "", "restartCount": 0,
           "containerID": format!("containerd://{id}"), "started": false, "ready": code == 0 && name == "prep",
           "state": {"terminated": {"exitCode": code, "reason": reason, "finishedAt": at(finished).to_string(),
                                    "containerID": format!("containerd://{id}")}}})
}

fn with_last(mut st: serde_json::Value, last: serde_json::Value) -> serde_json::Value {
    st["lastState"] = last["state"].clone();
    st
}

fn status(inits: Vec<serde_json::Value>, apps: Vec<serde_json::Value>) -> PodStatus {
    serde_json::from_value(json!({"initContainerStatuses": inits, "containerStatuses": apps}))
        .expect("status")
}

/// (container, label, id, detail, time offset) of each step.
fn summary(steps: Vec<(String, Step)>) -> Vec<(String, &'static str, String, String, i64)> {
    steps
        .into_iter()
        .map(|(c, s)| (c, s.kind.label(), s.container_id, s.detail, (s.time - t0()).get_seconds()))
        .collect()
}

fn row(
    c: &str,
    label: &'static str,
    id: &str,
    detail: &str,
    secs: i64,
) -> (String, &'static str, String, String, i64) {
    (c.to_string(), label, id.to_string(), detail.to_string(), secs)
}

#[test]
fn status_steps_cases() {
    let now = at(100);
    let cases: Vec<(&str, Option<PodStatus>, PodStatus, Vec<_>)> = vec![
        (
            "nothing changed: no step",
            Some(status(vec![], vec![running("app", "a1", true, true)])),
            status(vec![], vec![running("app", "a1", true, true)]),
            vec![],
        ),
        (
            "startup probe passed, then ready: two steps saying why",
            Some(status(vec![], vec![running("app", "a1", false, false)])),
            status(vec![], vec![running("app", "a1", true, true)]),
            vec![
                row("app", "Started=true", "a1", "startup probe succeeded", 100),
                row("app", "Ready=true", "a1", "readiness probe succeeded", 100),
            ],
        ),
        (
            "no probes: started and ready as soon as it runs",
            None,
            status(vec![], vec![running("plain", "p1", true, true)]),
            vec![
                row("plain", "Started=true", "p1", "running; no startup probe", 100),
                row("plain", "Ready=true", "p1", "started; no readiness probe", 100),
            ],
        ),
        (
            "readiness lost while running",
            Some(status(vec![], vec![running("app", "a1", true, true)])),
            status(vec![], vec![running("app", "a1", true, false)]),
            vec![row("app", "Ready=false", "a1", "readiness probe failed", 100)],
        ),
        (
            "exit: the runtime's finish time, code and reason; no Ready=false for a stopped one",
            Some(status(vec![], vec![running("app", "a1", true, true)])),
            status(vec![], vec![exited("app", "a1", 137, "Error", 42)]),
            vec![row("app", "Exited", "a1", "exit code 137 (Error)", 42)],
        ),
        (
            "exit and restart between two statuses: the exit comes from lastState",
            Some(status(vec![], vec![running("app", "a1", true, true)])),
            status(
                vec![],
                vec![with_last(running("app", "a2", false, false), exited("app", "a1", 1, "Error", 50))],
            ),
            vec![row("app", "Exited", "a1", "exit code 1 (Error)", 50)],
        ),
        (
            "an exit already shown is not repeated when it moves to lastState",
            Some(status(vec![], vec![exited("app", "a1", 1, "Error", 50)])),
            status(
                vec![],
                vec![with_last(running("app", "a2", true, false), exited("app", "a1", 1, "Error", 50))],
            ),
            vec![row("app", "Started=true", "a2", "startup probe succeeded", 100)],
        ),
        (
            "a regular init container: started and exited, never a Ready step",
            Some(status(vec![running("prep", "i1", true, false)], vec![])),
            status(vec![exited("prep", "i1", 0, "Completed", 7)], vec![]),
            vec![row("prep", "Exited", "i1", "exit code 0 (Completed)", 7)],
        ),
    ];
    for (name, prev, new, want) in cases {
        assert_eq!(summary(status_steps(&pod(), prev.as_ref(), &new, now)), want, "{name}");
    }
}

#[test]
fn timeline_keeps_time_order_and_its_bound() {
    let step = |secs, kind| Step { time: at(secs), kind, container_id: "a1".into(), detail: String::new() };
    let mut t = Timeline::default();
    t.add(Some("app"), step(1, StepKind::Created));
    t.add(Some("app"), step(5, StepKind::Created));
    // An exit seen after the next instance was created goes before it.
    t.add(Some("app"), step(3, StepKind::Exited));
    t.add(None, step(9, StepKind::PodStopped));
    let got: Vec<(Option<String>, i64)> =
        t.entries().into_iter().map(|(c, s)| (c, (s.time - t0()).get_seconds())).collect();
    let app = Some("app".to_string());
    assert_eq!(got, vec![(None, 9), (app.clone(), 1), (app.clone(), 3), (app, 5)]);

    let mut t = Timeline::default();
    for i in 0..(STEPS_PER_CONTAINER as i64 + 5) {
        t.add(Some("app"), step(i, StepKind::Started));
    }
    let entries = t.entries();
    assert_eq!(entries.len(), STEPS_PER_CONTAINER);
    assert_eq!((entries[0].1.time - t0()).get_seconds(), 5, "the oldest are dropped");
}

#[test]
fn budget_cases() {
    let s = Duration::from_secs;
    let ms = Duration::from_millis;
    // (grace, left at the end, over at the end, used, detail)
    let cases = [
        (
            s(30),
            ms(27_700),
            Duration::ZERO,
            ms(2_300),
            "pod deleted: all containers stopped in 2.3s of 30s grace",
        ),
        (
            s(3),
            Duration::ZERO,
            ms(200),
            ms(3_200),
            "pod deleted: all containers stopped in 3.2s of 3s grace (overran by 0.2s)",
        ),
        (
            s(0),
            Duration::ZERO,
            Duration::ZERO,
            Duration::ZERO,
            "pod deleted: all containers stopped in 0.0s of 0s grace",
        ),
    ];
    for (grace, left, over, used, detail) in cases {
        assert_eq!(budget_used(grace, left, over), used, "{detail}");
        assert_eq!(stopped_detail("pod deleted", used, grace), detail);
    }
}

#[test]
fn kill_why_names_a_changed_image() {
    assert_eq!(
        kill_why("Container app definition changed, will be restarted", Some("busybox:1.37")),
        "image changed to busybox:1.37 (in-place update)"
    );
    assert_eq!(
        kill_why("Container app failed liveness probe, will be restarted", None),
        "Container app failed liveness probe, will be restarted"
    );
}
