//! Container validation cases: names, images, policies, ports, env, mounts, resources, security.

use serde_json::json;

use super::remove;
use super::set;
use super::validate::assert_refused;

#[test]
fn container_cases() {
    // names, images, policies, ports, resources, security context
    assert_refused(&[
        (
            "container name",
            |v| set(v, "/spec/containers/0/name", json!("App_1")),
            "spec.containers[0].name",
            "DNS-1123 label",
        ),
        (
            "container name missing",
            |v| remove(v, "/spec/containers/0/name"),
            "spec.containers[0].name",
            "required",
        ),
        (
            "container names unique across init and app",
            |v| set(v, "/spec/initContainers", json!([{"name": "app", "image": "busybox:1"}])),
            "spec.containers[0].name",
            "duplicate container name \"app\" (also spec.initContainers[0])",
        ),
        (
            "image empty",
            |v| set(v, "/spec/containers/0/image", json!("")),
            "spec.containers[0].image",
            "required",
        ),
        (
            "image whitespace",
            |v| set(v, "/spec/containers/0/image", json!(" nginx")),
            "spec.containers[0].image",
            "whitespace",
        ),
        (
            "restartPolicy value on an app container",
            |v| set(v, "/spec/containers/0/restartPolicy", json!("Sometimes")),
            "spec.containers[0].restartPolicy",
            "unsupported value \"Sometimes\": supported values are \"Always\", \"Never\", \"OnFailure\"",
        ),
        (
            "restart rules need a container restartPolicy",
            |v| {
                set(
                    v,
                    "/spec/containers/0/restartPolicyRules",
                    json!([{"action": "Restart", "exitCodes": {"operator": "In", "values": [42]}}]),
                )
            },
            "spec.containers[0].restartPolicy",
            "must specify restartPolicy when restart rules are used",
        ),
        (
            "restart rule without exitCodes",
            |v| {
                set(
                    v,
                    "/spec/initContainers",
                    json!([{"name": "i", "image": "b:1", "restartPolicy": "Never",
                    "restartPolicyRules": [{"action": "Restart"}]}]),
                )
            },
            "spec.initContainers[0].restartPolicyRules[0].exitCodes",
            "required",
        ),
        (
            "restart rule operator",
            |v| {
                set(v, "/spec/containers/0/restartPolicy", json!("Never"));
                set(
                    v,
                    "/spec/containers/0/restartPolicyRules",
                    json!([{"action": "Restart", "exitCodes": {"operator": "Is", "values": [1]}}]),
                )
            },
            "spec.containers[0].restartPolicyRules[0].exitCodes.operator",
            "unsupported value \"Is\"",
        ),
        (
            "restart rule action",
            |v| {
                set(v, "/spec/containers/0/restartPolicy", json!("Never"));
                set(
                    v,
                    "/spec/containers/0/restartPolicyRules",
                    json!([{"action": "Reboot", "exitCodes": {"operator": "In", "values": [1]}}]),
                )
            },
            "spec.containers[0].restartPolicyRules[0].action",
            "unsupported value \"Reboot\"",
        ),
        (
            "more than 20 restart rules",
            |v| {
                set(v, "/spec/containers/0/restartPolicy", json!("Never"));
                let rule = json!({"action": "Restart", "exitCodes": {"operator": "In", "values": [1]}});
                set(v, "/spec/containers/0/restartPolicyRules", json!(vec![rule; 21]))
            },
            "spec.containers[0].restartPolicyRules",
            "too many: 21 rules, at most 20",
        ),
        (
            "more than 255 exit codes",
            |v| {
                set(v, "/spec/containers/0/restartPolicy", json!("Never"));
                let values: Vec<i32> = (0..256).collect();
                set(
                    v,
                    "/spec/containers/0/restartPolicyRules",
                    json!([{"action": "Restart", "exitCodes": {"operator": "NotIn", "values": values}}]),
                )
            },
            "spec.containers[0].restartPolicyRules[0].exitCodes.values",
            "too many: 256 values, at most 255",
        ),
        (
            "imagePullPolicy",
            |v| set(v, "/spec/containers/0/imagePullPolicy", json!("Maybe")),
            "spec.containers[0].imagePullPolicy",
            "unsupported value",
        ),
        (
            "containerPort 0",
            |v| set(v, "/spec/containers/0/ports/0/containerPort", json!(0)),
            "spec.containers[0].ports[0].containerPort",
            "between 1 and 65535",
        ),
        (
            "containerPort too big",
            |v| set(v, "/spec/containers/0/ports/0/containerPort", json!(70000)),
            "spec.containers[0].ports[0].containerPort",
            "between 1 and 65535",
        ),
        (
            "port name too long",
            |v| set(v, "/spec/containers/0/ports/0/name", json!("averyveryverylongname")),
            "spec.containers[0].ports[0].name",
            "IANA service name",
        ),
        (
            "port name without a letter",
            |v| set(v, "/spec/containers/0/ports/0/name", json!("8080")),
            "spec.containers[0].ports[0].name",
            "IANA service name",
        ),
        (
            "port names unique",
            |v| set(v, "/spec/containers/0/ports/1", json!({"name": "http", "containerPort": 81})),
            "spec.containers[0].ports[1].name",
            "duplicate port name",
        ),
        (
            "port protocol",
            |v| set(v, "/spec/containers/0/ports/0/protocol", json!("HTTP")),
            "spec.containers[0].ports[0].protocol",
            "unsupported value \"HTTP\"",
        ),
        (
            "hostNetwork hostPort must match",
            |v| {
                set(v, "/spec/hostNetwork", json!(true));
                set(v, "/spec/containers/0/ports/0/hostPort", json!(8080));
            },
            "spec.containers[0].ports[0].hostPort",
            "must match containerPort",
        ),
        (
            "host ports unique across containers",
            |v| {
                set(v, "/spec/containers/0/ports/0/hostPort", json!(8080));
                set(
                    v,
                    "/spec/containers/1",
                    json!({"name": "b", "image": "b:1", "ports": [{"containerPort": 81, "hostPort": 8080}]}),
                );
            },
            "spec.containers[1].ports[0].hostPort",
            "duplicate host port 8080/TCP",
        ),
        (
            "cpu limit not a quantity",
            |v| set(v, "/spec/containers/0/resources", json!({"limits": {"cpu": "lots"}})),
            "spec.containers[0].resources.limits.cpu",
            "must be a quantity",
        ),
        (
            "request above limit",
            |v| {
                set(
                    v,
                    "/spec/containers/0/resources",
                    json!({"limits": {"memory": "64Mi"}, "requests": {"memory": "128Mi"}}),
                )
            },
            "spec.containers[0].resources.requests.memory",
            "less than or equal to the memory limit of 64Mi",
        ),
        (
            "negative runAsUser",
            |v| set(v, "/spec/containers/0/securityContext", json!({"runAsUser": -1})),
            "spec.containers[0].securityContext.runAsUser",
            "between 0 and 2147483647",
        ),
        (
            "privileged without escalation",
            |v| {
                set(
                    v,
                    "/spec/containers/0/securityContext",
                    json!({"privileged": true, "allowPrivilegeEscalation": false}),
                )
            },
            "spec.containers[0].securityContext",
            "allowPrivilegeEscalation",
        ),
    ]);
}

#[test]
fn env_and_mount_cases() {
    // environment variables and volume mounts
    assert_refused(&[
        (
            "mount of an unknown volume",
            |v| set(v, "/spec/containers/0/volumeMounts/0/name", json!("nope")),
            "spec.containers[0].volumeMounts[0].name",
            "not defined in spec.volumes",
        ),
        (
            "mountPath relative",
            |v| set(v, "/spec/containers/0/volumeMounts/0/mountPath", json!("data")),
            "spec.containers[0].volumeMounts[0].mountPath",
            "absolute",
        ),
        (
            "mountPath unique",
            |v| set(v, "/spec/containers/0/volumeMounts/1", json!({"name": "data", "mountPath": "/data/"})),
            "spec.containers[0].volumeMounts[1].mountPath",
            "unique",
        ),
        (
            "subPath backsteps",
            |v| set(v, "/spec/containers/0/volumeMounts/0/subPath", json!("a/../../etc")),
            "spec.containers[0].volumeMounts[0].subPath",
            "'..'",
        ),
        (
            "subPathExpr",
            |v| set(v, "/spec/containers/0/volumeMounts/0/subPathExpr", json!("$(X)")),
            "spec.containers[0].volumeMounts[0].subPathExpr",
            "not supported",
        ),
        (
            "env name with '='",
            |v| set(v, "/spec/containers/0/env", json!([{"name": "A=B", "value": "x"}])),
            "spec.containers[0].env[0].name",
            "other than '='",
        ),
        (
            "env name empty",
            |v| set(v, "/spec/containers/0/env", json!([{"name": "", "value": "x"}])),
            "spec.containers[0].env[0].name",
            "required",
        ),
        (
            "env fieldPath not supported",
            |v| {
                set(
                    v,
                    "/spec/containers/0/env",
                    json!([{"name": "L", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels"}}}]),
                )
            },
            "spec.containers[0].env[0].valueFrom.fieldRef.fieldPath",
            "not supported by crilet",
        ),
        (
            "env fieldRef apiVersion",
            |v| {
                set(
                    v,
                    "/spec/containers/0/env",
                    json!([{"name": "N", "valueFrom": {"fieldRef": {"apiVersion": "v2", "fieldPath": "metadata.name"}}}]),
                )
            },
            "spec.containers[0].env[0].valueFrom.fieldRef.apiVersion",
            "unsupported value \"v2\"",
        ),
        (
            "env value and valueFrom",
            |v| {
                set(
                    v,
                    "/spec/containers/0/env",
                    json!([{"name": "N", "value": "x", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]),
                )
            },
            "spec.containers[0].env[0].valueFrom",
            "may not be specified when value is not empty",
        ),
        (
            "env configMapKeyRef",
            |v| {
                set(
                    v,
                    "/spec/containers/0/env",
                    json!([{"name": "N", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}}]),
                )
            },
            "spec.containers[0].env[0].valueFrom.configMapKeyRef",
            "static pods cannot reference API objects",
        ),
        (
            "env secretKeyRef",
            |v| {
                set(
                    v,
                    "/spec/containers/0/env",
                    json!([{"name": "N", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]),
                )
            },
            "spec.containers[0].env[0].valueFrom.secretKeyRef",
            "static pods cannot reference API objects",
        ),
        (
            "env resourceFieldRef",
            |v| {
                set(
                    v,
                    "/spec/containers/0/env",
                    json!([{"name": "N", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}}]),
                )
            },
            "spec.containers[0].env[0].valueFrom.resourceFieldRef",
            "not supported by crilet",
        ),
        (
            "envFrom",
            |v| set(v, "/spec/containers/0/envFrom", json!([{"configMapRef": {"name": "c"}}])),
            "spec.containers[0].envFrom",
            "static pods cannot reference API objects",
        ),
    ]);
}

/// KEP-5307/5532 fields the API server accepts are accepted without a word, on app containers,
/// regular init containers and sidecars (a RestartAllContainers rule).
#[test]
fn container_restart_rules_are_accepted() {
    let mut v = super::base();
    set(&mut v, "/spec/restartPolicy", json!("Never"));
    set(&mut v, "/spec/containers/0/restartPolicy", json!("Never"));
    set(
        &mut v,
        "/spec/containers/0/restartPolicyRules",
        json!([{"action": "Restart", "exitCodes": {"operator": "In", "values": [42]}},
               {"action": "Restart", "exitCodes": {"operator": "NotIn", "values": [0, 1]}}]),
    );
    set(
        &mut v,
        "/spec/initContainers",
        json!([{"name": "i", "image": "b:1", "restartPolicy": "OnFailure"},
               {"name": "s", "image": "b:1", "restartPolicy": "Always",
                "restartPolicyRules": [{"action": "RestartAllContainers", "exitCodes": {"operator": "In", "values": [3]}}]}]),
    );
    let (pods, problems) = super::parse_value(&v);
    assert_eq!(pods.len(), 1, "{:#?}", super::lines(&problems, crate::source::ProblemKind::Error));
    assert!(problems.is_empty(), "no warning either: {problems:#?}");
    let rules = pods[0].pod.spec.as_ref().and_then(|s| s.containers[0].restart_policy_rules.clone());
    assert_eq!(rules.map(|r| r.len()), Some(2));
}
