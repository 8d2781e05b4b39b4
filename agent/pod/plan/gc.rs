//! The garbage of one pod's runtime state, pure (R12.5, the kubelet's container GC): the dead
//! container instances and sandboxes to remove. The worker removes them, with their logs, when
//! a sync has nothing else to do.

use crate::model::{ContainerState, ObservedContainer, ObservedPod, SandboxState};

/// What to remove, in the order observed (newest first).
#[derive(Debug, Default, PartialEq)]
pub struct Garbage<'a> {
    pub containers: Vec<&'a ObservedContainer>,
    /// Sandbox IDs.
    pub sandboxes: Vec<&'a str>,
}

/// R12.5: each container keeps its newest dead instance (the kubelet's `maxPerPodContainer` 1,
/// by creation time) and loses the older ones. Dead is Exited, or Created and never started: a
/// StartContainer that failed, or an agent stopped between create and start, leaves one behind
/// and the next start makes a new instance (R12.7), so they would pile up if kept. An instance
/// being started is always its container's newest, so it is never removed. An Unknown instance
/// may still run: it is killed first (R12.7) and collected once Exited. Dead sandboxes that are
/// not the newest and hold no containers go too.
pub fn garbage(observed: &ObservedPod) -> Garbage<'_> {
    let mut kept: Vec<&str> = Vec::new();
    let mut out = Garbage::default();
    let dead = observed
        .containers
        .iter()
        .filter(|c| matches!(c.state, ContainerState::Exited | ContainerState::Created));
    for c in dead {
        if kept.contains(&c.name.as_str()) {
            out.containers.push(c);
        } else {
            kept.push(&c.name);
        }
    }
    for sb in observed.sandboxes.iter().skip(1) {
        let used = observed.containers.iter().any(|c| c.sandbox_id == sb.id);
        if sb.state == SandboxState::NotReady && !used {
            out.sandboxes.push(&sb.id);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ObservedSandbox;

    use ContainerState::{Created, Exited, Running, Unknown};
    use SandboxState::{NotReady, Ready};

    /// Instances as (id, state), newest first, in sandbox `s1`; an id is its container's name
    /// and a number (`app2`).
    fn pod(instances: &[(&str, ContainerState)]) -> ObservedPod {
        let containers = instances.iter().map(|(id, state)| (*id, *state, "s1")).collect::<Vec<_>>();
        with_sandboxes(&containers, &[("s1", Ready)])
    }

    /// Instances as (id, state, sandbox) and sandboxes as (id, state), newest first.
    fn with_sandboxes(
        instances: &[(&str, ContainerState, &str)],
        sandboxes: &[(&str, SandboxState)],
    ) -> ObservedPod {
        let sandbox = |(id, state): &(&str, SandboxState)| ObservedSandbox {
            id: id.to_string(),
            attempt: 0,
            state: *state,
            created_at: 0,
            ips: Vec::new(),
            host_network: false,
            labels: Default::default(),
            annotations: Default::default(),
        };
        let container = |(id, state, sandbox): &(&str, ContainerState, &str)| ObservedContainer {
            id: id.to_string(),
            name: id.trim_end_matches(|c: char| c.is_ascii_digit()).to_string(),
            state: *state,
            sandbox_id: sandbox.to_string(),
            ..Default::default()
        };
        ObservedPod {
            uid: "u".into(),
            sandboxes: sandboxes.iter().map(sandbox).collect(),
            containers: instances.iter().map(container).collect(),
        }
    }

    #[test]
    fn garbage_cases() {
        // (case, what the runtime shows, the IDs removed: instances, then sandboxes)
        let cases: [(&str, ObservedPod, &[&str]); 9] = [
            ("one running instance: nothing", pod(&[("app1", Running)]), &[]),
            (
                "an older exited instance goes",
                pod(&[("app3", Running), ("app2", Exited), ("app1", Exited)]),
                &["app1"],
            ),
            (
                "a failed start's created instance is the dead one kept",
                pod(&[("app2", Running), ("app1", Created)]),
                &[],
            ),
            (
                "starts failed twice: the older created one goes",
                pod(&[("app3", Running), ("app2", Created), ("app1", Created)]),
                &["app1"],
            ),
            (
                "a created instance (being started) is newest: kept",
                pod(&[("app2", Created), ("app1", Exited)]),
                &["app1"],
            ),
            (
                "unknown may run: neither removed nor kept as dead",
                pod(&[("app3", Unknown), ("app2", Exited), ("app1", Unknown)]),
                &[],
            ),
            (
                "each container keeps its own",
                pod(&[("log2", Exited), ("app2", Created), ("log1", Created), ("app1", Exited)]),
                &["log1", "app1"],
            ),
            (
                "a dead old empty sandbox goes, the newest stays",
                with_sandboxes(&[], &[("s3", NotReady), ("s2", NotReady), ("s1", Ready)]),
                &["s2"],
            ),
            (
                "a dead old sandbox holding an instance stays",
                with_sandboxes(
                    &[("app2", Running, "s2"), ("app1", Exited, "s1")],
                    &[("s2", Ready), ("s1", NotReady)],
                ),
                &[],
            ),
        ];
        for (name, seen, want) in cases {
            let got = garbage(&seen);
            let removed: Vec<&str> =
                got.containers.iter().map(|c| c.id.as_str()).chain(got.sandboxes).collect();
            assert_eq!(removed, want, "{name}");
        }
    }
}
