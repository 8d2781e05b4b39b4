use super::*;

fn pod(yaml: &str) -> Pod {
    serde_yaml_ng::from_str(&format!(
        "metadata: {{name: web, uid: u-1}}\nspec: {{containers: [{{name: a}}], {yaml}}}"
    ))
    .expect("pod")
}

fn strings(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

fn cfg(servers: &[&str], searches: &[&str], options: &[&str]) -> api::DnsConfig {
    api::DnsConfig { servers: strings(servers), searches: strings(searches), options: strings(options) }
}

fn host() -> HostDns {
    HostDns {
        servers: strings(&["192.168.1.1"]),
        searches: strings(&["corp.example", "example"]),
        options: strings(&["ndots:2", "edns0"]),
    }
}

fn cluster() -> DnsSettings {
    DnsSettings {
        cluster_dns: vec!["10.96.0.10".parse().expect("ip")],
        cluster_domain: "cluster.local".into(),
        ..DnsSettings::default()
    }
}

fn no_cluster() -> DnsSettings {
    DnsSettings::default()
}

const CLUSTER_SEARCH: &[&str] =
    &["ns1.svc.cluster.local", "svc.cluster.local", "cluster.local", "corp.example", "example"];
const MISSING: &str = "pod: \"web_ns1(u-1)\". kubelet does not have ClusterDNS IP configured and cannot \
                       create Pod using \"ClusterFirst\" policy. Falling back to \"Default\" policy.";

#[test]
fn policies() {
    let host_cfg = cfg(&["192.168.1.1"], &["corp.example", "example"], &["ndots:2", "edns0"]);
    let cluster_cfg = cfg(&["10.96.0.10"], CLUSTER_SEARCH, &["ndots:5"]);
    // (what, settings, pod spec fields, config, warning reasons)
    let cases: Vec<(&str, DnsSettings, &str, api::DnsConfig, Vec<&str>)> = vec![
        ("ClusterFirst (the default) with cluster DNS", cluster(), "", cluster_cfg.clone(), vec![]),
        ("ClusterFirst named", cluster(), "dnsPolicy: ClusterFirst", cluster_cfg.clone(), vec![]),
        ("ClusterFirst on hostNetwork: the host's", cluster(), "hostNetwork: true", host_cfg.clone(), vec![]),
        (
            "ClusterFirstWithHostNet on hostNetwork: the cluster's",
            cluster(),
            "hostNetwork: true, dnsPolicy: ClusterFirstWithHostNet",
            cluster_cfg.clone(),
            vec![],
        ),
        (
            "ClusterFirstWithHostNet off hostNetwork: the cluster's",
            cluster(),
            "dnsPolicy: ClusterFirstWithHostNet",
            cluster_cfg.clone(),
            vec![],
        ),
        ("Default: the host's", cluster(), "dnsPolicy: Default", host_cfg.clone(), vec![]),
        (
            "None: only dnsConfig",
            cluster(),
            "dnsPolicy: None, dnsConfig: {nameservers: [1.1.1.1], searches: [a.b], options: [{name: ndots, value: '1'}]}",
            cfg(&["1.1.1.1"], &["a.b"], &["ndots:1"]),
            vec![],
        ),
        (
            "ClusterFirst without cluster DNS: Default, warned",
            no_cluster(),
            "",
            host_cfg.clone(),
            vec!["MissingClusterDNS"],
        ),
        (
            "ClusterFirstWithHostNet without cluster DNS: Default, warned",
            no_cluster(),
            "hostNetwork: true, dnsPolicy: ClusterFirstWithHostNet",
            host_cfg.clone(),
            vec!["MissingClusterDNS"],
        ),
        (
            "hostNetwork ClusterFirst without cluster DNS: Default, no warning",
            no_cluster(),
            "hostNetwork: true",
            host_cfg.clone(),
            vec![],
        ),
        ("Default without cluster DNS", no_cluster(), "dnsPolicy: Default", host_cfg.clone(), vec![]),
        (
            "a cluster DNS but no domain: the host's searches only",
            DnsSettings { cluster_domain: String::new(), ..cluster() },
            "",
            cfg(&["10.96.0.10"], &["corp.example", "example"], &["ndots:5"]),
            vec![],
        ),
        (
            "two cluster DNS servers, in order",
            DnsSettings {
                cluster_dns: vec!["10.96.0.10".parse().expect("ip"), "fd00::a".parse().expect("ip")],
                ..cluster()
            },
            "",
            cfg(&["10.96.0.10", "fd00::a"], CLUSTER_SEARCH, &["ndots:5"]),
            vec![],
        ),
        (
            "no host file: Default resolves through the node",
            DnsSettings { resolv_conf: None, ..no_cluster() },
            "dnsPolicy: Default",
            cfg(&["127.0.0.1"], &["."], &[]),
            vec![],
        ),
        (
            "no host file, an IPv6 node",
            DnsSettings { resolv_conf: None, node_ips: vec!["fd00::1".parse().expect("ip")], ..no_cluster() },
            "dnsPolicy: Default",
            cfg(&["::1"], &["."], &[]),
            vec![],
        ),
        (
            "no host file, ClusterFirst without cluster DNS",
            DnsSettings { resolv_conf: None, ..no_cluster() },
            "",
            cfg(&["127.0.0.1"], &["."], &[]),
            vec!["MissingClusterDNS"],
        ),
        (
            "no host file, ClusterFirst: the cluster searches only",
            DnsSettings { resolv_conf: None, ..cluster() },
            "",
            cfg(&["10.96.0.10"], &CLUSTER_SEARCH[..3], &["ndots:5"]),
            vec![],
        ),
    ];
    for (what, settings, spec, want, reasons) in cases {
        // The host file is empty when there is none (`read_host`).
        let h = if settings.resolv_conf.is_some() { host() } else { HostDns::default() };
        let got = form(&settings, &h, &pod(spec), "ns1");
        assert_eq!(got.config, want, "{what}");
        assert_eq!(got.warnings.iter().map(|w| w.reason).collect::<Vec<_>>(), reasons, "{what}");
        if let Some(w) = got.warnings.first().filter(|w| w.reason == "MissingClusterDNS") {
            assert_eq!(w.message, MISSING, "{what}");
        }
    }
}

#[test]
fn dns_config_merges() {
    // (what, settings, pod spec fields, config)
    let cases = [
        (
            "ClusterFirst: nameservers and searches appended once, options replaced by name",
            cluster(),
            "dnsConfig: {nameservers: [10.96.0.10, 8.8.8.8], searches: [cluster.local, extra.example], \
             options: [{name: ndots, value: '2'}, {name: single-request}, {name: timeout, value: ''}]}",
            cfg(
                &["10.96.0.10", "8.8.8.8"],
                &[CLUSTER_SEARCH, &["extra.example"]].concat(),
                &["ndots:2", "single-request", "timeout"],
            ),
        ),
        (
            "Default: the host's, then the pod's",
            cluster(),
            "dnsPolicy: Default, dnsConfig: {nameservers: [9.9.9.9], options: [{name: edns0}, {name: attempts, value: '3'}]}",
            cfg(
                &["192.168.1.1", "9.9.9.9"],
                &["corp.example", "example"],
                &["ndots:2", "edns0", "attempts:3"],
            ),
        ),
        (
            "a fallback ClusterFirst merges onto the host's",
            no_cluster(),
            "dnsConfig: {searches: [example, z.example]}",
            cfg(&["192.168.1.1"], &["corp.example", "example", "z.example"], &["ndots:2", "edns0"]),
        ),
    ];
    for (what, settings, spec, want) in cases {
        assert_eq!(form(&settings, &host(), &pod(spec), "ns1").config, want, "{what}");
    }
}

#[test]
fn limits() {
    let many = |n: usize, len: usize| -> Vec<String> {
        (0..n).map(|i| format!("{i:02}{}", "a".repeat(len.saturating_sub(2)))).collect()
    };
    let yaml_list = |l: &[String]| format!("[{}]", l.join(", "));
    // (what, host searches, pod spec fields, nameservers kept, searches kept, warnings)
    type Case = (&'static str, Vec<String>, String, usize, Vec<String>, usize);
    let cases: Vec<Case> = vec![
        (
            "within the limits",
            many(3, 10),
            String::new(),
            1,
            [&strings(&CLUSTER_SEARCH[..3])[..], &many(3, 10)].concat(),
            0,
        ),
        (
            "four nameservers: three kept",
            Vec::new(),
            "dnsConfig: {nameservers: [1.1.1.1, 2.2.2.2, 3.3.3.3]}".into(),
            3,
            strings(&CLUSTER_SEARCH[..3]),
            1,
        ),
        (
            "33 search domains: 32 kept",
            many(30, 10),
            String::new(),
            1,
            [&strings(&CLUSTER_SEARCH[..3])[..], &many(29, 10)].concat(),
            1,
        ),
        (
            "a search path over 253 characters is dropped",
            vec!["x".repeat(254), "ok.example".into()],
            String::new(),
            1,
            [&strings(&CLUSTER_SEARCH[..3])[..], &strings(&["ok.example"])].concat(),
            1,
        ),
        (
            "a line over 2048 characters loses its last domains",
            many(10, 250),
            String::new(),
            1,
            // 3 cluster domains (52 chars with spaces) + n × 251 ≤ 2048: n = 7.
            [&strings(&CLUSTER_SEARCH[..3])[..], &many(7, 250)].concat(),
            1,
        ),
        (
            "both limits: two warnings",
            many(30, 10),
            format!(
                "dnsConfig: {{nameservers: [1.1.1.1, 2.2.2.2, 3.3.3.3], searches: {}}}",
                yaml_list(&many(1, 5))
            ),
            3,
            [&strings(&CLUSTER_SEARCH[..3])[..], &many(29, 10)].concat(),
            2,
        ),
    ];
    for (what, searches, spec, servers, want_searches, warnings) in cases {
        let h = HostDns { searches, ..HostDns::default() };
        let got = form(&cluster(), &h, &pod(&spec), "ns1");
        assert_eq!(got.config.servers.len(), servers, "{what}");
        assert_eq!(got.config.searches, want_searches, "{what}");
        assert_eq!(got.warnings.len(), warnings, "{what}: {:?}", got.warnings);
        assert!(got.warnings.iter().all(|w| w.reason == "DNSConfigForming"), "{what}");
    }
    let h = HostDns { searches: many(30, 10), ..HostDns::default() };
    let got = form(&cluster(), &h, &pod(""), "ns1");
    assert_eq!(
        got.warnings[0].message,
        format!(
            "Search Line limits were exceeded, some search paths have been omitted, the applied search line is: {}",
            got.config.searches.join(" ")
        )
    );
    let got = form(
        &cluster(),
        &HostDns::default(),
        &pod("dnsConfig: {nameservers: [1.1.1.1, 2.2.2.2, 3.3.3.3]}"),
        "ns1",
    );
    assert_eq!(
        got.warnings[0].message,
        "Nameserver limits were exceeded, some nameservers have been omitted, the applied nameserver line is: \
         10.96.0.10 1.1.1.1 2.2.2.2"
    );
}

#[test]
fn resolv_conf_parsing() {
    // (what, text, servers, searches, options)
    let cases = [
        (
            "comments, accumulating nameservers, one search line",
            "# c\n  # indented comment\nnameserver 1.1.1.1\nnameserver 8.8.8.8 ignored\nsearch a b\noptions ndots:2\n",
            &["1.1.1.1", "8.8.8.8"][..],
            &["a", "b"][..],
            &["ndots:2"][..],
        ),
        ("the last search line wins", "search a b\nsearch c\n", &[], &["c"], &[]),
        ("the root and trailing dots go", "search . a.example. b\n", &[], &["a.example", "b"], &[]),
        (
            "options accumulate, a later one replacing its name",
            "options ndots:2 edns0\noptions ndots:3 rotate\n",
            &[],
            &[],
            &["ndots:3", "edns0", "rotate"],
        ),
        ("domain is not search (upstream ignores it)", "domain x.example\n", &[], &[], &[]),
        ("empty", "", &[], &[], &[]),
    ];
    for (what, text, servers, searches, options) in cases {
        let got = HostDns::parse(text).expect(what);
        assert_eq!(
            got,
            HostDns { servers: strings(servers), searches: strings(searches), options: strings(options) },
            "{what}"
        );
    }
    assert!(HostDns::parse("nameserver\n").is_err(), "a nameserver line with no address");
}

#[test]
fn reading_the_host_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("resolv.conf");
    std::fs::write(&path, "nameserver 10.0.0.2\nsearch lan\n").expect("write");
    let settings = DnsSettings { resolv_conf: Some(path.clone()), ..DnsSettings::default() };
    assert_eq!(read_host(&settings).expect("reads").servers, ["10.0.0.2"]);
    assert_eq!(check_host(&settings), None);
    let none = DnsSettings { resolv_conf: None, ..DnsSettings::default() };
    assert_eq!(read_host(&none).expect("no file, nothing to read"), HostDns::default());
    let missing = DnsSettings { resolv_conf: Some(dir.path().join("nope")), ..DnsSettings::default() };
    let err = crate::error_chain(&read_host(&missing).expect_err("missing"));
    assert!(err.contains("resolver file") && err.contains("nope"), "{err}");
    std::fs::write(
        &path,
        format!("search {}\n", (0..30).map(|i| format!("d{i}")).collect::<Vec<_>>().join(" ")),
    )
    .expect("write");
    let with_domain = DnsSettings { cluster_domain: "cluster.local".into(), ..settings };
    let problem = check_host(&with_domain).expect("30 domains and a cluster domain");
    assert!(problem.contains("more than 29 domains"), "{problem}");
}
