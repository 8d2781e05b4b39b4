use jiff::tz::TimeZone;
use serde_json::json;

use super::*;
use crate::cli::describe_containers::describe_probe;
use crate::fixtures::{ago, now, pod, running, with_last_exit};
use crate::proto;

fn event(secs_ago: i64, kind: &str, reason: &str, count: u32, message: &str) -> EventView {
    EventView::from(&proto::Event {
        time: ago(secs_ago),
        r#type: kind.into(),
        reason: reason.into(),
        object: "default/web/app".into(),
        message: message.into(),
        count,
        first_time: String::new(),
        object_kind: String::new(),
    })
}

#[test]
fn describe_running_pod() {
    let p = pod(json!({
        "metadata": {"labels": {"tier": "front", "app": "web"},
                     "annotations": {"crilet.io/log-directory": "/var/log/pods/default_web_u-1"}},
        "spec": {
            "containers": [{
                "name": "app", "image": "busybox", "command": ["sh", "-c"], "args": ["httpd -f -p 8080"],
                "ports": [{"containerPort": 8080, "protocol": "TCP"}],
                "readinessProbe": {"httpGet": {"path": "/", "port": 8080}, "periodSeconds": 5},
                "env": [{"name": "MODE", "value": "prod"},
                        {"name": "POD", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}}],
                "volumeMounts": [{"name": "cache", "mountPath": "/cache"}],
                "resources": {"limits": {"memory": "64Mi"}},
            }],
            "volumes": [{"name": "cache", "emptyDir": {}}],
            "readinessGates": [{"conditionType": "example.com/lb"}],
        },
        "status": {
            "hostIP": "192.168.1.10",
            "conditions": [{"type": "Initialized", "status": "True"}, {"type": "Ready", "status": "True"},
                           {"type": "example.com/lb", "status": "True"}],
            "containerStatuses": [with_last_exit(running("app", true, 1), 60)],
        },
    }));
    let events = [
        event(10, "Warning", "BackOff", 3, "Back-off restarting failed container"),
        event(120, "Normal", "Started", 1, "Started container app"),
    ];
    let warnings = ["spec.containers[0].resources: not enforced".to_string()];
    let input = DescribeInput {
        pod: &p,
        manifest_file: "/etc/crilet/manifests/web.yaml",
        warnings: &warnings,
        events: &events,
        runtime: None,
        timeline: &[],
    };
    let want = "\
Name:         web
Namespace:    default
Node:         node1/192.168.1.10
Start Time:   Mon, 06 May 2024 11:55:00 +0000
Manifest:     /etc/crilet/manifests/web.yaml
Labels:       app=web
              tier=front
Annotations:  crilet.io/log-directory: /var/log/pods/default_web_u-1
Status:       Running
IP:           10.88.0.5
IPs:
  IP:  10.88.0.5
Containers:
  app:
    Container ID:  containerd://app-id
    Image:         busybox
    Image ID:      docker.io/library/busybox@sha256:abc
    Port:          8080/TCP
    Host Port:     0/TCP
    Command:
      sh
      -c
    Args:
      httpd -f -p 8080
    State:          Running
      Started:      Mon, 06 May 2024 11:58:00 +0000
    Last State:     Terminated
      Reason:       Error
      Exit Code:    1
      Started:      Mon, 06 May 2024 11:58:55 +0000
      Finished:     Mon, 06 May 2024 11:59:00 +0000
    Ready:          True
    Restart Count:  1
    Limits:
      memory:   64Mi
    Readiness:  http-get http://:8080/ delay=0s timeout=1s period=5s #success=1 #failure=3
    Environment:
      MODE:  prod
      POD:   web (v1:metadata.name)
    Mounts:
      /cache from cache (rw)
Readiness Gates:
  Type             Status
  example.com/lb   True 
Conditions:
  Type             Status
  Initialized      True 
  Ready            True 
  example.com/lb   True 
Volumes:
  cache:
    Type:        EmptyDir (a temporary directory that shares a pod's lifetime)
    Medium:      
    SizeLimit:   <unset>
QoS Class:       Burstable
Node-Selectors:  <none>
Tolerations:     <none>
Warnings:
  spec.containers[0].resources: not enforced
Events:
  Type     Reason   Age       From    Message
  ----     ------   ----      ----    -------
  Normal   Started  2m        crilet  Started container app
  Warning  BackOff  10s (x3)  crilet  Back-off restarting failed container
";
    let got = describe_pod(&input, now(), &TimeZone::UTC);
    assert_eq!(got, want, "\n--- got ---\n{got}");
}

#[test]
fn describe_sparse_pod() {
    let p = pod(json!({
        "metadata": {"deletionTimestamp": ago(4), "deletionGracePeriodSeconds": 30},
        "spec": {"nodeName": null, "initContainers": [{"name": "init", "image": "busybox"}]},
        "status": {"podIPs": null, "podIP": null, "startTime": null, "conditions": null,
                   "initContainerStatuses": [{"name": "init", "ready": false, "restartCount": 0, "image": "busybox",
                                               "imageID": "", "state": {"waiting": {"reason": "PodInitializing"}}}],
                   "containerStatuses": null},
    }));
    let input = DescribeInput {
        pod: &p,
        manifest_file: "",
        warnings: &[],
        events: &[],
        runtime: None,
        timeline: &[],
    };
    let got = describe_pod(&input, now(), &TimeZone::UTC);
    let want = "\
Name:                      web
Namespace:                 default
Node:                      <none>
Manifest:                  <none>
Labels:                    <none>
Annotations:               <none>
Status:                    Terminating (lasts 4s)
Termination Grace Period:  30s
IP:                        
IPs:                       <none>
Init Containers:
  init:
    Container ID:   
    Image:          busybox
    Image ID:       
    Port:           <none>
    Host Port:      <none>
    State:          Waiting
      Reason:       PodInitializing
    Ready:          False
    Restart Count:  0
    Environment:    <none>
    Mounts:         <none>
Containers:
  app:
    Image:        busybox
    Port:         <none>
    Host Port:    <none>
    Environment:  <none>
    Mounts:       <none>
Volumes:          <none>
QoS Class:        BestEffort
Node-Selectors:   <none>
Tolerations:      <none>
Warnings:         <none>
Events:           <none>
";
    assert_eq!(got, want, "\n--- got ---\n{got}");
}

#[test]
fn probe_one_liners() {
    let probe = |v: serde_json::Value| serde_json::from_value(v).expect("valid probe");
    let cases = [
        (
            json!({"httpGet": {"path": "/healthz", "port": 8080}}),
            "http-get http://:8080/healthz delay=0s timeout=1s period=10s #success=1 #failure=3",
        ),
        (
            json!({"httpGet": {"host": "::1", "port": "web", "scheme": "HTTPS"}, "initialDelaySeconds": 3}),
            "http-get https://[::1]:web delay=3s timeout=1s period=10s #success=1 #failure=3",
        ),
        (
            json!({"exec": {"command": ["cat", "/tmp/ok"]}, "failureThreshold": 1}),
            "exec [cat /tmp/ok] delay=0s timeout=1s period=10s #success=1 #failure=1",
        ),
        (
            json!({"tcpSocket": {"port": 5432}, "timeoutSeconds": 2}),
            "tcp-socket :5432 delay=0s timeout=2s period=10s #success=1 #failure=3",
        ),
        (
            json!({"grpc": {"port": 9090}}),
            "grpc <pod>:9090  delay=0s timeout=1s period=10s #success=1 #failure=3",
        ),
    ];
    for (p, want) in cases {
        assert_eq!(describe_probe(&probe(p)), want);
    }
}

#[test]
fn qos_cases() {
    let with = |resources: serde_json::Value| {
        qos_class(&pod(
            json!({"spec": {"containers": [{"name": "app", "image": "b", "resources": resources}]}}),
        ))
    };
    assert_eq!(with(json!({})), "BestEffort");
    assert_eq!(with(json!({"limits": {"cpu": "1", "memory": "1Gi"}})), "Guaranteed");
    assert_eq!(
        with(json!({"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "500m"}})),
        "Burstable"
    );
}

#[test]
fn describe_says_when_the_runtime_is_unavailable() {
    let p = pod(json!({}));
    let events = [event(12, "Warning", "RuntimeUnavailable", 1, "Container runtime is unavailable: boom")];
    let down = proto::RuntimeHealth {
        available: false,
        since: ago(12),
        last_error: "CRI ListPodSandbox for all pods failed: Unavailable: connection refused".into(),
    };
    let input = DescribeInput {
        pod: &p,
        manifest_file: "",
        warnings: &[],
        events: &events,
        runtime: Some(&down),
        timeline: &[],
    };
    let got = describe_pod(&input, now(), &TimeZone::UTC);
    let lines: Vec<&str> = got.lines().collect();
    let status = lines.iter().position(|l| l.starts_with("Status:")).expect("a Status line");
    assert_eq!(
        lines[status + 1],
        "Runtime:      Unavailable for 12s (since Mon, 06 May 2024 11:59:48 +0000): CRI ListPodSandbox for all \
         pods failed: Unavailable: connection refused; status as last observed",
        "\n{got}"
    );
    assert!(
        got.contains("Warning  RuntimeUnavailable  12s   crilet  Container runtime is unavailable: boom"),
        "{got}"
    );

    let up = proto::RuntimeHealth { available: true, since: ago(3), last_error: String::new() };
    let input = DescribeInput {
        pod: &p,
        manifest_file: "",
        warnings: &[],
        events: &[],
        runtime: Some(&up),
        timeline: &[],
    };
    assert!(!describe_pod(&input, now(), &TimeZone::UTC).contains("Runtime:"), "said only while it is so");
}

fn step(ms_ago: i64, container: &str, name: &str, id: &str, detail: &str) -> proto::TimelineStep {
    proto::TimelineStep {
        time: (now() - jiff::SignedDuration::from_millis(ms_ago)).to_string(),
        container: container.into(),
        step: name.into(),
        container_id: id.into(),
        detail: detail.into(),
    }
}

/// The lines of `text` from the one equal to `start` (trimmed) up to the next less indented one.
fn section(text: &str, start: &str) -> Vec<String> {
    let lines: Vec<&str> = text.lines().collect();
    let Some(i) = lines.iter().position(|l| l.trim() == start) else { return Vec::new() };
    let indent = |l: &str| l.len() - l.trim_start().len();
    let base = indent(lines[i]);
    let mut out = vec![lines[i].trim_end().to_string()];
    out.extend(lines[i + 1..].iter().take_while(|l| indent(l) > base).map(|l| l.trim_end().to_string()));
    out
}

#[test]
fn lifecycle_timeline_cases() {
    let id1 = "3f2a1b2c3d4e5f60718293a4b5c6d7e8";
    let id2 = "99aa1b2c3d4e5f60718293a4b5c6d7e8";
    let a_day_ago = 26 * 3600 * 1000;
    // (name, steps, section title, want lines)
    let cases: Vec<(&str, Vec<proto::TimelineStep>, &str, Vec<&str>)> = vec![
        ("no steps: no section", vec![], "Timeline:", vec![]),
        (
            "no pod steps: no termination block",
            vec![step(5_000, "app", "Created", id1, "")],
            "Termination:",
            vec![],
        ),
        (
            "a container's life: deltas from the step before, the instance at Created",
            vec![
                step(60_000, "app", "Created", id1, "restart 0"),
                step(59_900, "app", "Started", id1, ""),
                step(56_900, "app", "Started=true", id1, "startup probe succeeded"),
                step(54_900, "app", "Ready=true", id1, "readiness probe succeeded"),
                step(20_000, "app", "Killing", id1, "Container app failed liveness probe, will be restarted"),
                step(19_500, "app", "Exited", id1, "exit code 137 (Error)"),
                step(19_000, "app", "Created", id2, "restart 1"),
                step(5_000, "other", "Created", id2, "restart 0"),
            ],
            "Timeline:",
            vec![
                "    Timeline:",
                "      11:59:00.000          Created       containerd://3f2a1b2c3d4e (restart 0)",
                "      11:59:00.100  +0.1s   Started",
                "      11:59:03.100  +3.0s   Started=true  startup probe succeeded",
                "      11:59:05.100  +2.0s   Ready=true    readiness probe succeeded",
                "      11:59:40.000  +34.9s  Killing       Container app failed liveness probe, will be restarted",
                "      11:59:40.500  +0.5s   Exited        exit code 137 (Error)",
                "      11:59:41.000  +0.5s   Created       containerd://99aa1b2c3d4e (restart 1)",
            ],
        ),
        (
            "a step of another day shows its date; long gaps in kubectl's units",
            vec![step(a_day_ago, "app", "Created", id1, ""), step(1_000, "app", "Started", id1, "")],
            "Timeline:",
            vec![
                "    Timeline:",
                "      2024-05-05 10:00:00.000        Created  containerd://3f2a1b2c3d4e",
                "      11:59:59.000             +25h  Started",
            ],
        ),
        (
            "a pod kill under way: the budget used so far",
            vec![step(1_200, "", "Killing", "", "pod deleted; grace period 3s")],
            "Termination:",
            vec!["Termination:", "  11:59:58.800  Killing  pod deleted; grace period 3s (1.2s used so far)"],
        ),
        (
            "a finished termination: the budget used",
            vec![
                step(9_000, "", "Killing", "", "pod deleted; grace period 3s"),
                step(6_000, "", "Stopped", "", "pod deleted: all containers stopped in 3.0s of 3s grace"),
            ],
            "Termination:",
            vec![
                "Termination:",
                "  11:59:51.000  Killing  pod deleted; grace period 3s",
                "  11:59:54.000  Stopped  pod deleted: all containers stopped in 3.0s of 3s grace",
            ],
        ),
    ];
    let p = pod(json!({}));
    for (name, steps, title, want) in cases {
        let input = DescribeInput {
            pod: &p,
            manifest_file: "",
            warnings: &[],
            events: &[],
            runtime: None,
            timeline: &steps,
        };
        let got = describe_pod(&input, now(), &TimeZone::UTC);
        assert_eq!(section(&got, title), want, "{name}:\n{got}");
        if title == "Termination:" && !want.is_empty() {
            let block = want.join("\n");
            assert!(
                got.contains(&format!("{block}\nContainers:\n")),
                "{name}: just above the containers:\n{got}"
            );
            assert!(
                got.contains("\nIP:           10.88.0.5\n"),
                "{name}: the fields keep their alignment:\n{got}"
            );
        }
    }
}
