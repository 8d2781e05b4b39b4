//! should_restart (R7.1/R7.2), container kinds, R4.1, QoS, IPs and start time.

use k8s_openapi::api::core::v1::{HostIP, PodIP, PodStatus};

use super::{Extra, ObservedBuilder, at, none, observed, pod, run};
use crate::status::{ContainerKind, container_kinds, pod_initialized, should_restart};

#[test]
fn should_restart_cases() {
    use ContainerKind::{App, Init, Sidecar};
    let instance = |f: fn(ObservedBuilder) -> ObservedBuilder| {
        f(observed().sandbox_ready("10.0.0.2")).build().containers.into_iter().next()
    };
    let running = instance(|o| o.running("c"));
    let created = instance(|o| o.created("c"));
    let unknown = instance(|o| o.unknown("c"));
    let ok = instance(|o| o.exited("c", 0));
    let failed = instance(|o| o.exited("c", 1));
    let oom0 = instance(|o| o.exited("c", 0).with(|c| c.reason = "OOMKilled".into()));
    let cases = [
        ("no instance: start", App, "Never", &None, false, true),
        ("terminating: never", App, "Always", &None, true, false),
        ("terminating sidecar: never", Sidecar, "Always", &failed, true, false),
        ("running: no", App, "Always", &running, false, false),
        ("running sidecar: no", Sidecar, "Always", &running, false, false),
        ("created: yes, even under Never", App, "Never", &created, false, true),
        ("unknown: yes", App, "Never", &unknown, false, true),
        ("app exit 0, Always: yes", App, "Always", &ok, false, true),
        ("app exit 1, Always: yes", App, "Always", &failed, false, true),
        ("app exit 0, OnFailure: no", App, "OnFailure", &ok, false, false),
        ("app exit 1, OnFailure: yes", App, "OnFailure", &failed, false, true),
        ("app exit 0, Never: no", App, "Never", &ok, false, false),
        ("app exit 1, Never: no", App, "Never", &failed, false, false),
        ("sidecar exit 0, Never: yes", Sidecar, "Never", &ok, false, true),
        ("sidecar exit 1, OnFailure: yes", Sidecar, "OnFailure", &failed, false, true),
        ("init exit 0, Always: no", Init, "Always", &ok, false, false),
        ("init exit 1, Always: yes", Init, "Always", &failed, false, true),
        ("init exit 1, OnFailure: yes", Init, "OnFailure", &failed, false, true),
        ("init exit 1, Never: no", Init, "Never", &failed, false, false),
        ("init OOMKilled with exit 0 failed: yes", Init, "Always", &oom0, false, true),
        ("init no instance: start", Init, "Never", &None, false, true),
        ("init created: yes", Init, "Never", &created, false, true),
    ];
    for (name, kind, policy, newest, terminating, want) in cases {
        assert_eq!(should_restart(kind, policy, newest.as_ref(), terminating), want, "{name}");
    }
}

#[test]
fn container_kinds_in_spec_order() {
    let p = pod().init("i").sidecar("s").app("b").app("a").spec_pod();
    let want = vec![
        ("i".to_owned(), ContainerKind::Init),
        ("s".to_owned(), ContainerKind::Sidecar),
        ("b".to_owned(), ContainerKind::App),
        ("a".to_owned(), ContainerKind::App),
    ];
    assert_eq!(container_kinds(&p), want);
}

#[test]
fn pod_initialized_cases() {
    let p = pod().init("i").app("a").spec_pod();
    let up = || observed().sandbox_ready("10.0.0.2");
    let cases = [
        ("nothing yet", up(), false),
        ("init done only", up().exited("i", 0), false),
        ("app created", up().exited("i", 0).created("a"), true),
        ("app running", up().running("a"), true),
        ("app exited only (after a reboot)", up().exited("a", 137), false),
    ];
    for (name, seen, want) in cases {
        assert_eq!(pod_initialized(&p, &seen.build()), want, "{name}");
    }
}

#[test]
fn qos_cases() {
    let guaranteed = [("cpu", "500m"), ("memory", "128Mi")];
    let cases = [
        ("nothing set", pod().app("a"), "BestEffort"),
        (
            "only an unrelated resource",
            pod().app("a").resources("a", &[("ephemeral-storage", "1Gi")], &[]),
            "BestEffort",
        ),
        ("limits equal requests", pod().app("a").resources("a", &guaranteed, &guaranteed), "Guaranteed"),
        (
            "limits only (requests default to them)",
            pod().app("a").resources("a", &[], &guaranteed),
            "Guaranteed",
        ),
        (
            "equal in other units",
            pod().app("a").resources("a", &[("cpu", "0.5"), ("memory", "131072Ki")], &guaranteed),
            "Guaranteed",
        ),
        ("request below limit", pod().app("a").resources("a", &[("cpu", "100m")], &guaranteed), "Burstable"),
        ("memory limit missing", pod().app("a").resources("a", &[], &[("cpu", "1")]), "Burstable"),
        (
            "one container without resources",
            pod().app("a").app("b").resources("a", &[], &guaranteed),
            "Burstable",
        ),
        ("request only", pod().app("a").resources("a", &[("memory", "64Mi")], &[]), "Burstable"),
    ];
    for (name, desired, want) in cases {
        let status = run(&desired.build(), &observed().build(), &none());
        assert_eq!(status.qos_class.as_deref(), Some(want), "{name}");
    }
}

#[test]
fn ip_and_time_cases() {
    let ips = |list: &[&str]| Some(list.iter().map(|ip| PodIP { ip: (*ip).to_owned() }).collect::<Vec<_>>());
    let host = Extra { host_ip: Some("192.168.1.5"), ..none() };
    // (name, pod, runtime, extra, podIP, podIPs, startTime)
    let cases = [
        (
            "ready sandbox",
            pod().app("a"),
            observed().sandbox_ready("10.0.0.2"),
            none(),
            Some("10.0.0.2"),
            ips(&["10.0.0.2"]),
            Some(at(1)),
        ),
        ("no sandbox: no IP, no start time", pod().app("a"), observed(), none(), None, None, None),
        (
            "not ready sandbox: no IP",
            pod().app("a"),
            observed().sandbox_not_ready(),
            none(),
            None,
            None,
            Some(at(1)),
        ),
        (
            "dual stack, IPv6 reported first: IPv4 first",
            pod().app("a"),
            observed().sandbox_ips(&["fd00::2", "10.0.0.2", "10.0.0.3"]),
            none(),
            Some("10.0.0.2"),
            ips(&["10.0.0.2", "fd00::2"]),
            Some(at(1)),
        ),
        (
            "host network: node IP",
            pod().app("a").host_network(),
            observed().sandbox_host(),
            Extra { host_ip: Some("192.168.1.5"), ..none() },
            Some("192.168.1.5"),
            ips(&["192.168.1.5"]),
            Some(at(1)),
        ),
        (
            "start time kept from the previous status",
            pod().app("a"),
            observed().sandbox_not_ready().sandbox_ready("10.0.0.9"),
            Extra { previous: Some(PodStatus { start_time: Some(at(-50)), ..Default::default() }), ..host },
            Some("10.0.0.9"),
            ips(&["10.0.0.9"]),
            Some(at(-50)),
        ),
    ];
    for (name, desired, seen, extra, pod_ip, pod_ips, start) in cases {
        let status = run(&desired.build(), &seen.build(), &extra);
        assert_eq!(
            (status.pod_ip.as_deref(), status.pod_ips, status.start_time),
            (pod_ip, pod_ips, start),
            "{name}"
        );
        let host_ips = extra.host_ip.map(|ip| vec![HostIP { ip: ip.to_owned() }]);
        assert_eq!(
            (status.host_ip.as_deref(), status.host_ips),
            (extra.host_ip, host_ips),
            "{name}: host IP"
        );
    }
}
