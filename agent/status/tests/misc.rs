//! should_restart (R7.1/R7.2), container kinds, R4.1, QoS, IPs and start time.

use k8s_openapi::api::core::v1::{
    Container, ContainerRestartRule, ContainerRestartRuleOnExitCodes, HostIP, PodIP, PodStatus,
};

use super::{Extra, ObservedBuilder, at, none, observed, pod, run};
use crate::podspec::{Kind, container_kinds};
use crate::status::{
    container_should_restart, pod_initialized, restart_all_rule_matches, restart_without_exit_code,
    should_restart,
};

#[test]
fn should_restart_cases() {
    use Kind::{App, Init, Sidecar};
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
    let plain = Container { name: "c".into(), ..Default::default() };
    for (name, kind, policy, newest, terminating, want) in cases {
        assert_eq!(should_restart(&plain, kind, policy, newest.as_ref(), terminating), want, "{name}");
    }
}

/// KEP-5307: a container `restartPolicy` overrides the pod's, and its first matching rule with
/// action Restart restarts it (upstream `ContainerShouldRestart`, `IsContainerRestartable`).
#[test]
fn container_restart_rules_cases() {
    let c = |policy: Option<&str>, rules: &[(&str, &str, &[i32])]| Container {
        name: "c".into(),
        restart_policy: policy.map(str::to_string),
        restart_policy_rules: (!rules.is_empty()).then(|| {
            rules
                .iter()
                .map(|(action, op, values)| ContainerRestartRule {
                    action: action.to_string(),
                    exit_codes: Some(ContainerRestartRuleOnExitCodes {
                        operator: op.to_string(),
                        values: Some(values.to_vec()),
                    }),
                })
                .collect()
        }),
        ..Default::default()
    };
    let never_42 = c(Some("Never"), &[("Restart", "In", &[42])]);
    let never_not_0 = c(Some("Never"), &[("Restart", "NotIn", &[0])]);
    let first_wins = c(Some("Never"), &[("RestartAllContainers", "In", &[3]), ("Restart", "In", &[3, 4])]);
    let bad_operator = c(Some("Never"), &[("Restart", "Maybe", &[5])]);
    let on_failure_0 = c(Some("OnFailure"), &[("Restart", "In", &[0])]);
    let rules_without_policy = Container { restart_policy: None, ..never_42.clone() };
    let cases: [(&str, &Container, &str, i32, bool); 16] = [
        ("no own policy: pod Always", &c(None, &[]), "Always", 0, true),
        ("no own policy: pod OnFailure, exit 0", &c(None, &[]), "OnFailure", 0, false),
        ("no own policy: pod Never", &c(None, &[]), "Never", 1, false),
        ("own Never overrides pod Always", &c(Some("Never"), &[]), "Always", 1, false),
        ("own Always overrides pod Never", &c(Some("Always"), &[]), "Never", 0, true),
        ("own OnFailure in a Never pod, exit 2", &c(Some("OnFailure"), &[]), "Never", 2, true),
        ("own OnFailure in an Always pod, exit 0", &c(Some("OnFailure"), &[]), "Always", 0, false),
        ("Never + In [42], exit 42", &never_42, "Never", 42, true),
        ("Never + In [42], exit 1", &never_42, "Never", 1, false),
        ("Never + NotIn [0], exit 7", &never_not_0, "Never", 7, true),
        ("Never + NotIn [0], exit 0", &never_not_0, "Never", 0, false),
        ("the first matching rule decides (not Restart)", &first_wins, "Always", 3, false),
        ("a later rule matches when the first does not", &first_wins, "Never", 4, true),
        ("an unknown operator never matches", &bad_operator, "Always", 5, false),
        ("OnFailure + In [0] acts like Always", &on_failure_0, "Never", 0, true),
        ("rules without an own policy are not read", &rules_without_policy, "Never", 42, false),
    ];
    for (name, spec, pod_policy, code, want) in cases {
        assert_eq!(container_should_restart(spec, pod_policy, code), want, "{name}");
    }
    // No exit code (probe failure, unknown state): the container's own policy alone.
    assert!(!restart_without_exit_code(&never_42, "Always"));
    assert!(restart_without_exit_code(&c(Some("OnFailure"), &[]), "Never"));
    assert!(restart_without_exit_code(&c(None, &[]), "OnFailure"));
    // RestartAllContainers: only as the first matching rule.
    assert!(restart_all_rule_matches(&first_wins, 3));
    assert!(!restart_all_rule_matches(&first_wins, 4));

    // Through should_restart: an exited regular init container restarts on a Restart rule
    // even in a Never pod, but not when it succeeded.
    let exited =
        |code| observed().sandbox_ready("10.0.0.2").exited("c", code).build().containers.into_iter().next();
    assert!(should_restart(&never_42, Kind::Init, "Never", exited(42).as_ref(), false));
    assert!(!should_restart(&on_failure_0, Kind::Init, "Never", exited(0).as_ref(), false));
    assert!(should_restart(&never_42, Kind::App, "Never", exited(42).as_ref(), false));
    assert!(!should_restart(&never_42, Kind::App, "Always", exited(0).as_ref(), false));
}

#[test]
fn container_kinds_in_spec_order() {
    let p = pod().init("i").sidecar("s").app("b").app("a").spec_pod();
    let want = vec![
        ("i".to_owned(), Kind::Init),
        ("s".to_owned(), Kind::Sidecar),
        ("b".to_owned(), Kind::App),
        ("a".to_owned(), Kind::App),
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
