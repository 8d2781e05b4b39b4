//! R9.1/R9.2 container statuses and R6.5 started/ready.

use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting, ContainerStatus,
    PodStatus,
};

use super::{Extra, at, image, none, observed, pod, run};

fn terminated(id: &str, code: i32, reason: &str, created: i64) -> ContainerState {
    ContainerState {
        terminated: Some(ContainerStateTerminated {
            exit_code: code,
            reason: Some(reason.into()),
            message: None,
            started_at: Some(at(created + 1)),
            finished_at: Some(at(created + 2)),
            container_id: Some(format!("containerd://{id}")),
            signal: None,
        }),
        ..Default::default()
    }
}

fn with_message(mut state: ContainerState, message: &str) -> ContainerState {
    if let Some(t) = state.terminated.as_mut() {
        t.message = Some(message.into());
    }
    state
}

fn waiting(reason: Option<&str>, message: Option<&str>) -> ContainerState {
    ContainerState {
        waiting: Some(ContainerStateWaiting {
            reason: reason.map(Into::into),
            message: message.map(Into::into),
        }),
        ..Default::default()
    }
}

fn app_status(status: &PodStatus, name: &str) -> ContainerStatus {
    let all =
        status.init_container_statuses.iter().flatten().chain(status.container_statuses.iter().flatten());
    all.into_iter().find(|s| s.name == name).cloned().expect("status for the container")
}

#[test]
fn running_instance_with_a_crashed_predecessor() {
    // Instance 0 (sandbox at 1 s) ran at 2 s and crashed; instance 1 was created at 3 s.
    let seen = observed().sandbox_ready("10.0.0.2").exited("a", 2).running("a").build();
    let status = run(&pod().app("a").build(), &seen, &none());
    let want = ContainerStatus {
        name: "a".into(),
        image: image("a"),
        image_id: format!("registry.local/a@sha256:{:064x}", 1),
        container_id: Some("containerd://a-1".into()),
        restart_count: 1,
        state: Some(ContainerState {
            running: Some(ContainerStateRunning { started_at: Some(at(4)) }),
            ..Default::default()
        }),
        last_state: Some(terminated("a-0", 2, "Error", 2)),
        started: Some(true),
        ready: true,
        ..Default::default()
    };
    assert_eq!(status.container_statuses, Some(vec![want]));
}

#[test]
fn state_cases() {
    let up = || observed().sandbox_ready("10.0.0.2");
    let with_msg = |c: &mut crate::model::ObservedContainer| c.message = "runtime says".into();
    let sha_image = |c: &mut crate::model::ObservedContainer| c.image = format!("sha256:{:064x}", 7);
    let mut msgs = Extra::default();
    msgs.messages.insert("a-0".into(), "bye".into());
    let cases = [
        (
            "no instance, no init containers: ContainerCreating",
            pod().app("a"),
            up(),
            none(),
            waiting(Some("ContainerCreating"), None),
        ),
        (
            "no instance, pod has init containers: PodInitializing",
            pod().init("i").app("a"),
            up(),
            none(),
            waiting(Some("PodInitializing"), None),
        ),
        ("CREATED: waiting without a reason", pod().app("a"), up().created("a"), none(), waiting(None, None)),
        ("UNKNOWN: waiting without a reason", pod().app("a"), up().unknown("a"), none(), waiting(None, None)),
        (
            "OOMKilled passes through",
            pod().app("a"),
            up().exited("a", 137).with(|c| c.reason = "OOMKilled".into()),
            none(),
            terminated("a-0", 137, "OOMKilled", 2),
        ),
        (
            "runtime and termination messages joined by \": \"",
            pod().app("a"),
            up().exited("a", 1).with(with_msg),
            Extra { messages: msgs.messages.clone(), ..none() },
            with_message(terminated("a-0", 1, "Error", 2), "runtime says: bye"),
        ),
        (
            "termination message alone",
            pod().app("a"),
            up().exited("a", 1),
            Extra { messages: msgs.messages.clone(), ..none() },
            with_message(terminated("a-0", 1, "Error", 2), "bye"),
        ),
        (
            "start error on a crashed app: waiting with the error's reason",
            pod().app("a"),
            up().exited("a", 1),
            none().start_error("a", "CrashLoopBackOff", "back-off 10s restarting failed container"),
            waiting(Some("CrashLoopBackOff"), Some("back-off 10s restarting failed container")),
        ),
        (
            "start error with no instance",
            pod().app("a"),
            up(),
            none().start_error("a", "ErrImagePull", "not found"),
            waiting(Some("ErrImagePull"), Some("not found")),
        ),
        (
            "start error ignored when the container will not restart (Never)",
            pod().app("a").policy("Never"),
            up().exited("a", 1),
            none().start_error("a", "CrashLoopBackOff", "x"),
            terminated("a-0", 1, "Error", 2),
        ),
        (
            "start error ignored while terminating",
            pod().app("a"),
            up().exited("a", 1),
            none().start_error("a", "CrashLoopBackOff", "x").terminating(),
            terminated("a-0", 1, "Error", 2),
        ),
        (
            "start error ignored for a completed init container",
            pod().init("a").app("b"),
            up().exited("a", 0),
            none().start_error("a", "RunContainerError", "x"),
            terminated("a-0", 0, "Completed", 2),
        ),
        (
            "image ID from the runtime shows as the spec image",
            pod().app("a"),
            up().exited("a", 0).with(sha_image),
            none(),
            terminated("a-0", 0, "Completed", 2),
        ),
    ];
    for (name, desired, seen, extra, want) in cases {
        let status = run(&desired.build(), &seen.build(), &extra);
        let got = app_status(&status, "a");
        assert_eq!(got.state, Some(want), "{name}");
        assert_eq!(got.image, image("a"), "{name}: image");
    }
}

#[test]
fn start_error_moves_terminated_state_to_last_state() {
    let seen = observed().sandbox_ready("10.0.0.2").exited("a", 1).exited("a", 2).build();
    let extra = none().start_error("a", "CrashLoopBackOff", "back-off 20s");
    let got = app_status(&run(&pod().app("a").build(), &seen, &extra), "a");
    assert_eq!(got.state, Some(waiting(Some("CrashLoopBackOff"), Some("back-off 20s"))));
    // The newest instance's termination replaces the second-newest's in lastState.
    assert_eq!(got.last_state, Some(terminated("a-1", 2, "Error", 3)));
    assert_eq!((got.restart_count, got.ready, got.started), (1, false, Some(false)));
}

#[test]
fn ordering() {
    let desired = pod().init("z").sidecar("s").init("b").app("c").app("a").app("b2").build();
    let status = run(&desired, &observed().build(), &none());
    let names = |list: &Option<Vec<ContainerStatus>>| {
        list.iter().flatten().map(|s| s.name.clone()).collect::<Vec<_>>()
    };
    assert_eq!(names(&status.init_container_statuses), ["z", "s", "b"], "init: spec order");
    assert_eq!(names(&status.container_statuses), ["a", "b2", "c"], "apps: by name");
}

#[test]
fn started_ready_cases() {
    let up = || observed().sandbox_ready("10.0.0.2");
    // (name, pod, runtime, probes, container, (started, ready))
    let cases = [
        ("no probes, running", pod().app("a"), up().running("a"), none(), "a", (true, true)),
        (
            "startup probe without result",
            pod().app("a").startup_probe("a"),
            up().running("a"),
            none(),
            "a",
            (false, false),
        ),
        (
            "startup probe failed",
            pod().app("a").startup_probe("a"),
            up().running("a"),
            none().probe("a-0", Some(false), None),
            "a",
            (false, false),
        ),
        (
            "startup probe succeeded",
            pod().app("a").startup_probe("a"),
            up().running("a"),
            none().probe("a-0", Some(true), None),
            "a",
            (true, true),
        ),
        (
            "readiness probe without result",
            pod().app("a").readiness_probe("a"),
            up().running("a"),
            none(),
            "a",
            (true, false),
        ),
        (
            "readiness ready",
            pod().app("a").readiness_probe("a"),
            up().running("a"),
            none().probe("a-0", None, Some(true)),
            "a",
            (true, true),
        ),
        (
            "readiness false",
            pod().app("a").readiness_probe("a"),
            up().running("a"),
            none().probe("a-0", None, Some(false)),
            "a",
            (true, false),
        ),
        (
            "ready needs started",
            pod().app("a").startup_probe("a").readiness_probe("a"),
            up().running("a"),
            none().probe("a-0", None, Some(true)),
            "a",
            (false, false),
        ),
        (
            "old instance's result ignored",
            pod().app("a").readiness_probe("a"),
            up().exited("a", 1).running("a"),
            none().probe("a-0", None, Some(true)),
            "a",
            (true, false),
        ),
        ("exited app", pod().app("a"), up().exited("a", 0), none(), "a", (false, false)),
        (
            "init container done: ready",
            pod().init("i").app("a"),
            up().exited("i", 0),
            none(),
            "i",
            (false, true),
        ),
        (
            "init container failed: not ready",
            pod().init("i").app("a"),
            up().exited("i", 1),
            none(),
            "i",
            (false, false),
        ),
        (
            "init container running: not ready",
            pod().init("i").app("a"),
            up().running("i"),
            none(),
            "i",
            (true, false),
        ),
        (
            "sidecar running, readiness ready",
            pod().sidecar("s").app("a").readiness_probe("s"),
            up().running("s"),
            none().probe("s-0", None, Some(true)),
            "s",
            (true, true),
        ),
    ];
    for (name, desired, seen, extra, container, want) in cases {
        let got = app_status(&run(&desired.build(), &seen.build(), &extra), container);
        assert_eq!((got.started, got.ready), (Some(want.0), want.1), "{name}");
    }
}

/// A previous status with one container in `state` and restart count 4.
fn previous_with(name: &str, state: ContainerState) -> PodStatus {
    PodStatus {
        phase: Some("Running".into()),
        container_statuses: Some(vec![ContainerStatus {
            name: name.into(),
            image: image(name),
            restart_count: 4,
            state: Some(state),
            ..Default::default()
        }]),
        ..Default::default()
    }
}

#[test]
fn previous_status_cases() {
    let running = ContainerState {
        running: Some(ContainerStateRunning { started_at: Some(at(2)) }),
        ..Default::default()
    };
    let lost = |msg: &str| ContainerState {
        terminated: Some(ContainerStateTerminated {
            exit_code: 137,
            reason: Some("ContainerStatusUnknown".into()),
            message: Some(msg.into()),
            ..Default::default()
        }),
        ..Default::default()
    };
    let vanished_msg =
        "The container could not be located when the pod was deleted.  The container used to be Running";
    let up = || observed().sandbox_ready("10.0.0.2");
    // (name, runtime, extra, want state, want lastState, want restartCount)
    let cases = [
        (
            "running container vanished: waiting, lastState unknown, restart counted",
            up(),
            none().previous(previous_with("a", running.clone())),
            waiting(Some("ContainerCreating"), None),
            Some(lost(vanished_msg)),
            5,
        ),
        (
            "vanished while terminating: restart not counted",
            up(),
            none().previous(previous_with("a", running.clone())).terminating(),
            waiting(Some("ContainerCreating"), None),
            Some(lost(vanished_msg)),
            4,
        ),
        (
            "running container now UNKNOWN: terminated, restart counted",
            up().unknown("a"),
            none().previous(previous_with("a", running.clone())),
            lost("The container could not be located when the pod was terminated"),
            None,
            5,
        ),
        (
            "terminated status kept when the instance is gone",
            up(),
            none().previous(previous_with("a", terminated("a-3", 0, "Completed", 9))),
            terminated("a-3", 0, "Completed", 9),
            None,
            4,
        ),
    ];
    for (name, seen, extra, state, last, restarts) in cases {
        let got = app_status(&run(&pod().app("a").build(), &seen.build(), &extra), "a");
        assert_eq!((got.state, got.last_state, got.restart_count), (Some(state), last, restarts), "{name}");
    }
}

#[test]
fn pruned_init_container_counts_as_completed() {
    let seen = observed().sandbox_ready("10.0.0.2").running("a").build();
    let got = app_status(&run(&pod().init("i").app("a").build(), &seen, &none()), "i");
    let t = got.state.and_then(|s| s.terminated).expect("terminated");
    assert_eq!((t.exit_code, t.reason.as_deref()), (0, Some("Completed")));
    assert!(got.ready);
}

/// A previous status for container "a" whose current instance is `id` in `state`, with
/// `last` as its lastState.
fn previous_instance(id: &str, state: ContainerState, last: Option<ContainerState>) -> PodStatus {
    let mut status = previous_with("a", state);
    if let Some(c) = status.container_statuses.as_mut().and_then(|v| v.first_mut()) {
        c.container_id = Some(format!("containerd://{id}"));
        c.last_state = last;
    }
    status
}

#[test]
fn last_state_survives_garbage_collection_of_the_older_instance() {
    let running_a1 = ContainerState {
        running: Some(ContainerStateRunning { started_at: Some(at(3)) }),
        ..Default::default()
    };
    let a0_failed = terminated("a-0", 1, "Error", 1);
    // The runtime holds only instance a-1 (a-0 was removed); `observed()` names the second
    // instance of "a" a-1, so one exited/running instance is added after a placeholder.
    let only_a1 = |exit: Option<i32>| {
        let seen = observed().sandbox_ready("10.0.0.2").exited("a", 1);
        let seen = match exit {
            Some(code) => seen.exited("a", code),
            None => seen.running("a"),
        };
        let mut built = seen.build();
        built.containers.retain(|c| c.id == "a-1");
        built
    };
    // (name, runtime, previous status, want lastState)
    let cases = [
        (
            "same instance as before: its lastState is carried (OnFailure: exit 1, then exit 0)",
            only_a1(Some(0)),
            Some(previous_instance("a-1", running_a1.clone(), Some(a0_failed.clone()))),
            Some(a0_failed.clone()),
        ),
        (
            "a new instance after a terminated one that is gone: that termination is the last state",
            only_a1(None),
            Some(previous_instance("a-0", a0_failed.clone(), None)),
            Some(a0_failed.clone()),
        ),
        (
            "a new instance after a running one that is gone: nothing is made up",
            only_a1(None),
            Some(previous_instance("a-0", running_a1.clone(), None)),
            None,
        ),
        ("no previous status: no lastState", only_a1(None), None, None),
    ];
    for (name, seen, previous, want) in cases {
        let extra = match previous {
            Some(p) => none().previous(p),
            None => none(),
        };
        let got = app_status(&run(&pod().policy("OnFailure").app("a").build(), &seen, &extra), "a");
        assert_eq!(got.last_state, want, "{name}");
        assert_eq!(got.container_id.as_deref(), Some("containerd://a-1"), "{name}");
    }
}
