use std::time::{Duration, SystemTime};

use x509_parser::prelude::FromDer;

use super::*;

fn at(secs: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
}

#[test]
fn rotation_deadline_cases() {
    // (name, not_before, not_after, jitter, want)
    let cases = [
        ("no jitter: 70 % of the life", 1000, 2000, 0.0, 1700),
        ("half jitter: 80 %", 1000, 2000, 0.5, 1800),
        ("jitter at its top: just under 90 %", 1000, 2000, 0.999_999, 1899),
        ("out-of-range jitter is clamped to 90 %", 1000, 2000, 7.0, 1900),
        ("negative jitter is clamped to 70 %", 1000, 2000, -1.0, 1700),
        ("a year-long certificate", 0, 365 * 86400, 0.0, 365 * 86400 * 7 / 10),
        ("the test cluster's 3m (+5m backdating)", 0, 480, 0.5, 384),
        ("an inverted window is due at once", 2000, 1000, 0.5, 2000),
    ];
    for (name, nb, na, jitter, want) in cases {
        let got = rotation_deadline(at(nb), at(na), jitter);
        let got = got.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs();
        assert_eq!(got, want, "{name}");
    }
}

#[test]
fn rotation_deadline_stays_within_70_to_90_percent() {
    for _ in 0..1000 {
        let got = rotation_deadline(at(0), at(1000), fastrand::f64());
        let s = got.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs_f64();
        assert!((700.0..=900.0).contains(&s), "{s}");
    }
}

#[test]
fn pair_file_names() {
    let cases = [
        ("epoch", 0, "kubelet-client-1970-01-01-00-00-00.pem"),
        ("UTC, the kubelet's layout", 1_796_529_037, "kubelet-client-2026-12-06-03-50-37.pem"),
    ];
    for (name, secs, want) in cases {
        assert_eq!(pair_file_name(Kind::Client, at(secs)), want, "{name}");
    }
    let paths = [
        (Kind::Client, 1_796_529_037, "kubelet-client-2026-12-06-03-50-37.pem", "kubelet-client-current.pem"),
        (
            Kind::Serving,
            1_796_529_037,
            "kubelet-server-2026-12-06-03-50-37.pem",
            "kubelet-server-current.pem",
        ),
    ];
    for (kind, secs, file, current) in paths {
        assert_eq!(pair_file_name(kind, at(secs)), file, "{kind:?}");
        let dir = Path::new("/var/lib/crilet/pki");
        assert_eq!(current_path(dir, kind), dir.join(current), "{kind:?}");
    }
}

#[test]
fn kinds_ask_for_the_kubelets_signer_and_usages() {
    let cases = [
        (Kind::Client, "kubernetes.io/kube-apiserver-client-kubelet", &["digital signature", "client auth"]),
        (Kind::Serving, "kubernetes.io/kubelet-serving", &["digital signature", "server auth"]),
    ];
    for (kind, signer, usages) in cases {
        assert_eq!((kind.signer(), kind.usages()), (signer, &usages[..]), "{kind:?}");
    }
}

#[test]
fn serving_sans_cases() {
    let ip = |s: &str| s.parse::<std::net::IpAddr>().unwrap();
    type Case<'a> = (&'a str, Vec<(&'a str, &'a str)>, Vec<&'a str>, Vec<std::net::IpAddr>);
    let cases: Vec<Case> = vec![
        (
            "crilet's two addresses",
            vec![("InternalIP", "10.0.0.5"), ("Hostname", "node-a")],
            vec!["node-a"],
            vec![ip("10.0.0.5")],
        ),
        (
            "every DNS and IP type, in order",
            vec![
                ("Hostname", "h"),
                ("ExternalIP", "192.0.2.1"),
                ("InternalDNS", "h.internal"),
                ("ExternalDNS", "h.example"),
                ("InternalIP", "fd00::1"),
            ],
            vec!["h", "h.internal", "h.example"],
            vec![ip("192.0.2.1"), ip("fd00::1")],
        ),
        (
            "duplicates once",
            vec![
                ("Hostname", "h"),
                ("InternalDNS", "h"),
                ("InternalIP", "10.0.0.5"),
                ("ExternalIP", "10.0.0.5"),
            ],
            vec!["h"],
            vec![ip("10.0.0.5")],
        ),
        (
            "empty, unparsable and unknown left out",
            vec![("Hostname", ""), ("InternalIP", "not-an-ip"), ("Other", "x")],
            vec![],
            vec![],
        ),
    ];
    for (name, addresses, dns, ips) in cases {
        let got = serving_sans(addresses);
        assert_eq!(got, Sans { dns: dns.into_iter().map(String::from).collect(), ips }, "{name}");
    }
}

#[test]
fn serving_csr_carries_the_sans() {
    let sans = Sans { dns: vec!["node-a".into()], ips: vec!["10.0.0.5".parse().unwrap()] };
    let req = request("node-a", &sans, None).unwrap();
    let (_, pem) = x509_parser::pem::parse_x509_pem(req.csr_pem.as_bytes()).unwrap();
    let (_, csr) =
        x509_parser::certification_request::X509CertificationRequest::from_der(&pem.contents).unwrap();
    let names: Vec<String> = csr
        .requested_extensions()
        .into_iter()
        .flatten()
        .filter_map(|e| match e {
            x509_parser::extensions::ParsedExtension::SubjectAlternativeName(san) => Some(san),
            _ => None,
        })
        .flat_map(|san| san.general_names.iter().map(|n| n.to_string()))
        .collect();
    assert_eq!(names, ["DNSName(node-a)", "IPAddress(0a:00:00:05)"]);
}

#[test]
fn csr_asks_for_the_node_identity() {
    let req = request("node-a", &Sans::default(), None).unwrap();
    let (_, pem) = x509_parser::pem::parse_x509_pem(req.csr_pem.as_bytes()).unwrap();
    assert_eq!(pem.label, "CERTIFICATE REQUEST");
    let (_, csr) =
        x509_parser::certification_request::X509CertificationRequest::from_der(&pem.contents).unwrap();
    let subject = &csr.certification_request_info.subject;
    let cn: Vec<_> = subject.iter_common_name().map(|c| c.as_str().unwrap().to_string()).collect();
    let o: Vec<_> = subject.iter_organization().map(|c| c.as_str().unwrap().to_string()).collect();
    assert_eq!(cn, ["system:node:node-a"]);
    assert_eq!(o, ["system:nodes"]);
    // ECDSA P-256 (id-ecPublicKey with prime256v1), as the kubelet makes.
    let spki = &csr.certification_request_info.subject_pki;
    assert_eq!(spki.algorithm.algorithm.to_id_string(), "1.2.840.10045.2.1");
    assert!(csr.requested_extensions().is_none_or(|mut e| e.next().is_none()), "no SANs or other extensions");
    assert!(req.key_pem.starts_with("-----BEGIN PRIVATE KEY-----"));
    assert!(req.name.starts_with("node-csr-"), "{}", req.name);
}

#[test]
fn bootstrap_csr_name_follows_the_key() {
    let a = request("node-a", &Sans::default(), None).unwrap();
    let again = request("node-a", &Sans::default(), Some(&a.key_pem)).unwrap();
    let other_key = request("node-a", &Sans::default(), None).unwrap();
    let other_node = request("node-b", &Sans::default(), Some(&a.key_pem)).unwrap();
    assert_eq!(a.name, again.name, "same key and subject: same name (a restarted bootstrap finds its CSR)");
    assert_ne!(a.name, other_key.name, "a new key: a new name");
    assert_ne!(a.name, other_node.name, "another node: a new name");
    // node-csr- and 43 characters: 32 bytes of SHA-512/256, unpadded URL-safe base64.
    assert_eq!(a.name.len(), "node-csr-".len() + 43);
    // The delimiter keeps CN "ab" + O "c" apart from CN "a" + O "bc".
    assert_ne!(
        bootstrap_csr_name(b"k", "ab", &["c"], Kind::Client.usages()),
        bootstrap_csr_name(b"k", "a", &["bc"], Kind::Client.usages())
    );
}

#[test]
fn store_pair_writes_a_private_file_and_moves_the_current_link() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let pki = dir.path().join("pki");
    let first = store_pair(&pki, Kind::Client, b"CERT1\n", b"KEY1\n", at(1_796_529_037)).unwrap();
    assert_eq!(first.file_name().unwrap(), "kubelet-client-2026-12-06-03-50-37.pem");
    assert_eq!(std::fs::read(&first).unwrap(), b"CERT1\nKEY1\n");
    assert_eq!(std::fs::metadata(&first).unwrap().permissions().mode() & 0o777, 0o600);
    let second = store_pair(&pki, Kind::Client, b"CERT2", b"KEY2\n", at(1_796_529_037)).unwrap();
    assert_ne!(first, second, "two pairs in one second keep both files");
    assert_eq!(std::fs::read_link(current_path(&pki, Kind::Client)).unwrap(), second);
    assert_eq!(std::fs::read(current_path(&pki, Kind::Client)).unwrap(), b"CERT2\nKEY2\n");
    assert!(!pki.join("kubelet-client-updated.pem").exists());
}

#[test]
fn written_kubeconfig_reads_back() {
    let dir = tempfile::tempdir().unwrap();
    let pair = store_pair(dir.path(), Kind::Client, b"-----BEGIN CERTIFICATE-----\n", b"K\n", at(0)).unwrap();
    let text = node_kubeconfig(
        "https://127.0.0.1:16443",
        &CaSource::Data("Q0E=".into()),
        &current_path(dir.path(), Kind::Client),
    );
    let file = dir.path().join("kubeconfig");
    std::fs::write(&file, text).unwrap();
    let parts = read_kubeconfig(&file).unwrap();
    assert_eq!(parts.server, "https://127.0.0.1:16443");
    assert_eq!(parts.ca, Some(CaSource::Data("Q0E=".into())));
    let both = std::fs::read(&pair).unwrap();
    assert_eq!(parts.cert_pem.as_deref(), Some(both.as_slice()));
    assert_eq!(parts.key_pem.as_deref(), Some(both.as_slice()));
    assert!(read_kubeconfig(&dir.path().join("missing")).is_none());
}
