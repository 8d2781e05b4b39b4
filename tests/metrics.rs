//! `--metrics-bind-address` against the real containerd: `/metrics` parsed with a Prometheus
//! text-format parser shows the pod start latency, running pods and containers, probe results,
//! restarts, CRI operations and relists of a real pod; `/healthz` is 200 while all is well and
//! 500 naming the runtime while the runtime does not answer (faults from the CRI proxy, so
//! containerd, shared with other suites, keeps running); a busy address stops the agent; and
//! without the flag the agent listens on no TCP port at all.

mod common;

use std::collections::HashSet;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::cri_proxy::{CriProxy, Fault};
use common::*;
use prometheus_parse::{Sample, Scrape, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tonic::Code;

/// A free loopback address (bound to port 0 and released; the agent binds it next).
fn free_address() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    l.local_addr().expect("local address").to_string()
}

/// A response: status code, headers (lower-cased names) and body.
struct Reply {
    code: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }
}

/// `GET path` over HTTP/1.1 on a fresh connection; None while nothing answers.
async fn get(address: &str, path: &str) -> Option<Reply> {
    let exchange = async {
        let mut s = tokio::net::TcpStream::connect(address).await.ok()?;
        let request = format!("GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n");
        s.write_all(request.as_bytes()).await.ok()?;
        let mut raw = Vec::new();
        s.read_to_end(&mut raw).await.ok()?;
        let text = String::from_utf8(raw).ok()?;
        let (head, body) = text.split_once("\r\n\r\n")?;
        let mut lines = head.lines();
        let code = lines.next()?.split_whitespace().nth(1)?.parse().ok()?;
        let headers = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
            .collect();
        Some(Reply { code, headers, body: body.to_string() })
    };
    tokio::time::timeout(Duration::from_secs(10), exchange).await.ok().flatten()
}

fn parse(text: &str) -> Scrape {
    Scrape::parse(text.lines().map(|l| Ok(l.to_string()))).expect("the exposition parses")
}

/// Samples of `name` carrying every label of `want`.
fn find<'a>(scrape: &'a Scrape, name: &str, want: &[(&str, &str)]) -> Vec<&'a Sample> {
    scrape
        .samples
        .iter()
        .filter(|s| s.metric == name && want.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
        .collect()
}

/// The sum of the scalar samples of `name` carrying `want` (0 when there is none).
fn sum(scrape: &Scrape, name: &str, want: &[(&str, &str)]) -> f64 {
    find(scrape, name, want)
        .iter()
        .map(|s| match &s.value {
            Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => *v,
            other => panic!("{name} is not a scalar: {other:?}"),
        })
        .sum()
}

/// TCP ports the process `pid` listens on (its socket inodes matched against /proc/net/tcp*).
fn listening_ports(pid: u32) -> Vec<u16> {
    let inodes: HashSet<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| {
            d.filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
                .filter_map(|l| {
                    let l = l.to_string_lossy().to_string();
                    Some(l.strip_prefix("socket:[")?.strip_suffix(']')?.to_string())
                })
                .collect()
        })
        .unwrap_or_default();
    let mut ports = Vec::new();
    for table in ["tcp", "tcp6"] {
        let text = std::fs::read_to_string(format!("/proc/{pid}/net/{table}")).unwrap_or_default();
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            // local_address, st (0A = LISTEN), inode
            if f.len() > 9 && f[3] == "0A" && inodes.contains(f[9]) {
                if let Some(port) = f[1].rsplit(':').next().and_then(|p| u16::from_str_radix(p, 16).ok()) {
                    ports.push(port);
                }
            }
        }
    }
    ports
}

fn port_of(address: &str) -> u16 {
    address.rsplit(':').next().and_then(|p| p.parse().ok()).expect("port")
}

const NS: &str = "t-metrics";

const PROBED: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: probed, namespace: t-metrics}
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: app
    image: ${CRILET_IMAGE_BUSYBOX}
    imagePullPolicy: Always
    command: [sh, -c, 'trap "exit 0" TERM; while true; do sleep 1; done']
    readinessProbe:
      exec: {command: [sh, -c, 'true']}
      periodSeconds: 1
"#;

/// Scrapes until `check` finds nothing missing (each missing thing is named), or panics after
/// `limit` with what was still missing and the last exposition.
async fn scrape_until(address: &str, limit: Duration, check: impl Fn(&Scrape) -> Vec<String>) -> Scrape {
    let start = Instant::now();
    loop {
        let reply = get(address, "/metrics").await;
        let text = reply.as_ref().filter(|r| r.code == 200).map(|r| r.body.clone()).unwrap_or_default();
        let scrape = parse(&text);
        let missing = check(&scrape);
        if missing.is_empty() {
            return scrape;
        }
        if start.elapsed() > limit {
            panic!(
                "after {limit:?}, /metrics still lacks:\n  {}\n--- last scrape ---\n{text}",
                missing.join("\n  ")
            );
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// `what` is missing unless `ok`.
fn need(missing: &mut Vec<String>, ok: bool, what: &str) {
    if !ok {
        missing.push(what.to_string());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn metrics_show_a_running_pod_and_healthz_is_ok() {
    let address = free_address();
    let mut a = Agent::start_with_args("metrics", &["--metrics-bind-address", &address], &[]).await;
    a.write_manifest("probed.yaml", PROBED);
    let (restarter, signal) = exit_on_signal_pod(&a, "restarter", NS);
    a.write_manifest("restarter.yaml", &restarter);
    let p = running_pod(&a, "probed").await;
    let uid = p["metadata"]["uid"].as_str().expect("uid").to_string();
    let pid = a.pid().expect("agent pid");
    assert!(listening_ports(pid).contains(&port_of(&address)), "the agent listens on {address}");

    // A restart, for the restart counter.
    wait_for("restarter running", Duration::from_secs(60), || async {
        a.pod("restarter").filter(|p| running(p, "main")).map(drop)
    })
    .await;
    std::fs::write(signal.join("exit"), "").expect("signal file");
    wait_for("restarter restarted once and running", Duration::from_secs(60), || async {
        a.pod("restarter").filter(|p| restart_count(p, "main") == Some(1) && running(p, "main")).map(drop)
    })
    .await;

    let evented = a.env.get("CRILET_RUNTIME") != "1.6";
    let probe = [("probe_type", "Readiness"), ("container", "app"), ("pod", "probed"), ("namespace", NS)];
    let successful = [&probe[..], &[("result", "successful"), ("pod_uid", uid.as_str())]].concat();
    let scrape = scrape_until(&address, Duration::from_secs(30), |s| {
        let mut m = Vec::new();
        need(&mut m, sum(s, "kubelet_running_pods", &[]) >= 2.0, "kubelet_running_pods >= 2");
        need(
            &mut m,
            sum(s, "kubelet_running_containers", &[("container_state", "running")]) >= 2.0,
            "kubelet_running_containers{container_state=running} >= 2",
        );
        need(
            &mut m,
            sum(s, "kubelet_pod_start_sli_duration_seconds_count", &[]) >= 2.0,
            "two pod start SLI samples",
        );
        need(&mut m, sum(s, "kubelet_pod_start_duration_seconds_count", &[]) >= 2.0, "two pod start samples");
        need(
            &mut m,
            sum(s, "prober_probe_total", &successful) > 0.0,
            "successful readiness probes of probed",
        );
        need(
            &mut m,
            sum(s, "prober_probe_duration_seconds_count", &probe) > 0.0,
            "probe durations of probed",
        );
        for op in ["run_podsandbox", "create_container", "start_container", "exec_sync", "list_podsandbox"] {
            let l = [("operation_type", op)];
            need(&mut m, sum(s, "kubelet_runtime_operations_total", &l) > 0.0, &format!("{op} operations"));
            let d = sum(s, "kubelet_runtime_operations_duration_seconds_count", &l);
            need(&mut m, d > 0.0, &format!("{op} durations"));
        }
        need(&mut m, sum(s, "kubelet_pleg_relist_duration_seconds_count", &[]) > 0.0, "relist durations");
        need(&mut m, sum(s, "kubelet_pleg_relist_interval_seconds_count", &[]) > 0.0, "relist intervals");
        let restarts = [("namespace", NS), ("pod", "restarter"), ("container", "main")];
        need(
            &mut m,
            sum(s, "crilet_container_restarts_total", &restarts) == 1.0,
            "one restart of restarter/main",
        );
        if evented {
            need(&mut m, sum(s, "crilet_cri_events_total", &[]) > 0.0, "CRI events");
            let conn = sum(s, "kubelet_evented_pleg_connection_success_count", &[]);
            need(&mut m, conn >= 1.0, "an evented PLEG connection");
            let lat = sum(s, "kubelet_evented_pleg_connection_latency_seconds_count", &[]);
            need(&mut m, lat > 0.0, "event latencies");
        }
        m
    })
    .await;

    // The probed pod pulled its image (imagePullPolicy: Always): the SLI leaves that time out.
    let sli = sum(&scrape, "kubelet_pod_start_sli_duration_seconds_sum", &[]);
    let total = sum(&scrape, "kubelet_pod_start_total_duration_seconds_sum", &[]);
    assert!(sli < total, "the SLI ({sli}s) must exclude the pull time included in the total ({total}s)");
    let buckets = find(&scrape, "kubelet_pod_start_sli_duration_seconds", &[]);
    match buckets.first().map(|s| &s.value) {
        Some(Value::Histogram(b)) => {
            let bounds: Vec<f64> = b.iter().map(|b| b.less_than).filter(|v| v.is_finite()).collect();
            assert_eq!(bounds, crilet::metrics::POD_START_BUCKETS, "the kubelet's pod start buckets");
        }
        other => panic!("kubelet_pod_start_sli_duration_seconds is not a histogram: {other:?}"),
    }
    let failed =
        sum(&scrape, "kubelet_runtime_operations_errors_total", &[("operation_type", "run_podsandbox")]);
    assert_eq!(failed, 0.0, "no sandbox failed to start");

    let reply = get(&address, "/metrics").await.expect("/metrics answers");
    assert_eq!(reply.header("content-type"), Some("text/plain; version=0.0.4; charset=utf-8"));
    let health = get(&address, "/healthz").await.expect("/healthz answers");
    assert_eq!((health.code, health.body.as_str()), (200, "ok\n"), "a healthy agent");
    let other = get(&address, "/nope").await.expect("/nope answers");
    assert_eq!(other.code, 404);

    // A removed pod takes its per-pod series with it.
    a.remove_manifest("restarter.yaml");
    scrape_until(&address, Duration::from_secs(30), |s| {
        let mut m = Vec::new();
        let left = find(s, "crilet_container_restarts_total", &[("pod", "restarter")]).len();
        need(&mut m, left == 0, "no restart series of the removed pod");
        m
    })
    .await;

    // The probed pod too: its probe series go with it, and a probe attempt still in flight when
    // its worker stopped does not bring them back once the pod is gone.
    a.remove_manifest("probed.yaml");
    let no_probe_series = |s: &Scrape| {
        let mut m = Vec::new();
        let left = find(s, "prober_probe_total", &[("pod", "probed")]).len();
        need(&mut m, left == 0, "no probe series of the removed pod");
        m
    };
    scrape_until(&address, Duration::from_secs(30), no_probe_series).await;
    wait_for("the probed pod to be gone from the agent", Duration::from_secs(30), || async {
        a.pods().filter(|pods| !pods.iter().any(|p| p["metadata"]["name"] == "probed")).map(|_| ())
    })
    .await;
    let after = scrape_until(&address, Duration::from_secs(5), |_| Vec::new()).await;
    assert!(no_probe_series(&after).is_empty(), "probe series came back after the pod was removed");

    a.stop();
    remove_pods_of(&a.env.cri(), &a.manifests).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn healthz_fails_while_the_runtime_does_not_answer() {
    let env = Env::load();
    let proxy = CriProxy::start("metrics-health", &env.endpoint()).await;
    let address = free_address();
    let args = ["--metrics-bind-address", address.as_str()];
    let mut a = Agent::start_with_endpoint_args("metrics-health", &proxy.endpoint(), &args, &[]).await;
    let status = |want: u16| {
        let address = address.clone();
        move || {
            let address = address.clone();
            async move { get(&address, "/healthz").await.filter(|r| r.code == want) }
        }
    };
    wait_for("/healthz 200", Duration::from_secs(60), status(200)).await;

    // Every list fails: the relist cannot answer, so the runtime is unavailable.
    proxy.inject("ListPodSandbox", Fault::error(Code::Unavailable));
    proxy.inject("ListContainers", Fault::error(Code::Unavailable));
    let down = wait_for("/healthz 500", Duration::from_secs(30), status(500)).await;
    assert!(
        down.body
            .lines()
            .any(|l| l.starts_with("container runtime: unavailable") && l.contains("Unavailable")),
        "the reason names the runtime and its error:\n{}",
        down.body
    );
    let scrape = parse(&get(&address, "/metrics").await.expect("/metrics while the runtime is down").body);
    let errors =
        sum(&scrape, "kubelet_runtime_operations_errors_total", &[("operation_type", "list_podsandbox")]);
    assert!(errors > 0.0, "failed ListPodSandbox calls are counted as errors");

    proxy.clear_all();
    let up = wait_for("/healthz 200 again", Duration::from_secs(30), status(200)).await;
    assert_eq!(up.body, "ok\n");
    a.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn without_the_flag_nothing_listens() {
    let mut a = Agent::start("metrics-off").await;
    wait_for("the agent answers on its control socket", Duration::from_secs(60), || async { a.pods() }).await;
    let pid = a.pid().expect("agent pid");
    assert_eq!(listening_ports(pid), Vec::<u16>::new(), "no TCP port without --metrics-bind-address");
    assert!(!a.log().contains("serving /metrics"), "{}", a.log());
    a.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_busy_metrics_address_from_the_config_stops_the_agent() {
    let busy = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let address = busy.local_addr().expect("address").to_string();
    let config = PathBuf::from("/var/lib/crilet-dev/tests/metrics-busy.yaml");
    std::fs::create_dir_all(config.parent().expect("dir")).expect("mkdir");
    std::fs::write(&config, format!("metrics-bind-address: \"{address}\"\n")).expect("config");
    let config_arg = config.display().to_string();
    let a = Agent::start_with_args("metrics-busy", &["--config", &config_arg], &[]).await;
    let pid = a.pid().expect("agent pid");
    // The child is not reaped until the agent is dropped: it exits into a zombie.
    let exited = || {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        stat.is_empty() || stat.rsplit(')').next().is_some_and(|rest| rest.trim_start().starts_with('Z'))
    };
    wait_for("the agent to exit", Duration::from_secs(30), || async { exited().then_some(()) }).await;
    let log = a.log();
    assert!(log.contains(&format!("cannot listen on the metrics address {address}")), "{log}");
    drop(busy);
    let _ = std::fs::remove_file(&config);
}
