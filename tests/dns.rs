//! Pod DNS on the real containerd: a crilet started with `--cluster-dns`, `--cluster-domain` and
//! its own `--resolv-conf` gives each static pod the `/etc/resolv.conf` the kubelet would
//! (ClusterFirst, Default with dnsConfig over the limit, None), read from inside the container.

mod common;

use common::*;

/// The host resolver the agent is given: the Default pod's base, and the ClusterFirst pod's
/// host search domain.
const HOST_RESOLV: &str = "# test host\nnameserver 192.0.2.53\nsearch host.example\noptions timeout:2\n";

/// A pod that prints its resolver once, then waits.
fn pod(name: &str, dns: &str) -> String {
    format!(
        r#"
apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: dns-ns
spec:
  terminationGracePeriodSeconds: 1
  {dns}
  containers:
  - name: main
    image: ${{CRILET_IMAGE_BUSYBOX}}
    command: [sh, -c, 'cat /etc/resolv.conf; echo END-OF-RESOLV; trap "exit 0" TERM; while true; do sleep 1; done']
"#
    )
}

/// The lines the container printed of its /etc/resolv.conf (CRI log lines' content).
async fn resolv_conf(a: &Agent, name: &str) -> Vec<String> {
    let lines = printed_before(a, "dns-ns", name, "main", "END-OF-RESOLV").await;
    lines.into_iter().filter(|l| !l.trim().is_empty()).collect()
}

/// An agent `name` whose `--resolv-conf` is a file holding [`HOST_RESOLV`] (kept in the returned
/// directory), with more flags `args`.
async fn agent_with_host_resolver(name: &str, args: &[&str]) -> (Agent, tempfile::TempDir) {
    let host = tempfile::tempdir().expect("tempdir");
    let resolv = host.path().join("resolv.conf");
    std::fs::write(&resolv, HOST_RESOLV).expect("write the host resolver");
    let resolv = resolv.display().to_string();
    let args: Vec<&str> = args.iter().copied().chain(["--resolv-conf", &resolv]).collect();
    (Agent::start_with_args(name, &args, &[]).await, host)
}

fn sorted(lines: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = lines.iter().map(|s| s.to_string()).collect();
    v.sort();
    v
}

#[tokio::test(flavor = "multi_thread")]
async fn pods_get_the_kubelets_resolver() {
    let (mut a, _host) = agent_with_host_resolver(
        "dns",
        &["--cluster-dns", "10.96.0.10", "--cluster-domain", "cluster.local"],
    )
    .await;
    a.write_manifest("cluster.yaml", &pod("dns-cluster", ""));
    a.write_manifest(
        "default.yaml",
        &pod(
            "dns-default",
            "dnsPolicy: Default\n  dnsConfig: {nameservers: [192.0.2.1, 192.0.2.2, 192.0.2.3], \
             options: [{name: timeout, value: '5'}]}",
        ),
    );
    a.write_manifest(
        "none.yaml",
        &pod(
            "dns-none",
            "dnsPolicy: None\n  dnsConfig: {nameservers: [192.0.2.9], searches: [a.example, b.example], \
             options: [{name: ndots, value: '2'}, {name: edns0}]}",
        ),
    );

    // (pod, the resolver's lines in any order: containerd writes search, nameservers, options)
    let cases = [
        (
            "dns-cluster",
            sorted(&[
                "nameserver 10.96.0.10",
                "search dns-ns.svc.cluster.local svc.cluster.local cluster.local host.example",
                "options ndots:5",
            ]),
        ),
        (
            // Four nameservers: the host's and the first two of the pod's (DNSConfigForming).
            "dns-default",
            sorted(&[
                "nameserver 192.0.2.53",
                "nameserver 192.0.2.1",
                "nameserver 192.0.2.2",
                "search host.example",
                "options timeout:5",
            ]),
        ),
        (
            "dns-none",
            sorted(&["nameserver 192.0.2.9", "search a.example b.example", "options ndots:2 edns0"]),
        ),
    ];
    for (name, want) in cases {
        let mut got = resolv_conf(&a, name).await;
        got.sort();
        assert_eq!(got, want, "{name}'s /etc/resolv.conf\n{}", a.log());
    }

    let (ok, events, err) = a.cli(&["events", "-n", "dns-ns"]);
    assert!(ok, "crilet events: {err}");
    let forming: Vec<&str> = events.lines().filter(|l| l.contains("DNSConfigForming")).collect();
    assert!(
        forming.len() == 1
            && forming[0].contains("dns-default")
            && forming[0].contains("the applied nameserver line is: 192.0.2.53 192.0.2.1 192.0.2.2"),
        "one DNSConfigForming event, on dns-default:\n{events}"
    );
    assert!(!events.contains("MissingClusterDNS"), "the agent has a cluster DNS:\n{events}");
    for f in ["cluster.yaml", "default.yaml", "none.yaml"] {
        a.remove_manifest(f);
    }
    a.stop();
}

/// Without `--cluster-dns`, a ClusterFirst pod falls back to the host's resolver, and says so.
#[tokio::test(flavor = "multi_thread")]
async fn cluster_first_without_cluster_dns_falls_back_to_default() {
    let (mut a, _host) = agent_with_host_resolver("dns-missing", &[]).await;
    a.write_manifest("pod.yaml", &pod("dns-fallback", ""));
    let mut got = resolv_conf(&a, "dns-fallback").await;
    got.sort();
    assert_eq!(got, sorted(&["nameserver 192.0.2.53", "search host.example", "options timeout:2"]));
    let (_, events, _) = a.cli(&["events", "-n", "dns-ns"]);
    assert!(
        events.lines().any(|l| l.contains("MissingClusterDNS")
            && l.contains("kubelet does not have ClusterDNS IP configured")),
        "a MissingClusterDNS event:\n{events}"
    );
    a.remove_manifest("pod.yaml");
    a.stop();
}
