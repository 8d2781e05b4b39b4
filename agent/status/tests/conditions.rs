//! R9.5 conditions, R2.6/R2.9 PodReadyToStartContainers, transition times.

use k8s_openapi::api::core::v1::{PodCondition, PodStatus};

use super::{at, none, now, observed, pod, run};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

/// (type, status, reason, message) of every condition, in order.
type Row = (String, String, Option<String>, Option<String>);

fn row(type_: &str, status: bool, reason: Option<&str>, message: Option<&str>) -> Row {
    let status = if status { "True" } else { "False" };
    (type_.into(), status.into(), reason.map(Into::into), message.map(Into::into))
}

fn rows(conditions: &[PodCondition]) -> Vec<Row> {
    conditions
        .iter()
        .map(|c| (c.type_.clone(), c.status.clone(), c.reason.clone(), c.message.clone()))
        .collect()
}

/// The five kubelet conditions; `ready`/`containers` are (status, reason, message).
fn want(
    to_start: bool,
    initialized: (bool, Option<&str>, Option<&str>),
    ready: (bool, Option<&str>, Option<&str>),
    containers: (bool, Option<&str>, Option<&str>),
) -> Vec<Row> {
    vec![
        row("PodReadyToStartContainers", to_start, None, None),
        row("Initialized", initialized.0, initialized.1, initialized.2),
        row("Ready", ready.0, ready.1, ready.2),
        row("ContainersReady", containers.0, containers.1, containers.2),
        row("PodScheduled", true, None, None),
    ]
}

const YES: (bool, Option<&str>, Option<&str>) = (true, None, None);

#[test]
fn condition_cases() {
    let not_ready_a = (false, Some("ContainersNotReady"), Some("containers with unready status: [a]"));
    let completed = (false, Some("PodCompleted"), None);
    let failed = (false, Some("PodFailed"), None);
    let init_incomplete =
        (false, Some("ContainersNotInitialized"), Some("containers with incomplete status: [i s]"));
    let gate_false = (
        false,
        Some("ReadinessGatesNotReady"),
        Some("the status of pod readiness gate \"x\" is not \"True\", but False"),
    );
    let mut gate_rows = want(true, YES, gate_false, YES);
    gate_rows.push(row("x", false, None, None));
    let mut update_rows = want(
        true,
        YES,
        (
            false,
            Some("ReadinessGatesNotReady"),
            Some("the status of pod readiness gate \"InPlaceUpdateReady\" is not \"True\", but False"),
        ),
        YES,
    );
    update_rows.push(row("InPlaceUpdateReady", false, None, None));
    let up = || observed().sandbox_ready("10.0.0.2");

    let cases = [
        ("no sandbox yet", pod().app("a"), observed(), none(), want(false, YES, not_ready_a, not_ready_a)),
        (
            "app running, no probes: all True",
            pod().app("a"),
            up().running("a"),
            none(),
            want(true, YES, YES, YES),
        ),
        (
            "readiness probe without a result: not ready",
            pod().app("a").readiness_probe("a"),
            up().running("a"),
            none(),
            want(true, YES, not_ready_a, not_ready_a),
        ),
        (
            "readiness probe succeeded: ready",
            pod().app("a").readiness_probe("a"),
            up().running("a"),
            none().probe("a-0", None, Some(true)),
            want(true, YES, YES, YES),
        ),
        (
            "init running, sidecar not there: not initialized, unready list has the sidecar",
            pod().init("i").sidecar("s").app("a"),
            up().running("i"),
            none(),
            want(
                true,
                init_incomplete,
                (false, Some("ContainersNotReady"), Some("containers with unready status: [s a]")),
                (false, Some("ContainersNotReady"), Some("containers with unready status: [s a]")),
            ),
        ),
        (
            "sidecar restarting after the app ran: still initialized",
            pod().init("i").sidecar("s").app("a"),
            up().exited("i", 0).exited("s", 1).running("a"),
            none(),
            want(
                true,
                YES,
                (false, Some("ContainersNotReady"), Some("containers with unready status: [s]")),
                (false, Some("ContainersNotReady"), Some("containers with unready status: [s]")),
            ),
        ),
        (
            "init done and sidecar started, app not yet created: initialized",
            pod().init("i").sidecar("s").app("a"),
            up().running("s").exited("i", 0),
            none(),
            want(
                true,
                YES,
                (false, Some("ContainersNotReady"), Some("containers with unready status: [a]")),
                (false, Some("ContainersNotReady"), Some("containers with unready status: [a]")),
            ),
        ),
        (
            "Succeeded: PodCompleted",
            pod().app("a").policy("Never"),
            observed().sandbox_not_ready().exited("a", 0),
            none(),
            want(false, (true, Some("PodCompleted"), None), completed, completed),
        ),
        (
            "Failed: PodFailed",
            pod().app("a").policy("Never"),
            up().exited("a", 1),
            none(),
            want(true, YES, failed, failed),
        ),
        (
            "readiness gate False: Ready False, the gate condition copied after ours",
            pod().app("a").gate("x"),
            up().running("a"),
            none().external("x", "False"),
            gate_rows,
        ),
        (
            "readiness gate missing",
            pod().app("a").gate("x"),
            up().running("a"),
            none(),
            want(
                true,
                YES,
                (
                    false,
                    Some("ReadinessGatesNotReady"),
                    Some("corresponding condition of pod readiness gate \"x\" does not exist."),
                ),
                YES,
            ),
        ),
        (
            "in-place update in progress gates Ready without a spec gate",
            pod().app("a"),
            up().running("a"),
            none().external("InPlaceUpdateReady", "False"),
            update_rows,
        ),
        (
            "an external condition of a kubelet type is dropped",
            pod().app("a"),
            up().running("a"),
            none().external("Ready", "False"),
            want(true, YES, YES, YES),
        ),
    ];
    for (name, desired, seen, extra, want) in cases {
        let status = run(&desired.build(), &seen.build(), &extra);
        assert_eq!(rows(status.conditions.as_deref().unwrap_or_default()), want, "{name}");
    }
}

/// An API pod's `InPlaceUpdateReady` counts for Ready only as a readiness gate, as upstream;
/// a static pod's is crilet's and counts without one (the table above).
#[test]
fn an_api_pods_in_place_condition_counts_only_as_a_gate() {
    for (name, desired, want_ready) in [
        ("no gate: the containers' readiness", pod().app("a"), true),
        ("gated: the gate's", pod().app("a").gate("InPlaceUpdateReady"), false),
    ] {
        let mut desired = desired.build();
        desired.source = crate::model::PodSource::Api { node: "n1".into() };
        let seen = observed().sandbox_ready("10.0.0.2").running("a").build();
        let status = run(&desired, &seen, &none().external("InPlaceUpdateReady", "False"));
        let ready = status.conditions.iter().flatten().find(|c| c.type_ == "Ready").expect("Ready");
        assert_eq!(ready.status == "True", want_ready, "{name}: {ready:?}");
    }
}

#[test]
fn ready_to_start_containers_cases() {
    let cases = [
        ("no sandbox", pod().app("a"), observed(), false),
        ("ready sandbox with an IP", pod().app("a"), observed().sandbox_ready("10.0.0.2"), true),
        (
            "newest sandbox not ready",
            pod().app("a"),
            observed().sandbox_ready("10.0.0.2").sandbox_not_ready(),
            false,
        ),
        ("ready sandbox without an IP", pod().app("a"), observed().sandbox_ips(&[]), false),
        (
            "two ready sandboxes",
            pod().app("a"),
            observed().sandbox_ready("10.0.0.2").sandbox_ready("10.0.0.3"),
            false,
        ),
        ("host network sandbox needs no IP", pod().app("a").host_network(), observed().sandbox_host(), true),
        (
            "hostNetwork toggled in the spec",
            pod().app("a").host_network(),
            observed().sandbox_ready("10.0.0.2"),
            false,
        ),
    ];
    for (name, desired, seen, want) in cases {
        let status = run(&desired.build(), &seen.build(), &none());
        let c = &status.conditions.as_deref().unwrap_or_default()[0];
        assert_eq!((c.type_.as_str(), c.status == "True"), ("PodReadyToStartContainers", want), "{name}");
    }
}

#[test]
fn transition_time_kept_while_status_unchanged() {
    let cond = |type_: &str, status: &str, secs: i64| PodCondition {
        type_: type_.into(),
        status: status.into(),
        last_transition_time: Some(at(secs)),
        ..Default::default()
    };
    let previous = PodStatus {
        phase: Some("Running".into()),
        conditions: Some(vec![
            cond("PodReadyToStartContainers", "True", 3),
            cond("Initialized", "True", 4),
            cond("Ready", "False", 5),
            cond("ContainersReady", "False", 5),
            cond("PodScheduled", "True", 1),
        ]),
        ..Default::default()
    };
    let status = run(
        &pod().app("a").build(),
        &observed().sandbox_ready("10.0.0.2").running("a").build(),
        &none().previous(previous),
    );
    let times: Vec<(String, Option<Time>, Option<Time>)> = status
        .conditions
        .unwrap_or_default()
        .into_iter()
        .map(|c| (c.type_, c.last_transition_time, c.last_probe_time))
        .collect();
    let t = |type_: &str, time: Time| (type_.to_owned(), Some(time), None);
    assert_eq!(
        times,
        vec![
            t("PodReadyToStartContainers", at(3)),
            t("Initialized", at(4)),
            t("Ready", Time(now())),
            t("ContainersReady", Time(now())),
            t("PodScheduled", at(1)),
        ]
    );
}
