//! `/metrics/resource`: the kubelet's resource metrics collector
//! (`pkg/kubelet/metrics/collectors/resource_metrics.go`) over a [`Summary`], in the Prometheus
//! text format as the kubelet's registry writes it: families by name, `[STABLE]`/`[ALPHA]` in
//! the help, labels by name, and the sample's own time (ms) on the usage samples. metrics-server
//! parses exactly these names. Pure.

use std::fmt::Write;

use super::summary::{Summary, Time};

struct Family {
    name: &'static str,
    help: &'static str,
    kind: &'static str,
    samples: Vec<(String, f64, Option<Time>)>,
}

const NS_PER_S: f64 = 1e9;

/// The text of `/metrics/resource` for `summary` (`None`: it could not be had, and only
/// `resource_scrape_error 1` is written, as upstream).
pub fn render(summary: Option<&Summary>) -> String {
    let family = |name, help, kind| Family { name, help, kind, samples: Vec::new() };
    let mut container_cpu = family(
        "container_cpu_usage_seconds_total",
        "[STABLE] Cumulative cpu time consumed by the container in core-seconds",
        "counter",
    );
    let mut container_memory = family(
        "container_memory_working_set_bytes",
        "[STABLE] Current working set of the container in bytes",
        "gauge",
    );
    let mut container_start = family(
        "container_start_time_seconds",
        "[STABLE] Start time of the container since unix epoch in seconds",
        "gauge",
    );
    let mut container_swap = family(
        "container_swap_usage_bytes",
        "[ALPHA] Current amount of the container swap usage in bytes. Reported only on non-windows systems",
        "gauge",
    );
    let mut node_cpu = family(
        "node_cpu_usage_seconds_total",
        "[STABLE] Cumulative cpu time consumed by the node in core-seconds",
        "counter",
    );
    let mut node_memory =
        family("node_memory_working_set_bytes", "[STABLE] Current working set of the node in bytes", "gauge");
    let mut node_swap = family(
        "node_swap_usage_bytes",
        "[ALPHA] Current swap usage of the node in bytes. Reported only on non-windows systems",
        "gauge",
    );
    let mut pod_cpu = family(
        "pod_cpu_usage_seconds_total",
        "[STABLE] Cumulative cpu time consumed by the pod in core-seconds",
        "counter",
    );
    let mut pod_memory =
        family("pod_memory_working_set_bytes", "[STABLE] Current working set of the pod in bytes", "gauge");
    let mut pod_swap = family(
        "pod_swap_usage_bytes",
        "[ALPHA] Current amount of the pod swap usage in bytes. Reported only on non-windows systems",
        "gauge",
    );
    let mut scrape_error = family(
        "resource_scrape_error",
        "[STABLE] 1 if there was an error while getting container metrics, 0 otherwise",
        "gauge",
    );
    scrape_error.samples.push((String::new(), if summary.is_some() { 0.0 } else { 1.0 }, None));
    if let Some(s) = summary {
        let node = &s.node;
        if let Some(c) = node.cpu.as_ref().filter(|c| c.usage_core_nano_seconds.is_some()) {
            node_cpu.samples.push((
                String::new(),
                c.usage_core_nano_seconds.unwrap_or(0) as f64 / NS_PER_S,
                Some(c.time),
            ));
        }
        if let Some(m) = &node.memory
            && let Some(ws) = m.working_set_bytes
        {
            node_memory.samples.push((String::new(), ws as f64, Some(m.time)));
            if let Some(swap) = node.swap.as_ref().and_then(|w| w.swap_usage_bytes) {
                // Upstream stamps the node's swap with the memory's time.
                node_swap.samples.push((String::new(), swap as f64, Some(m.time)));
            }
        }
        for pod in &s.pods {
            let (name, ns) = (&pod.pod_ref.name, &pod.pod_ref.namespace);
            for c in &pod.containers {
                let labels = labels(&[("container", &c.name), ("namespace", ns), ("pod", name)]);
                if c.start_time.0.as_second() > 0 {
                    let start = c.start_time.0.as_nanosecond() as f64 / NS_PER_S;
                    container_start.samples.push((labels.clone(), start, None));
                }
                if let Some(cpu) = &c.cpu
                    && let Some(used) = cpu.usage_core_nano_seconds
                {
                    container_cpu.samples.push((labels.clone(), used as f64 / NS_PER_S, Some(cpu.time)));
                }
                if let Some(m) = &c.memory
                    && let Some(ws) = m.working_set_bytes
                {
                    container_memory.samples.push((labels.clone(), ws as f64, Some(m.time)));
                }
                if let Some(w) = &c.swap
                    && let Some(used) = w.swap_usage_bytes
                {
                    container_swap.samples.push((labels, used as f64, Some(w.time)));
                }
            }
            let labels = labels(&[("namespace", ns), ("pod", name)]);
            if let Some(cpu) = &pod.cpu
                && let Some(used) = cpu.usage_core_nano_seconds
            {
                pod_cpu.samples.push((labels.clone(), used as f64 / NS_PER_S, Some(cpu.time)));
            }
            if let Some(m) = &pod.memory
                && let Some(ws) = m.working_set_bytes
            {
                pod_memory.samples.push((labels.clone(), ws as f64, Some(m.time)));
            }
            if let Some(w) = &pod.swap
                && let Some(used) = w.swap_usage_bytes
            {
                pod_swap.samples.push((labels, used as f64, Some(w.time)));
            }
        }
    }
    let families = [
        container_cpu,
        container_memory,
        container_start,
        container_swap,
        node_cpu,
        node_memory,
        node_swap,
        pod_cpu,
        pod_memory,
        pod_swap,
        scrape_error,
    ];
    let mut out = String::new();
    for f in families.iter().filter(|f| !f.samples.is_empty()) {
        let _ = writeln!(out, "# HELP {} {}", f.name, f.help);
        let _ = writeln!(out, "# TYPE {} {}", f.name, f.kind);
        for (labels, value, time) in &f.samples {
            let _ = write!(out, "{}{labels} {}", f.name, number(*value));
            if let Some(t) = time {
                let _ = write!(out, " {}", t.0.as_millisecond());
            }
            out.push('\n');
        }
    }
    out
}

/// `{a="x",b="y"}` with the text format's escapes.
fn labels(pairs: &[(&str, &str)]) -> String {
    let inner: Vec<String> = pairs
        .iter()
        .map(|(k, v)| {
            format!("{k}=\"{}\"", v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n"))
        })
        .collect();
    format!("{{{}}}", inner.join(","))
}

/// A value as Go's `strconv.FormatFloat(v, 'g', -1, 64)` would write it for the values these
/// metrics take (integers without a fraction, fractions with the shortest exact digits).
fn number(v: f64) -> String {
    if v.is_finite() && v.fract() == 0.0 && v.abs() < 1e21 { format!("{}", v as i64) } else { format!("{v}") }
}

#[cfg(test)]
mod tests {
    use super::super::summary::*;
    use super::*;

    fn t(ms: i64) -> Time {
        Time(jiff::Timestamp::from_millisecond(ms).expect("time"))
    }

    #[test]
    fn renders_the_kubelets_families() {
        let summary = Summary {
            node: NodeStats {
                cpu: Some(CpuStats {
                    time: t(1_000),
                    usage_core_nano_seconds: Some(2_500_000_000),
                    ..Default::default()
                }),
                memory: Some(MemoryStats {
                    time: t(2_000),
                    working_set_bytes: Some(1024),
                    ..Default::default()
                }),
                ..Default::default()
            },
            pods: vec![PodStats {
                pod_ref: PodReference { name: "p".into(), namespace: "n\"s".into(), uid: "u".into() },
                containers: vec![
                    ContainerStats {
                        name: "c".into(),
                        start_time: t(1_500),
                        cpu: Some(CpuStats {
                            time: t(3_000),
                            usage_core_nano_seconds: Some(1_000_000_000),
                            ..Default::default()
                        }),
                        memory: Some(MemoryStats {
                            time: t(3_000),
                            working_set_bytes: Some(4096),
                            ..Default::default()
                        }),
                        ..Default::default()
                    },
                    ContainerStats { name: "nostats".into(), ..Default::default() },
                ],
                cpu: Some(CpuStats {
                    time: t(4_000),
                    usage_core_nano_seconds: Some(1_200_000_000),
                    ..Default::default()
                }),
                memory: Some(MemoryStats {
                    time: t(4_000),
                    working_set_bytes: Some(8192),
                    ..Default::default()
                }),
                ..Default::default()
            }],
        };
        let want = r#"# HELP container_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the container in core-seconds
# TYPE container_cpu_usage_seconds_total counter
container_cpu_usage_seconds_total{container="c",namespace="n\"s",pod="p"} 1 3000
# HELP container_memory_working_set_bytes [STABLE] Current working set of the container in bytes
# TYPE container_memory_working_set_bytes gauge
container_memory_working_set_bytes{container="c",namespace="n\"s",pod="p"} 4096 3000
# HELP container_start_time_seconds [STABLE] Start time of the container since unix epoch in seconds
# TYPE container_start_time_seconds gauge
container_start_time_seconds{container="c",namespace="n\"s",pod="p"} 1.5
# HELP node_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the node in core-seconds
# TYPE node_cpu_usage_seconds_total counter
node_cpu_usage_seconds_total 2.5 1000
# HELP node_memory_working_set_bytes [STABLE] Current working set of the node in bytes
# TYPE node_memory_working_set_bytes gauge
node_memory_working_set_bytes 1024 2000
# HELP pod_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the pod in core-seconds
# TYPE pod_cpu_usage_seconds_total counter
pod_cpu_usage_seconds_total{namespace="n\"s",pod="p"} 1.2 4000
# HELP pod_memory_working_set_bytes [STABLE] Current working set of the pod in bytes
# TYPE pod_memory_working_set_bytes gauge
pod_memory_working_set_bytes{namespace="n\"s",pod="p"} 8192 4000
# HELP resource_scrape_error [STABLE] 1 if there was an error while getting container metrics, 0 otherwise
# TYPE resource_scrape_error gauge
resource_scrape_error 0
"#;
        assert_eq!(render(Some(&summary)), want);
        let failed = render(None);
        assert!(failed.ends_with("resource_scrape_error 1\n"), "{failed}");
        assert_eq!(failed.lines().count(), 3, "only the error family: {failed}");
    }
}
