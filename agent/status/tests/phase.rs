//! R9.3 phase branches and R9.4 stickiness.

use k8s_openapi::api::core::v1::PodStatus;

use super::{Extra, none, observed, pod, run};
use crate::status::phase;

#[test]
fn phase_cases() {
    let cases = [
        (
            "no sandbox yet: Pending (waiting ContainerCreating)",
            pod().app("a"),
            observed(),
            none(),
            "Pending",
        ),
        (
            "app running: Running",
            pod().app("a"),
            observed().sandbox_ready("10.0.0.2").running("a"),
            none(),
            "Running",
        ),
        (
            "one app running, the other not created: Pending",
            pod().app("a").app("b"),
            observed().sandbox_ready("10.0.0.2").running("a"),
            none(),
            "Pending",
        ),
        (
            "init container running: Pending",
            pod().init("i").app("a"),
            observed().sandbox_ready("10.0.0.2").running("i"),
            none(),
            "Pending",
        ),
        (
            "init failed under Never: Failed (R9.3 step 1)",
            pod().init("i").app("a").policy("Never"),
            observed().sandbox_ready("10.0.0.2").exited("i", 1),
            none(),
            "Failed",
        ),
        (
            "init failed under Always: Pending, it will be retried",
            pod().init("i").app("a"),
            observed().sandbox_ready("10.0.0.2").exited("i", 1),
            none(),
            "Pending",
        ),
        (
            "init done, app running: Running",
            pod().init("i").app("a"),
            observed().sandbox_ready("10.0.0.2").exited("i", 0).running("a"),
            none(),
            "Running",
        ),
        (
            "sidecar running but startup probe pending, no app yet: Pending",
            pod().sidecar("s").app("a").startup_probe("s"),
            observed().sandbox_ready("10.0.0.2").running("s"),
            none(),
            "Pending",
        ),
        (
            "new sandbox, sidecar not started, app ran only in the old one: Pending",
            pod().sidecar("s").app("a").startup_probe("s"),
            observed()
                .sandbox_not_ready()
                .exited("s", 137)
                .exited("a", 137)
                .sandbox_ready("10.0.0.3")
                .running("s"),
            none(),
            "Pending",
        ),
        (
            "sidecar not started again after the app ran: Running",
            pod().sidecar("s").app("a").startup_probe("s"),
            observed().sandbox_ready("10.0.0.2").exited("s", 1).running("a").running("s"),
            none(),
            "Running",
        ),
        (
            "sidecar crashed under Never, app running: Running",
            pod().sidecar("s").app("a").policy("Never"),
            observed().sandbox_ready("10.0.0.2").running("a").exited("s", 1),
            none(),
            "Running",
        ),
        (
            "job with a sidecar killed by SIGKILL: Succeeded (sidecar exit ignored)",
            pod().sidecar("s").app("a").policy("Never"),
            observed().sandbox_ready("10.0.0.2").exited("a", 0).exited("s", 137),
            none(),
            "Succeeded",
        ),
        (
            "OnFailure app exit 0: Succeeded",
            pod().app("a").policy("OnFailure"),
            observed().sandbox_ready("10.0.0.2").exited("a", 0),
            none(),
            "Succeeded",
        ),
        (
            "OnFailure app exit 1: Running (it restarts)",
            pod().app("a").policy("OnFailure"),
            observed().sandbox_ready("10.0.0.2").exited("a", 1),
            none(),
            "Running",
        ),
        (
            "Never app exit 1: Failed",
            pod().app("a").policy("Never"),
            observed().sandbox_ready("10.0.0.2").exited("a", 1),
            none(),
            "Failed",
        ),
        (
            "Never, one app 0 one app 1: Failed",
            pod().app("a").app("b").policy("Never"),
            observed().sandbox_ready("10.0.0.2").exited("a", 0).exited("b", 1),
            none(),
            "Failed",
        ),
        (
            "Always app exit 0: Running (it restarts)",
            pod().app("a"),
            observed().sandbox_ready("10.0.0.2").exited("a", 0),
            none(),
            "Running",
        ),
        (
            "crash-looping app (start error) under Always: Running",
            pod().app("a"),
            observed().sandbox_ready("10.0.0.2").exited("a", 1),
            none().start_error("a", "CrashLoopBackOff", "back-off 10s"),
            "Running",
        ),
        (
            "app created, never started: Pending",
            pod().app("a"),
            observed().sandbox_ready("10.0.0.2").created("a"),
            none(),
            "Pending",
        ),
        (
            "app re-created after a crash: Running (waiting with a last termination)",
            pod().app("a"),
            observed().sandbox_ready("10.0.0.2").exited("a", 1).created("a"),
            none(),
            "Running",
        ),
        (
            "app in unknown state: Pending",
            pod().app("a"),
            observed().sandbox_ready("10.0.0.2").unknown("a"),
            none(),
            "Pending",
        ),
        (
            "new sandbox re-runs init containers: Pending",
            pod().init("i").app("a"),
            observed()
                .sandbox_not_ready()
                .exited("i", 0)
                .exited("a", 137)
                .sandbox_ready("10.0.0.3")
                .running("i"),
            none(),
            "Pending",
        ),
        (
            "terminating, all stopped, Always: Running (no terminal shortcut for static pods)",
            pod().app("a"),
            observed().sandbox_not_ready().exited("a", 137),
            none().terminating(),
            "Running",
        ),
    ];
    for (name, desired, seen, extra, want) in cases {
        let (desired, seen) = (desired.build(), seen.build());
        let status = run(&desired, &seen, &extra);
        assert_eq!(status.phase.as_deref(), Some(want), "{name}");
        // The planner's entry point agrees with compute.
        assert_eq!(phase(&desired.pod, &seen, &extra.probes, None), want, "{name} (phase())");
    }
}

fn previous(phase: &str, reason: Option<&str>) -> PodStatus {
    PodStatus {
        phase: Some(phase.into()),
        reason: reason.map(Into::into),
        message: reason.map(|r| format!("because {r}")),
        ..Default::default()
    }
}

#[test]
fn phase_stickiness() {
    let running = observed().sandbox_ready("10.0.0.2").running("a");
    let failed = observed().sandbox_ready("10.0.0.2").exited("a", 1);
    let cases: [(&str, _, Extra, &str, Option<&str>); 4] = [
        (
            "Succeeded stays Succeeded although an app runs",
            running,
            none().previous(previous("Succeeded", None)),
            "Succeeded",
            None,
        ),
        (
            "Failed stays Failed, its reason kept",
            observed().sandbox_ready("10.0.0.2").exited("a", 0),
            none().previous(previous("Failed", Some("Evicted"))),
            "Failed",
            Some("Evicted"),
        ),
        (
            "Running may become Failed; old reason dropped",
            failed,
            none().previous(previous("Running", Some("X"))),
            "Failed",
            None,
        ),
        (
            "same phase keeps reason",
            observed().sandbox_ready("10.0.0.2").running("a"),
            none().previous(previous("Running", Some("X"))),
            "Running",
            Some("X"),
        ),
    ];
    for (name, seen, extra, want, reason) in cases {
        let desired = pod().app("a").policy("Never").build();
        let seen = seen.build();
        let status = run(&desired, &seen, &extra);
        assert_eq!(status.phase.as_deref(), Some(want), "{name}");
        assert_eq!(status.reason.as_deref(), reason, "{name}");
        assert_eq!(
            phase(&desired.pod, &seen, &extra.probes, extra.previous.as_ref()),
            want,
            "{name} (phase())"
        );
    }
}
