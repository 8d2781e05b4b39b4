//! Allow-list cases: fields crilet accepts but ignores are warnings (in the pod and in the set),
//! supported fields pass without a word, unset values (null, [], {}) are never reported.

use serde_json::{Value, json};

use super::validate::Edit;
use super::{base, parse_ok, parse_value, set};
use crate::source::ProblemKind;

fn sidecar(v: &mut Value) {
    set(v, "/spec/initContainers", json!([{"name": "side", "image": "envoy:1", "restartPolicy": "Always"}]));
}

fn init(v: &mut Value) {
    set(v, "/spec/initContainers", json!([{"name": "setup", "image": "busybox:1"}]));
}

#[test]
fn warning_cases() {
    let cases: &[(&str, Edit, &str, &str)] = &[
        (
            "unknown container field",
            |v| set(v, "/spec/containers/0/fooBar", json!(1)),
            "spec.containers[0].fooBar",
            "field not supported by crilet, ignored",
        ),
        (
            "unknown pod field",
            |v| set(v, "/spec/newThing", json!({"a": 1})),
            "spec.newThing",
            "field not supported by crilet, ignored",
        ),
        (
            "the pod's seccomp annotation, no longer honoured (1.27+)",
            |v| {
                set(
                    v,
                    "/metadata/annotations",
                    json!({"seccomp.security.alpha.kubernetes.io/pod": "runtime/default"}),
                )
            },
            "metadata.annotations[seccomp.security.alpha.kubernetes.io/pod]",
            "non-functional in v1.27+; use the \"seccompProfile\" field instead",
        ),
        (
            "a container's seccomp annotation, no longer honoured (1.27+)",
            |v| {
                set(
                    v,
                    "/metadata/annotations",
                    json!({"container.seccomp.security.alpha.kubernetes.io/app": "localhost/a.json"}),
                )
            },
            "metadata.annotations[container.seccomp.security.alpha.kubernetes.io/app]",
            "non-functional in v1.27+",
        ),
        (
            "a privileged container with a seccomp profile runs unconfined",
            |v| {
                set(v, "/spec/securityContext", json!({"seccompProfile": {"type": "RuntimeDefault"}}));
                set(v, "/spec/containers/0/securityContext", json!({"privileged": true}));
            },
            "spec.containers[0].securityContext.privileged",
            "runs unconfined",
        ),
        (
            "tolerations",
            |v| set(v, "/spec/tolerations", json!([{"operator": "Exists"}])),
            "spec.tolerations",
            "scheduling field",
        ),
        (
            "nodeSelector",
            |v| set(v, "/spec/nodeSelector", json!({"a": "b"})),
            "spec.nodeSelector",
            "scheduling field",
        ),
        (
            "serviceAccountName",
            |v| set(v, "/spec/serviceAccountName", json!("sa")),
            "spec.serviceAccountName",
            "no service account",
        ),
        (
            "automountServiceAccountToken",
            |v| set(v, "/spec/automountServiceAccountToken", json!(true)),
            "spec.automountServiceAccountToken",
            "no service account",
        ),
        (
            "fsGroup",
            |v| set(v, "/spec/securityContext", json!({"fsGroup": 2000})),
            "spec.securityContext.fsGroup",
            "fsGroup",
        ),
        (
            "fsGroupChangePolicy: no volume ownership is changed",
            |v| set(v, "/spec/securityContext", json!({"fsGroupChangePolicy": "OnRootMismatch"})),
            "spec.securityContext.fsGroupChangePolicy",
            "no volume ownership",
        ),
        (
            "seLinuxChangePolicy: no volume is relabelled",
            |v| set(v, "/spec/securityContext", json!({"seLinuxChangePolicy": "MountOption"})),
            "spec.securityContext.seLinuxChangePolicy",
            "relabels no volumes",
        ),
        (
            "windowsOptions on Linux",
            |v| {
                set(
                    v,
                    "/spec/containers/0/securityContext",
                    json!({"windowsOptions": {"runAsUserName": "u"}}),
                )
            },
            "spec.containers[0].securityContext.windowsOptions",
            "Windows containers only",
        ),
        ("status", |v| set(v, "/status", json!({"phase": "Running"})), "status", "status is ignored"),
        (
            "extended resource",
            |v| set(v, "/spec/containers/0/resources", json!({"limits": {"example.com/gpu": "1"}})),
            "spec.containers[0].resources.limits.example.com/gpu",
            "not enforced",
        ),
    ];
    for (name, edit, field, reason) in cases {
        let mut v = base();
        edit(&mut v);
        let pod = parse_ok(&v);
        let (_, problems) = parse_value(&v);
        let want = format!("{field}: ");
        let in_pod = pod.warnings.iter().any(|w| w.starts_with(&want) && w.contains(reason));
        assert!(in_pod, "{name}: want warning {field} containing {reason:?} in {:#?}", pod.warnings);
        let in_set = problems.iter().any(|p| {
            p.kind == ProblemKind::Warning && p.field.as_deref() == Some(*field) && p.reason.contains(reason)
        });
        assert!(in_set, "{name}: the warning must also be a problem: {problems:#?}");
    }
}

#[test]
fn valid_cases() {
    let cases: &[(&str, Edit)] = &[
        ("the base pod", |_| {}),
        ("sidecar with probes and hooks", |v| {
            sidecar(v);
            set(
                v,
                "/spec/initContainers/0/readinessProbe",
                json!({"httpGet": {"port": 9901, "path": "/ready"}}),
            );
            set(v, "/spec/initContainers/0/lifecycle", json!({"preStop": {"sleep": {"seconds": 0}}}));
        }),
        ("regular init container", init),
        ("readiness successThreshold above 1", |v| {
            set(
                v,
                "/spec/containers/0/readinessProbe",
                json!({"grpc": {"port": 9000}, "successThreshold": 3}),
            )
        }),
        ("named probe port", |v| {
            set(v, "/spec/containers/0/livenessProbe", json!({"httpGet": {"port": "http"}}))
        }),
        ("host network with matching host port", |v| {
            set(v, "/spec/hostNetwork", json!(true));
            set(v, "/spec/containers/0/ports/0/hostPort", json!(80));
        }),
        ("every supported fieldRef", |v| {
            let env: Vec<Value> = crate::source::validate_container::SUPPORTED_FIELD_PATHS
                .iter()
                .enumerate()
                .map(|(i, p)| json!({"name": format!("V{i}"), "valueFrom": {"fieldRef": {"fieldPath": p}}}))
                .collect();
            set(v, "/spec/containers/0/env", Value::Array(env));
        }),
        ("relaxed env names", |v| {
            set(v, "/spec/containers/0/env", json!([{"name": "1-weird.name:ok", "value": "x"}]))
        }),
        ("memory emptyDir and hostPath", |v| {
            set(v, "/spec/volumes/0/emptyDir", json!({"medium": "Memory", "sizeLimit": "64Mi"}));
            set(
                v,
                "/spec/volumes/1",
                json!({"name": "host", "hostPath": {"path": "/srv/x", "type": "DirectoryOrCreate"}}),
            );
        }),
        ("resources and security", |v| {
            set(
                v,
                "/spec/containers/0/resources",
                json!({"limits": {"cpu": "500m", "memory": "128Mi"}, "requests": {"cpu": "0.25"}}),
            );
            set(
                v,
                "/spec/containers/0/securityContext",
                json!({
                    "runAsUser": 1000, "runAsNonRoot": true, "readOnlyRootFilesystem": true,
                    "capabilities": {"add": ["NET_ADMIN"], "drop": ["ALL"]}, "allowPrivilegeEscalation": false
                }),
            );
        }),
        ("the rest of the restricted profile, pod and container level", |v| {
            set(
                v,
                "/spec/securityContext",
                json!({"supplementalGroupsPolicy": "Strict", "seLinuxOptions": {"level": "s0:c1,c2"}}),
            );
            set(
                v,
                "/spec/containers/0/securityContext",
                json!({"procMount": "Default", "seLinuxOptions": {"type": "container_t"}}),
            );
        }),
        ("seccomp profiles, pod and container level", |v| {
            set(v, "/spec/securityContext", json!({"seccompProfile": {"type": "RuntimeDefault"}}));
            set(
                v,
                "/spec/containers/0/securityContext",
                json!({"seccompProfile": {"type": "Localhost", "localhostProfile": "profiles/a..b.json"}}),
            );
            set(
                v,
                "/spec/initContainers",
                json!([{"name": "setup", "image": "busybox:1", "securityContext": {"seccompProfile": {"type": "Unconfined"}}}]),
            );
        }),
        ("mount propagation: HostToContainer, and Bidirectional when privileged", |v| {
            set(v, "/spec/containers/0/volumeMounts/0/mountPropagation", json!("HostToContainer"));
            set(
                v,
                "/spec/initContainers",
                json!([{"name": "setup", "image": "busybox:1", "securityContext": {"privileged": true},
                        "volumeMounts": [{"name": "data", "mountPath": "/d", "mountPropagation": "Bidirectional"}]}]),
            );
        }),
        ("a privileged container that asks for Unconfined: no warning", |v| {
            set(
                v,
                "/spec/containers/0/securityContext",
                json!({"privileged": true, "seccompProfile": {"type": "Unconfined"}}),
            );
        }),
        ("pod-wide supported fields", |v| {
            set(v, "/spec/dnsPolicy", json!("None"));
            set(
                v,
                "/spec/dnsConfig",
                json!({"nameservers": ["10.0.0.10"], "searches": ["svc.local."], "options": [{"name": "ndots", "value": "2"}]}),
            );
            set(v, "/spec/hostAliases", json!([{"ip": "10.1.2.3", "hostnames": ["db.local"]}]));
            set(
                v,
                "/spec/securityContext",
                json!({"runAsGroup": 10, "supplementalGroups": [5], "sysctls": [{"name": "net.ipv4.ip_forward", "value": "1"}]}),
            );
            set(v, "/spec/runtimeClassName", json!("runc"));
            set(v, "/spec/os", json!({"name": "linux"}));
            set(v, "/spec/readinessGates", json!([{"conditionType": "example.com/ready"}]));
            set(v, "/spec/hostname", json!("web-0"));
        }),
    ];
    for (name, edit) in cases {
        let mut v = base();
        edit(&mut v);
        let (pods, problems) = parse_value(&v);
        assert_eq!(pods.len(), 1, "{name}: must be accepted: {problems:#?}");
        assert!(problems.is_empty(), "{name}: no problems expected: {problems:#?}");
    }
}

#[test]
fn unset_values_are_not_reported() {
    // kubectl/kubeadm output carries nulls and empty objects for fields nobody set.
    let mut v = base();
    set(&mut v, "/metadata/creationTimestamp", Value::Null);
    set(&mut v, "/status", json!({}));
    set(&mut v, "/spec/tolerations", json!([]));
    set(&mut v, "/spec/containers/0/resources", json!({}));
    set(&mut v, "/spec/containers/0/stdin", json!(false));
    set(&mut v, "/spec/enableServiceLinks", json!(false));
    let (pods, problems) = parse_value(&v);
    assert_eq!(pods.len(), 1);
    assert!(problems.is_empty(), "{problems:#?}");
}
