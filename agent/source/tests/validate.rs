//! Validation cases: each edit of the healthy base pod, and the field path and reason it must be
//! refused with. `assert_refused` is shared by the sibling `validate_*` test files.

use serde_json::{Value, json};

use super::{base, lines, parse_value, remove, set};
use crate::source::ProblemKind;

pub(super) type Edit = fn(&mut Value);

/// Each case: name, edit of the base pod, the field path of the error, a substring of its reason.
pub(super) fn assert_refused(cases: &[(&str, Edit, &str, &str)]) {
    for (name, edit, field, reason) in cases {
        let mut v = base();
        edit(&mut v);
        let (pods, problems) = parse_value(&v);
        assert!(pods.is_empty(), "{name}: the pod must be refused");
        let found = problems.iter().any(|p| {
            p.kind == ProblemKind::Error && p.field.as_deref() == Some(*field) && p.reason.contains(reason)
        });
        assert!(
            found,
            "{name}: want error at {field} containing {reason:?}, got {:#?}",
            lines(&problems, ProblemKind::Error)
        );
        assert!(problems.iter().all(|p| p.doc == Some(0)), "{name}: problems carry the document index");
    }
}

#[test]
fn pod_cases() {
    // metadata and pod-wide fields
    assert_refused(&[
        ("name missing", |v| remove(v, "/metadata/name"), "metadata.name", "required"),
        (
            "name not a subdomain",
            |v| set(v, "/metadata/name", json!("Web_1")),
            "metadata.name",
            "DNS-1123 subdomain",
        ),
        (
            "name too long",
            |v| set(v, "/metadata/name", json!("a".repeat(254))),
            "metadata.name",
            "at most 253",
        ),
        (
            "namespace not a label",
            |v| set(v, "/metadata/namespace", json!("my.ns")),
            "metadata.namespace",
            "DNS-1123 label",
        ),
        ("label value", |v| set(v, "/metadata/labels/app", json!("-x-")), "metadata.labels", "label value"),
        ("label key", |v| set(v, "/metadata/labels/a b", json!("x")), "metadata.labels", "qualified name"),
        (
            "no app container",
            |v| set(v, "/spec/containers", json!([])),
            "spec.containers",
            "at least one container",
        ),
        (
            "pod restartPolicy",
            |v| set(v, "/spec/restartPolicy", json!("Sometimes")),
            "spec.restartPolicy",
            "unsupported value \"Sometimes\"",
        ),
        (
            "negative grace period",
            |v| set(v, "/spec/terminationGracePeriodSeconds", json!(-1)),
            "spec.terminationGracePeriodSeconds",
            "greater than or equal to 0",
        ),
        (
            "activeDeadlineSeconds 0",
            |v| set(v, "/spec/activeDeadlineSeconds", json!(0)),
            "spec.activeDeadlineSeconds",
            "between 1 and",
        ),
        (
            "dnsPolicy None needs dnsConfig",
            |v| set(v, "/spec/dnsPolicy", json!("None")),
            "spec.dnsConfig",
            "required when dnsPolicy is None",
        ),
        ("dnsPolicy", |v| set(v, "/spec/dnsPolicy", json!("Cluster")), "spec.dnsPolicy", "unsupported value"),
        (
            "nameserver",
            |v| set(v, "/spec/dnsConfig", json!({"nameservers": ["dns.local"]})),
            "spec.dnsConfig.nameservers[0]",
            "IP address",
        ),
        ("hostname", |v| set(v, "/spec/hostname", json!("Web.1")), "spec.hostname", "DNS-1123 label"),
        (
            "shareProcessNamespace with hostPID",
            |v| {
                set(v, "/spec/shareProcessNamespace", json!(true));
                set(v, "/spec/hostPID", json!(true));
            },
            "spec.shareProcessNamespace",
            "hostPID",
        ),
        (
            "sysctl name",
            |v| set(v, "/spec/securityContext", json!({"sysctls": [{"name": "net/../x", "value": "1"}]})),
            "spec.securityContext.sysctls[0].name",
            "sysctl name",
        ),
        (
            "host alias ip",
            |v| set(v, "/spec/hostAliases", json!([{"ip": "nope", "hostnames": ["a"]}])),
            "spec.hostAliases[0].ip",
            "IP address",
        ),
        (
            "windows",
            |v| set(v, "/spec/os", json!({"name": "windows"})),
            "spec.os.name",
            "PodOSNotSupported: Failed to admit pod as the OS field doesn't match node OS",
        ),
        (
            "kubernetes.io/os label",
            |v| set(v, "/metadata/labels", json!({"kubernetes.io/os": "windows"})),
            "metadata.labels",
            "PodOSSelectorNodeLabelDoesNotMatch: Failed to admit pod as the `kubernetes.io/os` label",
        ),
        (
            "imagePullSecrets",
            |v| set(v, "/spec/imagePullSecrets", json!([{"name": "s"}])),
            "spec.imagePullSecrets",
            "static pods cannot reference API objects (secrets)",
        ),
        (
            "ephemeralContainers",
            |v| set(v, "/spec/ephemeralContainers", json!([{"name": "e", "image": "x"}])),
            "spec.ephemeralContainers",
            "not supported",
        ),
        (
            "hostUsers false with hostNetwork",
            |v| {
                set(v, "/spec/hostUsers", json!(false));
                set(v, "/spec/hostNetwork", json!(true));
            },
            "spec.hostNetwork",
            "may not be true when hostUsers is false",
        ),
        (
            "hostUsers false with hostPID",
            |v| {
                set(v, "/spec/hostUsers", json!(false));
                set(v, "/spec/hostPID", json!(true));
            },
            "spec.hostPID",
            "may not be true when hostUsers is false",
        ),
        (
            "hostUsers false with hostIPC",
            |v| {
                set(v, "/spec/hostUsers", json!(false));
                set(v, "/spec/hostIPC", json!(true));
            },
            "spec.hostIPC",
            "may not be true when hostUsers is false",
        ),
        // 1.34-1.36 API fields that would change what runs if they were ignored.
        (
            "hostnameOverride",
            |v| set(v, "/spec/hostnameOverride", json!("other")),
            "spec.hostnameOverride",
            "not supported by crilet",
        ),
        (
            "env fileKeyRef",
            |v| {
                set(
                    v,
                    "/spec/containers/0/env",
                    json!([{"name": "X", "valueFrom": {"fileKeyRef": {"volumeName": "v", "path": "p", "key": "k"}}}]),
                )
            },
            "spec.containers[0].env[0].valueFrom.fileKeyRef",
            "not supported by crilet",
        ),
        (
            "type error names its path",
            |v| set(v, "/spec/containers/0/ports/0/containerPort", json!("80")),
            "spec.containers[0].ports[0].containerPort",
            "invalid type: string \"80\"",
        ),
        (
            "type error in a list",
            |v| set(v, "/spec/containers/0/command", json!("sleep 1")),
            "spec.containers[0].command",
            "invalid type",
        ),
    ]);
}

#[test]
fn volume_cases() {
    // volumes and their sources
    assert_refused(&[
        (
            "volume name",
            |v| set(v, "/spec/volumes/0/name", json!("Data")),
            "spec.volumes[0].name",
            "DNS-1123 label",
        ),
        (
            "volume names unique",
            |v| set(v, "/spec/volumes/1", json!({"name": "data"})),
            "spec.volumes[1].name",
            "duplicate volume name",
        ),
        (
            "two volume sources",
            |v| set(v, "/spec/volumes/0/hostPath", json!({"path": "/srv"})),
            "spec.volumes[0]",
            "more than 1 volume type",
        ),
        (
            "secret volume",
            |v| set(v, "/spec/volumes/0", json!({"name": "data", "secret": {"secretName": "s"}})),
            "spec.volumes[0].secret",
            "volume type secret is not supported by crilet (static pods cannot reference API objects)",
        ),
        (
            "nfs volume",
            |v| set(v, "/spec/volumes/0", json!({"name": "data", "nfs": {"server": "x", "path": "/"}})),
            "spec.volumes[0].nfs",
            "volume type nfs is not supported by crilet",
        ),
        (
            "hostPath relative",
            |v| set(v, "/spec/volumes/0", json!({"name": "data", "hostPath": {"path": "srv"}})),
            "spec.volumes[0].hostPath.path",
            "absolute",
        ),
        (
            "hostPath type",
            |v| {
                set(
                    v,
                    "/spec/volumes/0",
                    json!({"name": "data", "hostPath": {"path": "/srv", "type": "Dir"}}),
                )
            },
            "spec.volumes[0].hostPath.type",
            "unsupported value \"Dir\"",
        ),
        (
            "emptyDir hugepages",
            |v| set(v, "/spec/volumes/0/emptyDir", json!({"medium": "HugePages-2Mi"})),
            "spec.volumes[0].emptyDir.medium",
            "hugepages",
        ),
        (
            "emptyDir sizeLimit",
            |v| set(v, "/spec/volumes/0/emptyDir", json!({"sizeLimit": "lots"})),
            "spec.volumes[0].emptyDir.sizeLimit",
            "must be a quantity",
        ),
        (
            "mountPropagation unknown",
            |v| set(v, "/spec/containers/0/volumeMounts/0/mountPropagation", json!("rshared")),
            "spec.containers[0].volumeMounts[0].mountPropagation",
            "unsupported value \"rshared\": supported values are \"Bidirectional\", \"HostToContainer\", \"None\"",
        ),
        (
            "mountPropagation Bidirectional, not privileged",
            |v| {
                set(v, "/spec/containers/0/volumeMounts/0/mountPropagation", json!("Bidirectional"));
                set(v, "/spec/containers/0/securityContext", json!({"privileged": false}));
            },
            "spec.containers[0].volumeMounts[0].mountPropagation",
            "Bidirectional mount propagation is available only to privileged containers",
        ),
        (
            "mountPropagation Bidirectional in an init container, privileged unset",
            |v| {
                set(
                    v,
                    "/spec/initContainers",
                    json!([{"name": "setup", "image": "busybox:1",
                            "volumeMounts": [{"name": "data", "mountPath": "/d", "mountPropagation": "Bidirectional"}]}]),
                );
            },
            "spec.initContainers[0].volumeMounts[0].mountPropagation",
            "available only to privileged containers",
        ),
    ]);
}

/// `seccompProfile` as the API server validates it, at both levels: the type is one of three,
/// a Localhost profile is named, relative and never climbs out of `<root-dir>/seccomp`.
#[test]
fn seccomp_cases() {
    assert_refused(&[
        (
            "unknown profile type",
            |v| set(v, "/spec/securityContext", json!({"seccompProfile": {"type": "Default"}})),
            "spec.securityContext.seccompProfile.type",
            "unsupported value \"Default\": supported values are \"Localhost\", \"RuntimeDefault\", \"Unconfined\"",
        ),
        (
            "empty profile type",
            |v| set(v, "/spec/containers/0/securityContext", json!({"seccompProfile": {"type": ""}})),
            "spec.containers[0].securityContext.seccompProfile.type",
            "required",
        ),
        (
            "Localhost without a profile",
            |v| {
                set(v, "/spec/containers/0/securityContext", json!({"seccompProfile": {"type": "Localhost"}}))
            },
            "spec.containers[0].securityContext.seccompProfile.localhostProfile",
            "must be set when seccomp type is Localhost",
        ),
        (
            "Localhost climbing out with ..",
            |v| {
                set(
                    v,
                    "/spec/containers/0/securityContext",
                    json!({"seccompProfile": {"type": "Localhost", "localhostProfile": "profiles/../../../etc/x.json"}}),
                )
            },
            "spec.containers[0].securityContext.seccompProfile.localhostProfile",
            "must not contain '..'",
        ),
        (
            "Localhost absolute",
            |v| {
                set(
                    v,
                    "/spec/securityContext",
                    json!({"seccompProfile": {"type": "Localhost", "localhostProfile": "/etc/x.json"}}),
                )
            },
            "spec.securityContext.seccompProfile.localhostProfile",
            "must be a relative path",
        ),
        (
            "localhostProfile with another type",
            |v| {
                set(
                    v,
                    "/spec/securityContext",
                    json!({"seccompProfile": {"type": "RuntimeDefault", "localhostProfile": "a.json"}}),
                )
            },
            "spec.securityContext.seccompProfile.localhostProfile",
            "can only be set when seccomp type is Localhost",
        ),
    ]);
}

#[test]
fn apparmor_cases() {
    const KEY: &str = "container.apparmor.security.beta.kubernetes.io/app";
    assert_refused(&[
        (
            "unknown profile type",
            |v| set(v, "/spec/securityContext", json!({"appArmorProfile": {"type": "Default"}})),
            "spec.securityContext.appArmorProfile.type",
            "unsupported value \"Default\": supported values are \"Localhost\", \"RuntimeDefault\", \"Unconfined\"",
        ),
        (
            "empty profile type",
            |v| set(v, "/spec/containers/0/securityContext", json!({"appArmorProfile": {"type": ""}})),
            "spec.containers[0].securityContext.appArmorProfile.type",
            "required",
        ),
        (
            "Localhost without a profile",
            |v| {
                set(
                    v,
                    "/spec/containers/0/securityContext",
                    json!({"appArmorProfile": {"type": "Localhost"}}),
                )
            },
            "spec.containers[0].securityContext.appArmorProfile.localhostProfile",
            "must be set when AppArmor type is Localhost",
        ),
        (
            "Localhost with an empty name",
            |v| {
                set(
                    v,
                    "/spec/securityContext",
                    json!({"appArmorProfile": {"type": "Localhost", "localhostProfile": ""}}),
                )
            },
            "spec.securityContext.appArmorProfile.localhostProfile",
            "must be set when AppArmor type is Localhost",
        ),
        (
            "Localhost padded",
            |v| {
                set(
                    v,
                    "/spec/securityContext",
                    json!({"appArmorProfile": {"type": "Localhost", "localhostProfile": " x"}}),
                )
            },
            "spec.securityContext.appArmorProfile.localhostProfile",
            "must not be padded with whitespace",
        ),
        (
            "localhostProfile with another type",
            |v| {
                set(
                    v,
                    "/spec/securityContext",
                    json!({"appArmorProfile": {"type": "RuntimeDefault", "localhostProfile": "x"}}),
                )
            },
            "spec.securityContext.appArmorProfile.localhostProfile",
            "can only be set when AppArmor type is Localhost",
        ),
        (
            "bad annotation value",
            |v| set(v, "/metadata/annotations", json!({KEY: "docker-default"})),
            "metadata.annotations[container.apparmor.security.beta.kubernetes.io/app]",
            "invalid AppArmor profile name: \"docker-default\"",
        ),
        (
            "annotation with an empty Localhost name",
            |v| set(v, "/metadata/annotations", json!({KEY: "localhost/"})),
            "metadata.annotations[container.apparmor.security.beta.kubernetes.io/app]",
            "invalid empty AppArmor profile name",
        ),
        (
            "annotation naming no container",
            |v| {
                set(
                    v,
                    "/metadata/annotations",
                    json!({"container.apparmor.security.beta.kubernetes.io/nope": "unconfined"}),
                )
            },
            "metadata.annotations[container.apparmor.security.beta.kubernetes.io/nope]",
            "container \"nope\" not found",
        ),
        (
            "annotation and field disagree",
            |v| {
                set(v, "/metadata/annotations", json!({KEY: "unconfined"}));
                set(
                    v,
                    "/spec/containers/0/securityContext",
                    json!({"appArmorProfile": {"type": "RuntimeDefault"}}),
                )
            },
            "spec.containers[0].securityContext.appArmorProfile.type",
            "apparmor type in annotation and field must match",
        ),
        (
            "annotation and field name different profiles",
            |v| {
                set(v, "/metadata/annotations", json!({KEY: "localhost/a"}));
                set(
                    v,
                    "/spec/securityContext",
                    json!({"appArmorProfile": {"type": "Localhost", "localhostProfile": "b"}}),
                )
            },
            "spec.containers[0].securityContext.appArmorProfile.localhostProfile",
            "apparmor profile in annotation and field must match",
        ),
    ]);
}

#[test]
fn apparmor_profiles_and_annotations_that_agree_are_accepted() {
    let mut v = base();
    set(
        &mut v,
        "/metadata/annotations",
        json!({"container.apparmor.security.beta.kubernetes.io/app": "localhost/k8s-deny"}),
    );
    set(
        &mut v,
        "/spec/containers/0/securityContext",
        json!({"appArmorProfile": {"type": "Localhost", "localhostProfile": "k8s-deny"}}),
    );
    set(&mut v, "/spec/securityContext", json!({"appArmorProfile": {"type": "RuntimeDefault"}}));
    let (pods, problems) = parse_value(&v);
    assert_eq!(pods.len(), 1, "{:#?}", lines(&problems, ProblemKind::Error));
    let warnings = lines(&problems, ProblemKind::Warning);
    assert!(
        warnings.iter().any(|w| w.contains("deprecated since v1.30")),
        "the annotation is deprecated: {warnings:#?}"
    );
    assert!(!warnings.iter().any(|w| w.starts_with("spec.")), "the field is supported: {warnings:#?}");
}
