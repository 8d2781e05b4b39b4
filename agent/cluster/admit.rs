//! Pod admission as the kubelet's (`canAdmitPod`): a pod that does not fit the node, whose node
//! selector or affinity does not match it, that sets a sysctl the node does not allow, that asks
//! for an AppArmor profile the host cannot enforce, or that uses what crilet cannot serve is
//! failed with the kubelet's reason instead of run. Pure.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, NodeSelectorRequirement, NodeSelectorTerm, Pod, PodSpec};

use crate::podspec::requests;
use crate::sysctl::{self, Allowlist};

/// A refusal: the pod's phase becomes Failed with this reason and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    pub reason: String,
    pub message: String,
}

/// What the node has left to give, its labels, and the sysctls it lets pods set.
#[derive(Debug, Clone, Default)]
pub struct NodeRoom {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub sysctls: Allowlist,
    /// Whether the host can enforce AppArmor (`apparmor::host`).
    pub apparmor: crate::apparmor::Host,
    pub max_pods: u32,
    /// Allocatable cpu in millicores and memory in bytes.
    pub cpu_milli: i64,
    pub memory: i64,
    /// The runtime applies `supplementalGroupsPolicy: Strict` (its CRI features say so).
    pub supplemental_groups_policy: bool,
}

/// Requests of the pods admitted so far (active ones only).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Used {
    pub pods: u32,
    pub cpu_milli: i64,
    pub memory: i64,
}

/// Admits `pod` onto a node with `room`, given what is `used`; `None` = admitted.
pub fn admit(pod: &Pod, room: &NodeRoom, used: Used) -> Option<Rejection> {
    let spec = pod.spec.as_ref()?;
    // The kubelet's predicate handler checks the OS first: no preemption could help.
    if let Some(r) = os_mismatch(pod) {
        return Some(r);
    }
    if let Some(r) = unsupported(spec) {
        return Some(r);
    }
    // The kubelet's sysctl admit handler runs before its resource and affinity predicates.
    if let Some((_, message)) = room.sysctls.admit(pod) {
        return Some(Rejection { reason: sysctl::FORBIDDEN_REASON.into(), message });
    }
    // Then the AppArmor handler: a profile the host cannot enforce is refused, not run unconfined.
    if let Some(message) = crate::apparmor::admit(pod, &room.apparmor) {
        return Some(Rejection { reason: crate::apparmor::NOT_ADMITTED_REASON.into(), message });
    }
    // The kubelet's predicate: Strict where the runtime cannot apply it is refused, not run as
    // Merge (which would give the process the image's group memberships).
    let strict = spec.security_context.as_ref().and_then(|s| s.supplemental_groups_policy.as_deref());
    if strict == Some("Strict") && !room.supplemental_groups_policy {
        return Some(Rejection {
            reason: "SupplementalGroupsPolicyNotSupported".into(),
            message: "SupplementalGroupsPolicy=Strict is not supported in this node".into(),
        });
    }
    if !selector_matches(spec, room) {
        return Some(Rejection {
            reason: "NodeAffinity".into(),
            message: "Predicate NodeAffinity failed: node(s) didn't match Pod's node affinity/selector"
                .into(),
        });
    }
    if used.pods + 1 > room.max_pods {
        return Some(Rejection {
            reason: "OutOfpods".into(),
            message: format!(
                "Node didn't have enough resource: pods, requested: 1, used: {}, capacity: {}",
                used.pods, room.max_pods
            ),
        });
    }
    let (cpu, mem) = requests(pod);
    if cpu > 0 && used.cpu_milli + cpu > room.cpu_milli {
        return Some(Rejection {
            reason: "OutOfcpu".into(),
            message: format!(
                "Node didn't have enough resource: cpu, requested: {cpu}, used: {}, capacity: {}",
                used.cpu_milli, room.cpu_milli
            ),
        });
    }
    if mem > 0 && used.memory + mem > room.memory {
        return Some(Rejection {
            reason: "OutOfmemory".into(),
            message: format!(
                "Node didn't have enough resource: memory, requested: {mem}, used: {}, capacity: {}",
                used.memory, room.memory
            ),
        });
    }
    None
}

/// The kubelet's OS checks, as a refusal.
fn os_mismatch(pod: &Pod) -> Option<Rejection> {
    crate::podspec::os_mismatch(pod)
        .map(|(reason, message)| Rejection { reason: reason.into(), message: message.into() })
}

/// What crilet cannot serve: refused at admission with a message naming the field.
fn unsupported(spec: &PodSpec) -> Option<Rejection> {
    let mut found: Vec<String> = Vec::new();
    for (i, v) in spec.volumes.iter().flatten().enumerate() {
        let served = v.empty_dir.is_some()
            || v.host_path.is_some()
            || v.config_map.is_some()
            || v.secret.is_some()
            || v.downward_api.is_some()
            || v.projected.is_some();
        if !served {
            let json = serde_json::to_value(v).unwrap_or_default();
            let kind =
                json.as_object().and_then(|m| m.keys().find(|k| *k != "name").cloned()).unwrap_or_default();
            found.push(format!(
                "spec.volumes[{i}] ({:?}): volume type {kind} is not supported by crilet",
                v.name
            ));
        }
        if let Some(p) = &v.projected {
            for (j, s) in p.sources.iter().flatten().enumerate() {
                if s.cluster_trust_bundle.is_some() {
                    found.push(format!(
                        "spec.volumes[{i}].projected.sources[{j}]: clusterTrustBundle is not supported by crilet"
                    ));
                }
                if s.pod_certificate.is_some() {
                    found.push(format!(
                        "spec.volumes[{i}].projected.sources[{j}]: podCertificate is not supported by crilet"
                    ));
                }
            }
        }
    }
    for (at, c) in crate::podspec::containers_at(spec) {
        found.extend(unsupported_in_container(c).into_iter().map(|why| format!("{at}.{why}")));
    }
    if spec.hostname_override.is_some() {
        found.push("spec.hostnameOverride: not supported by crilet".into());
    }
    if spec.resource_claims.as_ref().is_some_and(|r| !r.is_empty()) {
        found.push("spec.resourceClaims: dynamic resource allocation is not supported by crilet".into());
    }
    // Security-context values crilet would otherwise leave unenforced (procMount Unmasked,
    // capability names the runtime ignores). The rest of the security context is served as the
    // kubelet serves it on Linux: seLinuxOptions go to the runtime, which applies them where
    // SELinux is enabled; windowsOptions, seLinuxChangePolicy and fsGroupChangePolicy are
    // ignored by the kubelet too on a Linux node without SELinux or volume ownership changes,
    // and refusing them would turn away ordinary (restricted-profile) workloads.
    found.extend(
        crate::pod::security::unsupported(spec).into_iter().map(|(field, why)| format!("{field}: {why}")),
    );
    if found.is_empty() {
        return None;
    }
    Some(Rejection {
        reason: "UnsupportedPodSpec".into(),
        message: format!("crilet cannot run this pod: {}", found.join("; ")),
    })
}

/// The fields of one container crilet cannot serve, each as `field: why`. The 1.34+ ones
/// (container restart rules, `fileKeyRef` env) pass the API server when their gates are on and
/// would otherwise be ignored without a word.
fn unsupported_in_container(c: &Container) -> Vec<String> {
    let mut found = Vec::new();
    if c.volume_devices.as_ref().is_some_and(|d| !d.is_empty()) {
        found.push("volumeDevices: not supported by crilet".to_string());
    }
    for (k, env) in c.env.iter().flatten().enumerate() {
        if env.value_from.as_ref().is_some_and(|v| v.file_key_ref.is_some()) {
            found.push(format!("env[{k}].valueFrom.fileKeyRef: not supported by crilet"));
        }
    }
    found
}

/// `nodeSelector` and the required node affinity (terms ORed, expressions ANDed).
fn selector_matches(spec: &PodSpec, room: &NodeRoom) -> bool {
    if let Some(sel) = &spec.node_selector {
        if sel.iter().any(|(k, v)| room.labels.get(k) != Some(v)) {
            return false;
        }
    }
    let terms = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|n| n.required_during_scheduling_ignored_during_execution.as_ref())
        .map(|r| r.node_selector_terms.as_slice());
    match terms {
        None | Some([]) => true,
        Some(terms) => terms.iter().any(|t| term_matches(t, room)),
    }
}

fn term_matches(t: &NodeSelectorTerm, room: &NodeRoom) -> bool {
    let exprs = t.match_expressions.as_deref().unwrap_or_default();
    let fields = t.match_fields.as_deref().unwrap_or_default();
    if exprs.is_empty() && fields.is_empty() {
        return false; // an empty term matches nothing (upstream)
    }
    let node_fields = BTreeMap::from([("metadata.name".to_string(), room.name.clone())]);
    exprs.iter().all(|e| requirement_matches(e, &room.labels))
        && fields.iter().all(|e| requirement_matches(e, &node_fields))
}

fn requirement_matches(r: &NodeSelectorRequirement, labels: &BTreeMap<String, String>) -> bool {
    let value = labels.get(&r.key);
    let values = r.values.as_deref().unwrap_or_default();
    let number = |s: &str| s.parse::<i64>().ok();
    match r.operator.as_str() {
        "In" => value.is_some_and(|v| values.contains(v)),
        "NotIn" => value.is_none_or(|v| !values.contains(v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" => {
            matches!((value.and_then(|v| number(v)), values.first().and_then(|v| number(v))), (Some(a), Some(b)) if a > b)
        }
        "Lt" => {
            matches!((value.and_then(|v| number(v)), values.first().and_then(|v| number(v))), (Some(a), Some(b)) if a < b)
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(yaml: &str) -> Pod {
        serde_yaml_ng::from_str(yaml).expect("test pod")
    }

    fn room() -> NodeRoom {
        NodeRoom {
            name: "n1".into(),
            labels: BTreeMap::from([
                ("kubernetes.io/hostname".to_string(), "n1".to_string()),
                ("zone".to_string(), "a".to_string()),
                ("cores".to_string(), "8".to_string()),
            ]),
            max_pods: 3,
            cpu_milli: 2000,
            memory: 1 << 30,
            sysctls: Allowlist::new(&["net.core.*".to_string()], Some((6, 1))).expect("valid pattern"),
            supplemental_groups_policy: true,
            apparmor: crate::apparmor::Host::Enabled,
        }
    }

    const SMALL: &str =
        "spec: {containers: [{name: c, image: i, resources: {requests: {cpu: 500m, memory: 100Mi}}}]}";

    #[test]
    fn admission_decides_as_the_kubelet() {
        let used = |pods, cpu_milli, memory| Used { pods, cpu_milli, memory };
        // (pod, used, expected reason)
        let cases: Vec<(&str, Used, Option<&str>)> = vec![
            (SMALL, used(0, 0, 0), None),
            (SMALL, used(3, 0, 0), Some("OutOfpods")),
            (SMALL, used(1, 1600, 0), Some("OutOfcpu")),
            (SMALL, used(1, 1500, 0), None),
            (SMALL, used(1, 0, (1 << 30) - (50 << 20)), Some("OutOfmemory")),
            ("spec: {nodeSelector: {zone: a}, containers: [{name: c, image: i}]}", used(0, 0, 0), None),
            (
                "spec: {nodeSelector: {zone: b}, containers: [{name: c, image: i}]}",
                used(0, 0, 0),
                Some("NodeAffinity"),
            ),
            (
                "spec: {affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [{matchExpressions: [{key: zone, operator: In, values: [b]}]}, {matchExpressions: [{key: cores, operator: Gt, values: ['4']}]}]}}}, containers: [{name: c, image: i}]}",
                used(0, 0, 0),
                None,
            ),
            (
                "spec: {affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [{matchFields: [{key: metadata.name, operator: NotIn, values: [n1]}]}]}}}, containers: [{name: c, image: i}]}",
                used(0, 0, 0),
                Some("NodeAffinity"),
            ),
            (
                "spec: {volumes: [{name: data, persistentVolumeClaim: {claimName: x}}], containers: [{name: c, image: i}]}",
                used(0, 0, 0),
                Some("UnsupportedPodSpec"),
            ),
            (
                "spec: {volumes: [{name: t, projected: {sources: [{serviceAccountToken: {path: token}}]}}], containers: [{name: c, image: i}]}",
                used(0, 0, 0),
                None,
            ),
            (
                "spec: {securityContext: {sysctls: [{name: net.core.somaxconn, value: '1024'}]}, containers: [{name: c, image: i}]}",
                used(0, 0, 0),
                None,
            ),
            (
                "spec: {os: {name: windows}, containers: [{name: c, image: i}]}",
                used(0, 0, 0),
                Some("PodOSNotSupported"),
            ),
            ("spec: {os: {name: linux}, containers: [{name: c, image: i}]}", used(0, 0, 0), None),
            (
                "metadata: {labels: {kubernetes.io/os: windows}}\nspec: {containers: [{name: c, image: i}]}",
                used(0, 0, 0),
                Some("PodOSSelectorNodeLabelDoesNotMatch"),
            ),
            (
                "metadata: {labels: {kubernetes.io/os: linux}}\nspec: {os: {name: linux}, containers: [{name: c, image: i}]}",
                used(0, 0, 0),
                None,
            ),
            // Only the label counts, as upstream: a node selector for another OS is NodeAffinity.
            (
                "spec: {nodeSelector: {kubernetes.io/os: windows}, containers: [{name: c, image: i}]}",
                used(0, 0, 0),
                Some("NodeAffinity"),
            ),
            // The label is checked before the field, and both before crilet's own refusals.
            (
                "metadata: {labels: {kubernetes.io/os: windows}}\nspec: {os: {name: windows}, hostUsers: false, containers: [{name: c, image: i}]}",
                used(0, 0, 0),
                Some("PodOSSelectorNodeLabelDoesNotMatch"),
            ),
            (
                "spec: {os: {name: windows}, hostUsers: false, containers: [{name: c, image: i}]}",
                used(0, 0, 0),
                Some("PodOSNotSupported"),
            ),
            (
                "spec: {hostNetwork: true, securityContext: {sysctls: [{name: net.core.somaxconn, value: '1024'}]}, containers: [{name: c, image: i}]}",
                used(0, 0, 0),
                Some("SysctlForbidden"),
            ),
            (
                "spec: {nodeSelector: {zone: b}, securityContext: {sysctls: [{name: kernel.msgmax, value: '1'}]}, containers: [{name: c, image: i}]}",
                used(0, 0, 0),
                Some("SysctlForbidden"),
            ),
        ];
        for (i, (yaml, used, want)) in cases.into_iter().enumerate() {
            let got = admit(&pod(yaml), &room(), used);
            assert_eq!(got.as_ref().map(|r| r.reason.as_str()), want, "case {i}: {got:?}");
        }
        // On a host without AppArmor: (pod, expected reason); the sysctl handler runs first.
        let no_apparmor = NodeRoom {
            apparmor: crate::apparmor::Host::Disabled("AppArmor is not enabled on the host"),
            ..room()
        };
        let cases = [
            (
                "spec: {securityContext: {appArmorProfile: {type: RuntimeDefault}}, containers: [{name: c, image: i}]}",
                Some("AppArmor"),
            ),
            (
                "spec: {containers: [{name: c, image: i, securityContext: {appArmorProfile: {type: Unconfined}}}]}",
                None,
            ),
            (
                "spec: {securityContext: {appArmorProfile: {type: RuntimeDefault}, sysctls: [{name: kernel.msgmax, value: '1'}]}, containers: [{name: c, image: i}]}",
                Some("SysctlForbidden"),
            ),
        ];
        for (yaml, want) in cases {
            let got = admit(&pod(yaml), &no_apparmor, used(0, 0, 0));
            assert_eq!(got.as_ref().map(|r| r.reason.as_str()), want, "{yaml}: {got:?}");
        }
        let got = admit(&pod(cases[0].0), &no_apparmor, used(0, 0, 0)).expect("refused");
        assert_eq!(got.message, "Cannot enforce AppArmor: AppArmor is not enabled on the host");
    }

    /// Fields of the 1.34-1.36 API that pass the API server with their gates on but that
    /// crilet does not implement: refused by name, never ignored. Stop signals and container
    /// restart rules (RestartAllContainers too) are served.
    #[test]
    fn newer_api_fields_are_refused_or_served() {
        let cases = [
            (
                "spec: {containers: [{name: a, image: i}, {name: c, image: i, restartPolicy: Never, restartPolicyRules: [{action: Restart, exitCodes: {operator: In, values: [42]}}]}]}",
                None,
            ),
            (
                "spec: {containers: [{name: c, image: i, restartPolicy: Never, restartPolicyRules: [{action: RestartAllContainers, exitCodes: {operator: In, values: [42]}}]}]}",
                None,
            ),
            (
                "spec: {initContainers: [{name: s, image: i, restartPolicy: Always}], containers: [{name: c, image: i}]}",
                None,
            ),
            (
                "spec: {containers: [{name: c, image: i, env: [{name: X, valueFrom: {fileKeyRef: {volumeName: v, path: p, key: k}}}]}]}",
                Some(&["spec.containers[0].env[0].valueFrom.fileKeyRef"][..]),
            ),
            (
                "spec: {hostnameOverride: other, containers: [{name: c, image: i}]}",
                Some(&["spec.hostnameOverride"][..]),
            ),
            (
                "spec: {volumes: [{name: v, projected: {sources: [{podCertificate: {signerName: x/y, keyType: ED25519, credentialBundlePath: b}}]}}], containers: [{name: c, image: i}]}",
                Some(&["podCertificate"][..]),
            ),
            (
                "spec: {os: {name: linux}, containers: [{name: c, image: i, lifecycle: {stopSignal: SIGUSR1}}]}",
                None,
            ),
            (
                "spec: {securityContext: {runAsNonRoot: true, fsGroup: 2, supplementalGroupsPolicy: Strict, seLinuxOptions: {level: 's0:c1'}}, containers: [{name: c, image: i, securityContext: {procMount: Default, capabilities: {drop: [ALL], add: [NET_BIND_SERVICE]}, windowsOptions: {runAsUserName: x}}}]}",
                None,
            ),
            (
                "spec: {containers: [{name: c, image: i, securityContext: {procMount: Unmasked, capabilities: {drop: [CAP_SYS_ADMIN]}}}]}",
                Some(&["spec.containers[0].securityContext.procMount", "capabilities.drop[0]"][..]),
            ),
        ];
        for (yaml, want) in cases {
            let got = admit(&pod(yaml), &room(), Used::default());
            match want {
                None => assert!(got.is_none(), "{yaml}: {got:?}"),
                Some(fields) => {
                    let r = got.unwrap_or_else(|| panic!("{yaml}: admitted"));
                    assert_eq!(r.reason, "UnsupportedPodSpec", "{yaml}");
                    for f in fields {
                        assert!(r.message.contains(f), "{yaml}: {f} not in {}", r.message);
                    }
                }
            }
        }
    }

    #[test]
    fn strict_groups_need_the_runtime_feature() {
        let strict = pod(
            "spec: {securityContext: {supplementalGroupsPolicy: Strict}, containers: [{name: c, image: i}]}",
        );
        let merge = pod(
            "spec: {securityContext: {supplementalGroupsPolicy: Merge}, containers: [{name: c, image: i}]}",
        );
        let without = NodeRoom { supplemental_groups_policy: false, ..room() };
        assert_eq!(admit(&strict, &room(), Used::default()), None);
        assert_eq!(admit(&merge, &without, Used::default()), None);
        assert_eq!(
            admit(&strict, &without, Used::default()),
            Some(Rejection {
                reason: "SupplementalGroupsPolicyNotSupported".into(),
                message: "SupplementalGroupsPolicy=Strict is not supported in this node".into(),
            })
        );
    }

    #[test]
    fn effective_requests_count_init_and_sidecar_containers() {
        let p = pod(
            "spec: {initContainers: [{name: s, image: i, restartPolicy: Always, resources: {requests: {cpu: 100m}}}, {name: big, image: i, resources: {requests: {cpu: '1', memory: 1Gi}}}], containers: [{name: c, image: i, resources: {requests: {cpu: 200m, memory: 10Mi}}}]}",
        );
        assert_eq!(requests(&p), (1100, 1 << 30), "the init step (sidecar + big init) is the largest");
        let msg = admit(&pod(SMALL), &room(), Used { pods: 3, ..Default::default() }).unwrap().message;
        assert_eq!(msg, "Node didn't have enough resource: pods, requested: 1, used: 3, capacity: 3");
    }
}
