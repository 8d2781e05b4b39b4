//! Table tests for the planner: each case is a healthy base pod plus the difference it tests.

use k8s_openapi::api::core::v1::{Container, ExecAction, Pod, PodSpec, Probe};

use std::collections::BTreeSet;

use super::*;
use crate::model::{ObservedContainer, ObservedPod, ObservedSandbox, SandboxState};
use crate::pod::hash::container_hash;

const IMG: &str = "img:1";

fn container(name: &str) -> Container {
    Container { name: name.into(), image: Some(IMG.into()), ..Default::default() }
}

struct PodB(Pod);
fn pod() -> PodB {
    PodB(Pod { spec: Some(PodSpec::default()), ..Default::default() })
}
impl PodB {
    fn spec(&mut self) -> &mut PodSpec {
        self.0.spec.as_mut().expect("spec")
    }
    fn app(mut self, n: &str) -> Self {
        self.spec().containers.push(container(n));
        self
    }
    fn init(mut self, n: &str) -> Self {
        self.spec().init_containers.get_or_insert_with(Vec::new).push(container(n));
        self
    }
    fn sidecar(mut self, n: &str) -> Self {
        let mut c = container(n);
        c.restart_policy = Some("Always".into());
        self.spec().init_containers.get_or_insert_with(Vec::new).push(c);
        self
    }
    fn ephemeral(mut self, n: &str) -> Self {
        let ec = k8s_openapi::api::core::v1::EphemeralContainer {
            name: n.into(),
            image: Some(IMG.into()),
            ..Default::default()
        };
        self.spec().ephemeral_containers.get_or_insert_with(Vec::new).push(ec);
        self
    }
    fn startup_probe(mut self, n: &str) -> Self {
        let p = Probe { exec: Some(ExecAction { command: Some(vec!["true".into()]) }), ..Default::default() };
        let s = self.spec();
        for c in s.containers.iter_mut().chain(s.init_containers.iter_mut().flatten()) {
            if c.name == n {
                c.startup_probe = Some(p.clone());
            }
        }
        self
    }
    fn stand_in(mut self) -> Self {
        let a = self.0.metadata.annotations.get_or_insert_default();
        a.insert(crate::model::keys::STAND_IN.into(), "true".into());
        self
    }
    fn image(mut self, n: &str, image: &str) -> Self {
        let s = self.spec();
        for c in s.containers.iter_mut().chain(s.init_containers.iter_mut().flatten()) {
            if c.name == n {
                c.image = Some(image.into());
            }
        }
        self
    }
    fn policy(mut self, p: &str) -> Self {
        self.spec().restart_policy = Some(p.into());
        self
    }
    /// KEP-5307: container `n`'s own restartPolicy and `Restart In [codes]` rule (none if empty).
    fn own(self, n: &str, policy: &str, restart_on: &[i32]) -> Self {
        self.own_rule(n, policy, "Restart", restart_on)
    }
    /// Container `n`'s own restartPolicy and one rule `action In [codes]` (none if empty).
    fn own_rule(mut self, n: &str, policy: &str, action: &str, codes: &[i32]) -> Self {
        let s = self.spec();
        for c in s.containers.iter_mut().chain(s.init_containers.iter_mut().flatten()) {
            if c.name == n {
                c.restart_policy = Some(policy.into());
                c.restart_policy_rules = (!codes.is_empty()).then(|| {
                    vec![k8s_openapi::api::core::v1::ContainerRestartRule {
                        action: action.into(),
                        exit_codes: Some(k8s_openapi::api::core::v1::ContainerRestartRuleOnExitCodes {
                            operator: "In".into(),
                            values: Some(codes.to_vec()),
                        }),
                    }]
                });
            }
        }
        self
    }
}

struct ObsB(ObservedPod, i64);
fn observed() -> ObsB {
    ObsB(ObservedPod::default(), 100)
}
impl ObsB {
    fn sandbox(mut self, state: SandboxState, ip: &str, attempt: u32) -> Self {
        self.1 += 1;
        self.0.sandboxes.insert(
            0,
            ObservedSandbox {
                id: format!("sb{attempt}"),
                attempt,
                state,
                created_at: self.1,
                ips: if ip.is_empty() { vec![] } else { vec![ip.into()] },
                host_network: false,
                labels: Default::default(),
                annotations: Default::default(),
            },
        );
        self
    }
    fn ready(self) -> Self {
        self.sandbox(SandboxState::Ready, "10.0.0.2", 0)
    }
    fn add(mut self, name: &str, state: ContainerState, exit: i32) -> Self {
        self.1 += 1;
        let n = self.0.containers.iter().filter(|c| c.name == name).count();
        self.0.containers.insert(
            0,
            ObservedContainer {
                id: format!("{name}-{n}"),
                sandbox_id: "sb0".into(),
                name: name.into(),
                attempt: n as u32,
                state,
                created_at: self.1,
                started_at: self.1,
                finished_at: if state == ContainerState::Exited { self.1 + 1 } else { 0 },
                exit_code: exit,
                reason: String::new(),
                message: String::new(),
                image: IMG.into(),
                image_ref: String::new(),
                hash: container_hash(&container(name)),
                restart_count: n as u32,
                log_path: String::new(),
                annotations: Default::default(),
                stop_signal: None,
                resources: None,
                user: None,
            },
        );
        self
    }
    fn running(self, n: &str) -> Self {
        self.add(n, ContainerState::Running, 0)
    }
    fn exited(self, n: &str, code: i32) -> Self {
        self.add(n, ContainerState::Exited, code)
    }
    fn unknown(self, n: &str) -> Self {
        self.add(n, ContainerState::Unknown, 0)
    }
    fn created(self, n: &str) -> Self {
        self.add(n, ContainerState::Created, 0)
    }
}

#[derive(Default)]
struct Want {
    kill_pod: Option<PodKillReason>,
    sandbox: Option<u32>,
    kills: Vec<(&'static str, KillReason)>,
    init: Vec<&'static str>,
    app: Vec<&'static str>,
    /// RestartAllContainers: (instance id, kill first), in order.
    reset: Vec<(&'static str, bool)>,
    ephemeral: Vec<&'static str>,
}

fn check(name: &str, p: &PodB, o: &ObsB, probes: &ProbeResults, want: Want) {
    let got = plan(&p.0, &o.0, probes);
    assert_eq!(got.kill_pod, want.kill_pod, "{name}: kill_pod");
    assert_eq!(got.create_sandbox, want.sandbox, "{name}: create_sandbox");
    let kills: Vec<(String, KillReason)> = got.kills.iter().map(|k| (k.id.clone(), k.reason)).collect();
    let want_kills: Vec<(String, KillReason)> = want.kills.iter().map(|(i, r)| (i.to_string(), *r)).collect();
    assert_eq!(kills, want_kills, "{name}: kills");
    assert_eq!(got.init_to_start, want.init, "{name}: init_to_start");
    assert_eq!(got.app_to_start, want.app, "{name}: app_to_start");
    let reset: Vec<(String, bool)> = got.reset.iter().map(|r| (r.id.clone(), r.kill)).collect();
    let want_reset: Vec<(String, bool)> = want.reset.iter().map(|(i, k)| (i.to_string(), *k)).collect();
    assert_eq!(reset, want_reset, "{name}: reset");
    assert_eq!(got.ephemeral_to_start, want.ephemeral, "{name}: ephemeral_to_start");
}

#[test]
fn sandbox_and_app_cases() {
    let none = ProbeResults::default();
    let cases: Vec<(&str, PodB, ObsB, Want)> = vec![
        (
            "new pod: sandbox attempt 0, then all apps",
            pod().app("a").app("b"),
            observed(),
            Want { sandbox: Some(0), app: vec!["a", "b"], ..Default::default() },
        ),
        ("steady state: nothing to do", pod().app("a"), observed().ready().running("a"), Want::default()),
        (
            "new pod with init: sandbox, then the first init only",
            pod().init("i").app("a"),
            observed(),
            Want { sandbox: Some(0), init: vec!["i"], ..Default::default() },
        ),
        (
            "sandbox not ready: kill pod, new sandbox with next attempt",
            pod().app("a"),
            observed().sandbox(SandboxState::NotReady, "10.0.0.2", 0).exited("a", 137),
            Want {
                kill_pod: Some(PodKillReason::SandboxChanged),
                sandbox: Some(1),
                app: vec!["a"],
                ..Default::default()
            },
        ),
        (
            "sandbox without IP is re-created",
            pod().app("a"),
            observed().sandbox(SandboxState::Ready, "", 0),
            Want {
                kill_pod: Some(PodKillReason::SandboxChanged),
                sandbox: Some(1),
                app: vec!["a"],
                ..Default::default()
            },
        ),
        (
            "two ready sandboxes: new one",
            pod().app("a"),
            observed().ready().sandbox(SandboxState::Ready, "10.0.0.3", 3),
            Want {
                kill_pod: Some(PodKillReason::SandboxChanged),
                sandbox: Some(4),
                app: vec!["a"],
                ..Default::default()
            },
        ),
        (
            "Never pod whose sandbox died after running: kill only (R2.8a)",
            pod().app("a").policy("Never"),
            observed().sandbox(SandboxState::NotReady, "10.0.0.2", 0).exited("a", 0),
            Want { kill_pod: Some(PodKillReason::SandboxLostNoRestart), ..Default::default() },
        ),
        (
            "OnFailure: succeeded app not restarted in a new sandbox",
            pod().app("a").app("b").policy("OnFailure"),
            observed().sandbox(SandboxState::NotReady, "x", 0).exited("a", 0).exited("b", 1),
            Want {
                kill_pod: Some(PodKillReason::SandboxChanged),
                sandbox: Some(1),
                app: vec!["b"],
                ..Default::default()
            },
        ),
        (
            "image changed: kill and restart only that container (R2.4)",
            pod().app("a").app("b").image("a", "img:2"),
            observed().ready().running("a").running("b"),
            Want { kills: vec![("a-0", KillReason::SpecChanged)], app: vec!["a"], ..Default::default() },
        ),
        (
            "a stand-in (its manifest broken: the sandbox's older spec) restarts nothing for it",
            pod().app("a").app("b").image("a", "img:2").stand_in(),
            observed().ready().running("a").running("b"),
            Want::default(),
        ),
        (
            "image changed under Never still restarts (R2.4)",
            pod().app("a").image("a", "img:2").policy("Never"),
            observed().ready().running("a"),
            Want { kills: vec![("a-0", KillReason::SpecChanged)], app: vec!["a"], ..Default::default() },
        ),
        (
            "exited app under Always restarts",
            pod().app("a").app("b"),
            observed().ready().running("b").exited("a", 0),
            Want { app: vec!["a"], ..Default::default() },
        ),
        (
            "exited 0 under OnFailure stays; the other keeps running",
            pod().app("a").app("b").policy("OnFailure"),
            observed().ready().exited("a", 0).running("b"),
            Want::default(),
        ),
        (
            "exited 1 under OnFailure restarts",
            pod().app("a").policy("OnFailure"),
            observed().ready().exited("a", 1),
            Want { app: vec!["a"], ..Default::default() },
        ),
        (
            "Never: all apps done → pod completed (R4.7)",
            pod().app("a").policy("Never"),
            observed().ready().exited("a", 1),
            Want { kill_pod: Some(PodKillReason::PodCompleted), ..Default::default() },
        ),
        (
            "job with sidecar: app done → pod completed, sidecar not restarted",
            pod().sidecar("s").app("a").policy("Never"),
            observed().ready().running("s").exited("a", 0),
            Want { kill_pod: Some(PodKillReason::PodCompleted), ..Default::default() },
        ),
        (
            "unknown state: killed before restart (R12.7)",
            pod().app("a"),
            observed().ready().unknown("a"),
            Want { kills: vec![("a-0", KillReason::UnknownState)], app: vec!["a"], ..Default::default() },
        ),
        (
            "created but never started: start a new one",
            pod().app("a"),
            observed().ready().created("a"),
            Want { app: vec!["a"], ..Default::default() },
        ),
    ];
    for (name, p, o, want) in cases {
        check(name, &p, &o, &none, want);
    }
}

#[test]
fn init_and_sidecar_cases() {
    let none = ProbeResults::default();
    let cases: Vec<(&str, PodB, ObsB, Want)> = vec![
        (
            "first init running: wait",
            pod().init("i1").init("i2").app("a"),
            observed().ready().running("i1"),
            Want::default(),
        ),
        (
            "first init done: start the second",
            pod().init("i1").init("i2").app("a"),
            observed().ready().exited("i1", 0),
            Want { init: vec!["i2"], ..Default::default() },
        ),
        (
            "all inits done: start apps",
            pod().init("i1").init("i2").app("a"),
            observed().ready().exited("i1", 0).exited("i2", 0),
            Want { app: vec!["a"], ..Default::default() },
        ),
        (
            "init failed under Always: retry it",
            pod().init("i1").app("a"),
            observed().ready().exited("i1", 1),
            Want { init: vec!["i1"], ..Default::default() },
        ),
        (
            "init failed under OnFailure: retry it",
            pod().init("i1").app("a").policy("OnFailure"),
            observed().ready().exited("i1", 2),
            Want { init: vec!["i1"], ..Default::default() },
        ),
        (
            "init failed under Never: kill pod (R4.8)",
            pod().sidecar("s").init("i1").app("a").policy("Never"),
            observed().ready().running("s").exited("i1", 1),
            Want { kill_pod: Some(PodKillReason::InitContainerFailed), ..Default::default() },
        ),
        (
            "sidecar running without startup probe: next init starts (R4.5)",
            pod().sidecar("s").init("i").app("a"),
            observed().ready().running("s"),
            Want { init: vec!["i"], ..Default::default() },
        ),
        (
            "sidecar with startup probe not yet passed: wait",
            pod().sidecar("s").startup_probe("s").app("a"),
            observed().ready().running("s"),
            Want::default(),
        ),
        (
            "sidecar last init, started: apps start",
            pod().sidecar("s").app("a"),
            observed().ready().running("s"),
            Want { app: vec!["a"], ..Default::default() },
        ),
        (
            "sidecar exited before init: restarted (R4.6)",
            pod().sidecar("s").init("i").app("a"),
            observed().ready().exited("s", 1),
            Want { init: vec!["s"], ..Default::default() },
        ),
        (
            "sidecar crashed while apps run under Never: only the sidecar restarts",
            pod().sidecar("s").app("a").policy("Never"),
            observed().ready().running("a").exited("s", 1),
            Want { init: vec!["s"], ..Default::default() },
        ),
        (
            "initialized pod: completed regular inits ignored, apps kept",
            pod().init("i").sidecar("s").app("a"),
            observed().ready().exited("i", 0).running("s").running("a"),
            Want::default(),
        ),
        (
            "sidecar image changed: only it restarts",
            pod().sidecar("s").app("a").image("s", "img:2"),
            observed().ready().running("s").running("a"),
            Want { kills: vec![("s-0", KillReason::SpecChanged)], init: vec!["s"], ..Default::default() },
        ),
        (
            "sidecar vanished from an initialized pod: started again",
            pod().sidecar("s").app("a"),
            observed().ready().running("a"),
            Want { init: vec!["s"], ..Default::default() },
        ),
    ];
    for (name, p, o, want) in cases {
        check(name, &p, &o, &none, want);
    }
}

#[test]
fn probe_cases() {
    let p = pod().sidecar("s").startup_probe("s").app("a");
    let o = observed().ready().running("s");
    let mut probes = ProbeResults::default();
    probes.startup.insert("s-0".into(), ProbeResult::Success);
    check(
        "sidecar startup passed: apps start",
        &p,
        &o,
        &probes,
        Want { app: vec!["a"], ..Default::default() },
    );
    probes.startup.insert("s-0".into(), ProbeResult::Failure);
    check(
        "sidecar startup failed: kill and restart it",
        &p,
        &o,
        &probes,
        Want { kills: vec![("s-0", KillReason::StartupProbe)], init: vec!["s"], ..Default::default() },
    );

    let p = pod().app("a");
    let o = observed().ready().running("a");
    let mut probes = ProbeResults::default();
    probes.liveness.insert("a-0".into(), ProbeResult::Failure);
    check(
        "liveness failure: kill and restart",
        &p,
        &o,
        &probes,
        Want { kills: vec![("a-0", KillReason::LivenessProbe)], app: vec!["a"], ..Default::default() },
    );
    let p = pod().app("a").policy("Never");
    check(
        "liveness failure under Never: kill only, then the pod completes",
        &p,
        &o,
        &probes,
        Want {
            kill_pod: Some(PodKillReason::PodCompleted),
            kills: vec![("a-0", KillReason::LivenessProbe)],
            ..Default::default()
        },
    );
}

#[test]
fn held_containers_are_kept() {
    let none = ProbeResults::default();
    let p = pod().sidecar("s").app("a").app("b").image("a", "img:2").image("s", "img:2");
    let o = observed().ready().running("s").running("a").running("b");
    let held: BTreeSet<String> = ["a".to_string(), "s".to_string()].into();
    assert_eq!(plan_held(&p.0, &o.0, &none, &held), Plan::default(), "everything held: nothing to do");
    let held: BTreeSet<String> = ["a".to_string()].into();
    let got = plan_held(&p.0, &o.0, &none, &held);
    assert_eq!(got.init_to_start, vec!["s"], "the sidecar goes first");
    assert!(got.app_to_start.is_empty(), "the held app stays");
}

#[test]
fn starts_after_an_outside_sigkill_wait_for_the_sandbox() {
    // The "a" instance finished at 103 (ns) in the fixtures.
    let finished = 103;
    let until = finished + KILLED_SETTLE_NS;
    let ours: BTreeSet<String> = ["a-0".to_string()].into();
    let none = BTreeSet::new();
    let restart_a = Plan { app_to_start: vec!["a".into()], ..Default::default() };
    let oom = {
        let mut o = observed().ready().exited("a", 137);
        o.0.containers[0].reason = "OOMKilled".into();
        o
    };
    // (name, plan, runtime, killed by the agent, now, want)
    let cases = [
        (
            "SIGKILLed from outside, just now: wait",
            restart_a.clone(),
            observed().ready().exited("a", 137),
            &none,
            finished,
            Some(until),
        ),
        ("the wait is over", restart_a.clone(), observed().ready().exited("a", 137), &none, until, None),
        (
            "killed by the agent itself",
            restart_a.clone(),
            observed().ready().exited("a", 137),
            &ours,
            finished,
            None,
        ),
        ("exited on its own", restart_a.clone(), observed().ready().exited("a", 1), &none, finished, None),
        ("OOM kill", restart_a.clone(), oom, &none, finished, None),
        (
            "a new sandbox is made anyway",
            Plan { create_sandbox: Some(1), ..restart_a.clone() },
            observed().ready().exited("a", 137),
            &none,
            finished,
            None,
        ),
        ("nothing to start", Plan::default(), observed().ready().exited("a", 137), &none, finished, None),
    ];
    for (name, plan, o, killed, now, want) in cases {
        assert_eq!(settle_until(&plan, &o.0, killed, now), want, "{name}");
    }
}

/// KEP-5307 in the planner: a container's own policy and rules decide its restarts.
#[test]
fn container_restart_rule_cases() {
    let none = ProbeResults::default();
    let cases: Vec<(&str, PodB, ObsB, Want)> = vec![
        (
            "Never pod, Restart In [42], exit 42: restarted in place",
            pod().app("a").policy("Never").own("a", "Never", &[42]),
            observed().ready().exited("a", 42),
            Want { app: vec!["a"], ..Default::default() },
        ),
        (
            "Never pod, Restart In [42], exit 1: not restarted, the pod completes",
            pod().app("a").policy("Never").own("a", "Never", &[42]),
            observed().ready().exited("a", 1),
            Want { kill_pod: Some(PodKillReason::PodCompleted), ..Default::default() },
        ),
        (
            "Always pod, container Never, exit 1: not restarted while its sibling runs",
            pod().app("a").app("b").own("a", "Never", &[]),
            observed().ready().exited("a", 1).running("b"),
            Want::default(),
        ),
        (
            "Never pod, container Always, exit 0: restarted",
            pod().app("a").policy("Never").own("a", "Always", &[]),
            observed().ready().exited("a", 0),
            Want { app: vec!["a"], ..Default::default() },
        ),
        (
            "Never pod, init OnFailure, exit 7: the init container is retried",
            pod().init("i").app("a").policy("Never").own("i", "OnFailure", &[]),
            observed().ready().exited("i", 7),
            Want { init: vec!["i"], ..Default::default() },
        ),
        (
            "Always pod, init Never, exit 9: the pod fails",
            pod().init("i").app("a").own("i", "Never", &[]),
            observed().ready().exited("i", 9),
            Want { kill_pod: Some(PodKillReason::InitContainerFailed), ..Default::default() },
        ),
        (
            "Never pod, init Never + Restart In [3], exit 3: retried",
            pod().init("i").app("a").policy("Never").own("i", "Never", &[3]),
            observed().ready().exited("i", 3),
            Want { init: vec!["i"], ..Default::default() },
        ),
        (
            "Always pod, init Never failed, sandbox gone: not started over",
            pod().init("i").app("a").own("i", "Never", &[]),
            observed().sandbox(SandboxState::NotReady, "10.0.0.2", 0).exited("i", 9),
            Want { kill_pod: Some(PodKillReason::InitContainerFailed), ..Default::default() },
        ),
        (
            "Always pod, every app Never and ended, sandbox gone: not started over",
            pod().app("a").app("b").own("a", "Never", &[]).own("b", "OnFailure", &[]),
            observed().sandbox(SandboxState::NotReady, "10.0.0.2", 0).exited("a", 1).exited("b", 0),
            Want { kill_pod: Some(PodKillReason::PodCompleted), ..Default::default() },
        ),
        (
            "Always pod, one app Never ended, the other restarts: a new sandbox for it",
            pod().app("a").app("b").own("a", "Never", &[]),
            observed().sandbox(SandboxState::NotReady, "10.0.0.2", 0).exited("a", 1).exited("b", 1),
            Want {
                kill_pod: Some(PodKillReason::SandboxChanged),
                sandbox: Some(1),
                app: vec!["a", "b"],
                ..Default::default()
            },
        ),
        (
            "new sandbox: a succeeded container OnFailure of its own is not run again",
            pod().app("a").app("b").own("a", "OnFailure", &[]),
            observed().sandbox(SandboxState::NotReady, "10.0.0.2", 0).exited("a", 0).exited("b", 0),
            Want {
                kill_pod: Some(PodKillReason::SandboxChanged),
                sandbox: Some(1),
                app: vec!["b"],
                ..Default::default()
            },
        ),
    ];
    for (name, p, o, want) in cases {
        check(name, &p, &o, &none, want);
    }

    // Probe failures: no exit code, so no rules; the container's own policy alone.
    let o = observed().ready().running("a");
    let mut probes = ProbeResults::default();
    probes.liveness.insert("a-0".into(), ProbeResult::Failure);
    check(
        "liveness failure, Never pod, container OnFailure: kill and restart",
        &pod().app("a").policy("Never").own("a", "OnFailure", &[]),
        &o,
        &probes,
        Want { kills: vec![("a-0", KillReason::LivenessProbe)], app: vec!["a"], ..Default::default() },
    );
    check(
        "liveness failure, Always pod, container Never + Restart In [137]: kill only",
        &pod().app("a").own("a", "Never", &[137]),
        &o,
        &probes,
        Want {
            kill_pod: Some(PodKillReason::PodCompleted),
            kills: vec![("a-0", KillReason::LivenessProbe)],
            ..Default::default()
        },
    );
}

/// KEP-5532 in the planner: an exit whose first matching rule is RestartAllContainers resets
/// every instance (running ones stopped first), the triggering ones last, and nothing else.
#[test]
fn restart_all_containers_cases() {
    let none = ProbeResults::default();
    let p = || {
        pod().init("i").sidecar("s").app("a").app("b").own_rule("a", "Never", "RestartAllContainers", &[42])
    };
    let cases: Vec<(&str, PodB, ObsB, Want)> = vec![
        (
            "exit 42: everything reset, app targets, init targets, then the source",
            p(),
            observed().ready().exited("i", 0).running("s").running("b").exited("a", 42),
            Want {
                reset: vec![("b-0", true), ("i-0", false), ("s-0", true), ("a-0", false)],
                ..Default::default()
            },
        ),
        (
            "older instances go too",
            p(),
            observed().ready().exited("i", 0).running("s").running("b").exited("a", 1).exited("a", 42),
            Want {
                reset: vec![("a-0", false), ("b-0", true), ("i-0", false), ("s-0", true), ("a-1", false)],
                ..Default::default()
            },
        ),
        (
            "another exit code: the container's own policy (Never), the pod runs on",
            p(),
            observed().ready().exited("i", 0).running("s").running("b").exited("a", 1),
            Want::default(),
        ),
        (
            "a sidecar's rule triggers it too",
            pod().sidecar("s").app("a").own_rule("s", "Always", "RestartAllContainers", &[3]),
            observed().ready().running("a").exited("s", 3),
            Want { reset: vec![("a-0", true), ("s-0", false)], ..Default::default() },
        ),
        (
            "after the reset nothing is left: the first init container starts in the same sandbox",
            p(),
            observed().ready(),
            Want { init: vec!["i"], ..Default::default() },
        ),
    ];
    for (name, p, o, want) in cases {
        check(name, &p, &o, &none, want);
    }
}

/// Ephemeral containers (upstream `computePodActions`): started once in the current sandbox,
/// even while init containers run; never restarted; never with a new sandbox or a pod kill.
#[test]
fn ephemeral_container_cases() {
    let none = ProbeResults::default();
    let cases: Vec<(&str, PodB, ObsB, Want)> = vec![
        (
            "added to a running pod: started",
            pod().app("a").ephemeral("dbg"),
            observed().ready().running("a"),
            Want { ephemeral: vec!["dbg"], ..Default::default() },
        ),
        (
            "exited: never started again",
            pod().app("a").ephemeral("dbg"),
            observed().ready().running("a").exited("dbg", 3),
            Want::default(),
        ),
        (
            "while an init container runs: started too",
            pod().init("i").app("a").ephemeral("dbg"),
            observed().ready().running("i"),
            Want { ephemeral: vec!["dbg"], ..Default::default() },
        ),
        (
            "a new sandbox: not yet",
            pod().app("a").ephemeral("dbg"),
            observed(),
            Want { sandbox: Some(0), app: vec!["a"], ..Default::default() },
        ),
        (
            "the pod is done: not started",
            pod().app("a").policy("Never").ephemeral("dbg"),
            observed().ready().exited("a", 0),
            Want { kill_pod: Some(PodKillReason::PodCompleted), ..Default::default() },
        ),
    ];
    for (name, p, o, want) in cases {
        check(name, &p, &o, &none, want);
    }
}

#[test]
fn gated_starts_cases() {
    let none = ProbeResults::default();
    let started = |id: &str| ProbeResults {
        startup: [(id.to_string(), ProbeResult::Success)].into_iter().collect(),
        ..Default::default()
    };
    let s = |v: &[&str]| v.iter().map(|n| n.to_string()).collect::<Vec<String>>();
    // (case, pod, the sync's snapshot after its starts, probe results, what starts at once)
    let cases: Vec<(&str, PodB, ObsB, ProbeResults, Option<(Vec<String>, Vec<String>)>)> = vec![
        (
            "the sidecar runs: its app starts",
            pod().sidecar("side").app("a"),
            observed().ready().running("side"),
            none.clone(),
            Some((s(&[]), s(&["a"]))),
        ),
        (
            "the first of two sidecars runs: the second starts, not the app",
            pod().sidecar("s1").sidecar("s2").app("a"),
            observed().ready().running("s1"),
            none.clone(),
            Some((s(&["s2"]), s(&[]))),
        ),
        (
            "a regular init container follows: it starts",
            pod().sidecar("side").init("i").app("a"),
            observed().ready().running("side"),
            none.clone(),
            Some((s(&["i"]), s(&[]))),
        ),
        (
            "the sidecar's startup probe has not passed: nothing",
            pod().sidecar("side").startup_probe("side").app("a"),
            observed().ready().running("side"),
            none.clone(),
            None,
        ),
        (
            "its startup probe passed: the app starts",
            pod().sidecar("side").startup_probe("side").app("a"),
            observed().ready().running("side"),
            started("side-0"),
            Some((s(&[]), s(&["a"]))),
        ),
        (
            "the sidecar already exited: its restart waits for the next sync",
            pod().sidecar("side").app("a"),
            observed().ready().exited("side", 1),
            none.clone(),
            None,
        ),
        (
            "the app has an instance already: nothing",
            pod().sidecar("side").app("a"),
            observed().ready().exited("a", 1).running("side"),
            none.clone(),
            None,
        ),
        (
            "the sandbox is gone: nothing",
            pod().sidecar("side").app("a"),
            observed().sandbox(SandboxState::NotReady, "", 0).running("side"),
            none.clone(),
            None,
        ),
    ];
    for (name, p, o, probes, want) in cases {
        assert_eq!(gated_starts(&p.0, &o.0, &probes, &BTreeSet::new()), want, "{name}");
    }
}

/// One sync's whole decision (`sync::decide`): the deadline first, then a reset, the settle
/// hold, the wake-ups others asked for, and idleness.
#[test]
fn sync_decisions() {
    use std::collections::BTreeMap;

    use sync::{SyncFacts, SyncPlan, decide};

    let none = ProbeResults::default();
    let nothing: BTreeSet<String> = BTreeSet::new();
    let ours: BTreeSet<String> = ["a-0".to_string()].into();
    let stopped: BTreeSet<String> = ["sb0".to_string()].into();
    let no_actual = || BTreeMap::new();
    // The observed instances finished at about 100 ns (the builders' clock).
    let now = 1_000;
    let restart_all = pod().app("a").app("b").own_rule("a", "Never", "RestartAllContainers", &[42]);
    // (name, pod, observed, deadline, exceeded before, instances killed and sandboxes stopped by
    // the agent, update and resize wake-ups, what the sync does)
    type Case<'a> = (
        &'a str,
        PodB,
        ObsB,
        Option<i64>,
        bool,
        &'a BTreeSet<String>,
        &'a BTreeSet<String>,
        Option<i64>,
        Option<i64>,
        SyncPlan,
    );
    let cases: Vec<Case> = vec![
        (
            "the deadline runs out now, the app runs: stop it",
            pod().app("a"),
            observed().ready().running("a"),
            Some(now),
            false,
            &nothing,
            &nothing,
            None,
            None,
            SyncPlan::Deadline { newly: true, kill: true },
        ),
        (
            "the deadline ran out before and everything stopped: nothing, ever",
            pod().app("a"),
            observed().sandbox(SandboxState::NotReady, "", 0).exited("a", 137),
            Some(now - 1),
            true,
            &nothing,
            &stopped,
            None,
            None,
            SyncPlan::Deadline { newly: false, kill: false },
        ),
        (
            "the deadline ran out, nothing runs but the sandbox died by itself: stop it",
            pod().app("a"),
            observed().sandbox(SandboxState::NotReady, "", 0).exited("a", 137),
            Some(now - 1),
            true,
            &nothing,
            &nothing,
            None,
            None,
            SyncPlan::Deadline { newly: false, kill: true },
        ),
        (
            "running and healthy: idle until the earliest wake-up (the deadline's)",
            pod().app("a"),
            observed().ready().running("a"),
            Some(now + 50),
            false,
            &nothing,
            &nothing,
            Some(now + 70),
            Some(now + 90),
            SyncPlan::Idle { requeue: Some(now + 50) },
        ),
        (
            "idle with the resize's wake-up only",
            pod().app("a"),
            observed().ready().running("a"),
            None,
            false,
            &nothing,
            &nothing,
            None,
            Some(now + 90),
            SyncPlan::Idle { requeue: Some(now + 90) },
        ),
        (
            "an exit matching RestartAllContainers resets the pod before anything else",
            restart_all,
            observed().ready().running("b").exited("a", 42),
            None,
            false,
            &nothing,
            &nothing,
            None,
            None,
            SyncPlan::Reset {
                reset: plan(
                    &pod().app("a").app("b").own_rule("a", "Never", "RestartAllContainers", &[42]).0,
                    &observed().ready().running("b").exited("a", 42).0,
                    &none,
                )
                .reset,
                kill_under_way: false,
            },
        ),
        (
            "a SIGKILL from outside holds the restart back until it settles",
            pod().app("a"),
            observed().ready().exited("a", 137),
            None,
            false,
            &nothing,
            &nothing,
            Some(now + 10_000_000_000),
            None,
            SyncPlan::Idle {
                requeue: settle_until(
                    &Plan { app_to_start: vec!["a".into()], ..Plan::default() },
                    &observed().ready().exited("a", 137).0,
                    &nothing,
                    now,
                ),
            },
        ),
        (
            "the agent's own kill is no reason to wait: restart now",
            pod().app("a"),
            observed().ready().exited("a", 137),
            None,
            false,
            &ours,
            &nothing,
            None,
            None,
            SyncPlan::Act {
                plan: Plan { app_to_start: vec!["a".into()], ..Plan::default() },
                resize: Default::default(),
                requeue: None,
            },
        ),
        (
            "a new pod: a sandbox and its app",
            pod().app("a"),
            observed(),
            None,
            false,
            &nothing,
            &nothing,
            None,
            None,
            SyncPlan::Act {
                plan: Plan { create_sandbox: Some(0), app_to_start: vec!["a".into()], ..Plan::default() },
                resize: Default::default(),
                requeue: None,
            },
        ),
    ];
    for (name, p, o, deadline, exceeded, killed, stopped, update, resize, want) in cases {
        let got = decide(&SyncFacts {
            pod: &p.0,
            observed: &o.0,
            probes: &none,
            held: &nothing,
            now,
            deadline,
            deadline_exceeded: exceeded,
            killed_by_agent: killed,
            stopped_sandboxes: stopped,
            update_requeue: update,
            resize_requeue: resize,
            actual: &no_actual,
        });
        assert_eq!(got, want, "{name}");
    }
}
