use super::*;
use crate::model::ObservedContainer;

fn pod(yaml: &str) -> Pod {
    serde_json::from_value(serde_yaml_ng::from_str::<serde_json::Value>(yaml).expect("yaml")).expect("pod")
}

/// A pod with app containers `a` and `b` of the given (requests cpu, limits cpu, limits memory).
fn two(a: (&str, &str, &str), b: (&str, &str, &str), policy_b: &str) -> Pod {
    pod(&format!(
        "
spec:
  containers:
  - name: a
    resources: {{requests: {{cpu: {}, memory: 16Mi}}, limits: {{cpu: {}, memory: {}}}}}
  - name: b
    resizePolicy: [{{resourceName: memory, restartPolicy: {policy_b}}}]
    resources: {{requests: {{cpu: {}, memory: 16Mi}}, limits: {{cpu: {}, memory: {}}}}}
",
        a.0, a.1, a.2, b.0, b.1, b.2
    ))
}

fn running(name: &str, id: &str) -> ObservedContainer {
    ObservedContainer {
        id: id.into(),
        name: name.into(),
        state: ContainerState::Running,
        ..Default::default()
    }
}

fn observed() -> ObservedPod {
    ObservedPod { containers: vec![running("a", "ia"), running("b", "ib")], ..Default::default() }
}

const MI: i64 = 1024 * 1024;

fn amounts(cpu_request: i64, cpu_limit: i64, memory_limit: i64) -> Amounts {
    Amounts { cpu_request, cpu_limit, memory_request: 0, memory_limit }
}

#[test]
fn actions_follow_the_resize_policy_and_put_decreases_first() {
    let actual = BTreeMap::from([
        ("ia".to_string(), amounts(100, 200, 64 * MI)),
        ("ib".to_string(), amounts(100, 200, 64 * MI)),
    ]);
    let names = |v: &[ContainerUpdate]| v.iter().map(|u| u.name.clone()).collect::<Vec<_>>();
    // (what, allocated pod, restarts, memory updates in order, cpu updates in order)
    let cases = [
        (
            "unchanged",
            two(("100m", "200m", "64Mi"), ("100m", "200m", "64Mi"), "NotRequired"),
            vec![],
            vec![],
            vec![],
        ),
        (
            "b grows, a shrinks: a's decrease first",
            two(("100m", "200m", "32Mi"), ("100m", "200m", "96Mi"), "NotRequired"),
            vec![],
            vec!["a", "b"],
            vec![],
        ),
        (
            "a grows, b shrinks: b's decrease first",
            two(("100m", "300m", "96Mi"), ("100m", "100m", "32Mi"), "NotRequired"),
            vec![],
            vec!["b", "a"],
            vec!["b", "a"],
        ),
        (
            "b's memory asks for a restart; its cpu alone does not",
            two(("100m", "200m", "64Mi"), ("100m", "200m", "96Mi"), "RestartContainer"),
            vec!["b"],
            vec![],
            vec![],
        ),
        (
            "cpu only under a memory restart policy: updated in place",
            two(("100m", "200m", "64Mi"), ("200m", "200m", "64Mi"), "RestartContainer"),
            vec![],
            vec![],
            vec!["b"],
        ),
    ];
    for (what, p, restart, memory, cpu) in cases {
        let got = actions(&p, &observed(), &actual);
        let restarted: Vec<&str> = got.restart.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(restarted, restart, "{what}: restarts");
        assert_eq!(names(&got.memory), memory, "{what}: memory");
        assert_eq!(names(&got.cpu), cpu, "{what}: cpu");
    }
}

#[test]
fn actions_treat_values_under_the_kernel_floors_as_equal_and_skip_unreported_containers() {
    let p = pod("spec: {containers: [{name: a, resources: {requests: {cpu: 1m}, limits: {cpu: 5m}}}]}");
    let o = ObservedPod { containers: vec![running("a", "ia")], ..Default::default() };
    // 1m is 2 shares (read back as 2m) and 5m of quota is the 10m floor: no change.
    let actual = BTreeMap::from([("ia".to_string(), amounts(2, 10, 0))]);
    assert!(actions(&p, &o, &actual).is_empty());
    // Nothing reported for the instance: left alone, as upstream.
    assert!(actions(&p, &o, &BTreeMap::new()).is_empty());
}

#[test]
fn runtime_values_read_back_as_the_kubelet_reads_them() {
    let l = |shares, quota, period, memory| api::LinuxContainerResources {
        cpu_shares: shares,
        cpu_quota: quota,
        cpu_period: period,
        memory_limit_in_bytes: memory,
        ..Default::default()
    };
    let cases = [
        (l(102, 20_000, 100_000, 64 * MI), amounts(100, 200, 64 * MI)),
        (l(1024, 0, 0, 0), amounts(1000, 0, 0)),
        (l(2, -1, 100_000, 0), amounts(2, 0, 0)),
        (l(0, 0, 0, 0), amounts(0, 0, 0)),
    ];
    for (runtime, want) in cases {
        assert_eq!(Amounts::from_runtime(&runtime), want, "{runtime:?}");
        if want.cpu_request > 2 {
            // And what crilet writes reads back as what was asked.
            let written = linux_resources(want);
            assert_eq!(Amounts::from_runtime(&written).cpu_request, want.cpu_request);
        }
    }
}

#[test]
fn the_pod_cgroup_is_limited_only_when_every_container_is() {
    let cases = [
        (
            "both limited",
            "spec: {containers: [{name: a, resources: {requests: {cpu: 100m}, limits: {cpu: 200m, memory: 64Mi}}}, {name: b, resources: {limits: {cpu: 100m, memory: 32Mi}}}]}",
            PodCgroup { memory_limit: Some(96 * MI), cpu_quota: Some(30_000), cpu_shares: 204 },
        ),
        (
            "one without limits",
            "spec: {containers: [{name: a, resources: {limits: {cpu: 200m, memory: 64Mi}}}, {name: b, resources: {requests: {cpu: 100m}}}]}",
            PodCgroup { memory_limit: None, cpu_quota: None, cpu_shares: 307 },
        ),
        (
            "a big regular init container counts, a sidecar adds",
            "spec: {initContainers: [{name: side, restartPolicy: Always, resources: {limits: {cpu: 100m, memory: 16Mi}}}, {name: init, resources: {limits: {cpu: 1, memory: 256Mi}}}], containers: [{name: a, resources: {limits: {cpu: 200m, memory: 64Mi}}}]}",
            PodCgroup { memory_limit: Some(272 * MI), cpu_quota: Some(110_000), cpu_shares: 1126 },
        ),
        (
            "best effort",
            "spec: {containers: [{name: a}]}",
            PodCgroup { memory_limit: None, cpu_quota: None, cpu_shares: 2 },
        ),
    ];
    for (what, yaml, want) in cases {
        assert_eq!(pod_cgroup(&pod(yaml)), want, "{what}");
    }
}

#[test]
fn decide_accepts_defers_and_refuses_as_the_kubelet() {
    let room = Room { cpu_milli: 2000, memory: 4096 * MI };
    let burstable = |cpu: &str| {
        pod(&format!("spec: {{containers: [{{name: a, resources: {{requests: {{cpu: {cpu}}}}}}}]}}"))
    };
    let now = burstable("500m");
    let cases = [
        ("same", burstable("500m"), (0, 0), "Unchanged"),
        ("fits", burstable("1"), (500, 0), "Accept"),
        ("not beside the others", burstable("1500m"), (1000, 0), "Deferred"),
        ("never", burstable("3"), (0, 0), "Infeasible"),
        (
            "a stand-in's older spec (its manifest broken): what runs is kept",
            pod(
                "metadata: {annotations: {crilet.io/stand-in: 'true'}}\nspec: {containers: [{name: a, resources: {requests: {cpu: '1'}}}]}",
            ),
            (500, 0),
            "Unchanged",
        ),
        (
            "QoS would change",
            pod(
                "spec: {containers: [{name: a, resources: {requests: {cpu: 500m, memory: 1Mi}, limits: {cpu: 500m, memory: 1Mi}}}]}",
            ),
            (0, 0),
            "Infeasible",
        ),
    ];
    for (what, spec, others, want) in cases {
        let got = decide(&spec, &now, room, others);
        let kind = match &got {
            Decision::Unchanged => "Unchanged",
            Decision::Accept => "Accept",
            Decision::Deferred(_) => "Deferred",
            Decision::Infeasible(_) => "Infeasible",
        };
        assert_eq!(kind, want, "{what}: {got:?}");
    }
    let Decision::Deferred(m) = decide(&burstable("1500m"), &now, room, (1000, 0)) else {
        panic!("deferred")
    };
    assert_eq!(m, "Node didn't have enough resource: cpu, requested: 1500, used: 1000, capacity: 2000");
}

#[test]
fn allocation_applies_to_the_pod_it_runs_and_reports_changes() {
    let spec = two(("100m", "200m", "64Mi"), ("100m", "200m", "64Mi"), "NotRequired");
    let alloc = Allocation::of(&spec);
    let resized = two(("100m", "400m", "64Mi"), ("100m", "200m", "64Mi"), "NotRequired");
    assert_eq!(alloc.changed(&resized), vec!["a".to_string()]);
    assert!(alloc.changed(&spec).is_empty());
    // The resized spec runs with the allocation until it is accepted.
    let running = alloc.apply(&resized);
    assert!(alloc.changed(&running).is_empty());
}

#[test]
fn quantities_print_as_the_kubelet_prints_them() {
    for (milli, want) in [(100, "100m"), (1000, "1"), (1500, "1500m"), (2000, "2")] {
        assert_eq!(cpu_quantity(milli).0, want);
    }
    for (bytes, want) in [(64 * MI, "64Mi"), (1024, "1Ki"), (1000, "1000"), (3 * 1024 * MI, "3Gi")] {
        assert_eq!(memory_quantity(bytes).0, want);
    }
}

#[test]
fn status_resources_are_the_runtimes_values_over_the_allocation() {
    let req = |yaml: &str| -> ResourceRequirements {
        serde_json::from_value(serde_yaml_ng::from_str::<serde_json::Value>(yaml).expect("yaml"))
            .expect("resources")
    };
    // (what, allocated, runtime, status)
    let cases = [
        (
            "the runtime's values replace cpu and memory",
            "{requests: {cpu: 100m, memory: 32Mi, ephemeral-storage: 1Gi}, limits: {cpu: 200m, memory: 64Mi}}",
            Some(amounts(100, 300, 96 * MI)),
            "{requests: {cpu: 100m, memory: 32Mi, ephemeral-storage: 1Gi}, limits: {cpu: 300m, memory: 96Mi}}",
        ),
        (
            "equivalents under the floors keep the allocated spelling",
            "{requests: {cpu: 1m}, limits: {cpu: 5m}}",
            Some(amounts(2, 10, 0)),
            "{requests: {cpu: 1m}, limits: {cpu: 5m}}",
        ),
        ("nothing reported: the allocation", "{requests: {cpu: 100m}}", None, "{requests: {cpu: 100m}}"),
        (
            "no requests: none added",
            "{limits: {memory: 64Mi}}",
            Some(amounts(2, 0, 64 * MI)),
            "{limits: {memory: 64Mi}}",
        ),
    ];
    for (what, allocated, runtime, want) in cases {
        let got = status_resources(&req(allocated), runtime);
        assert_eq!(
            serde_json::to_value(&got).expect("json"),
            serde_json::to_value(req(want)).expect("json"),
            "{what}"
        );
    }
}
