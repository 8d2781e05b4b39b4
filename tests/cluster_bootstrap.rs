//! TLS bootstrapping and certificate rotation against the real control plane of
//! `hack/cluster.sh`: a node that starts with only a bootstrap token gets its client
//! certificate by a CertificateSigningRequest that the controller-manager approves and signs
//! (nothing signed by the test), and renews it under a running pod without a restart. Its
//! kubelet API serves a self-signed certificate from its cert dir, or with
//! `--rotate-server-certificates` one asked for by a kubelet-serving CSR, which the test
//! approves as an operator would (`kubectl certificate approve`), and which rotates too. The
//! test cluster signs for `CRILET_CLUSTER_SIGNING_DURATION` (3m), so a rotation comes 0.6 to
//! 2.2 minutes after each certificate.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use common::cluster::{Node, api_condition};
use common::wait_for;
use serde_json::Value;

/// Subject CN, subject O, issuer CN, serial (hex) of the first certificate in a PEM file.
fn cert_of(path: &Path) -> (String, Vec<String>, String, String) {
    let pem = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let (_, pem) = x509_parser::pem::parse_x509_pem(&pem).expect("a PEM certificate");
    let cert = pem.parse_x509().expect("an X.509 certificate");
    let cn = |n: &x509_parser::x509::X509Name| {
        n.iter_common_name().next().and_then(|c| c.as_str().ok()).unwrap_or_default().to_string()
    };
    let orgs =
        cert.subject().iter_organization().filter_map(|o| o.as_str().ok()).map(str::to_string).collect();
    (cn(cert.subject()), orgs, cn(cert.issuer()), cert.raw_serial_as_string())
}

/// The CSR whose issued certificate is the one in `pem_file`.
fn csr_of(node: &Node, pem_file: &Path) -> Value {
    let pem = String::from_utf8(std::fs::read(pem_file).expect("the pair")).expect("PEM text");
    let cert_end =
        pem.find("-----END CERTIFICATE-----").expect("a certificate") + "-----END CERTIFICATE-----".len();
    let cert = pem[..cert_end].trim().to_string();
    let list = node.cluster.get_json(&["csr"]).expect("kubectl get csr");
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| {
            use base64::Engine;
            c["status"]["certificate"]
                .as_str()
                .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
                .is_some_and(|issued| String::from_utf8_lossy(&issued).trim().starts_with(&cert))
        })
        .cloned()
        .unwrap_or_else(|| panic!("no CSR issued the certificate in {}", pem_file.display()))
}

/// The CSR's Approved condition: (reason, message).
fn approval(csr: &Value) -> (String, String) {
    let c = csr["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Approved" && c["status"] == "True"))
        .unwrap_or_else(|| panic!("CSR not approved: {csr}"));
    (c["reason"].as_str().unwrap_or("").into(), c["message"].as_str().unwrap_or("").into())
}

/// The agent's whole log (`Agent::log` is its tail, which the runtime's debug lines about other
/// agents' pods can fill).
fn full_log(node: &Node) -> String {
    std::fs::read_to_string(&node.agent.log_file).unwrap_or_default()
}

fn node_ready(node: &Node) -> Option<bool> {
    let n = node.cluster.get_json(&["node", &node.name])?;
    Some(n["status"]["conditions"].as_array()?.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"))
}

/// What the kubelet API on 127.0.0.1:`port` serves, verified against the CA bundle `roots`
/// for the name 127.0.0.1: its certificate (DER) and the status line of `GET /healthz`. Err:
/// why there was no TLS session.
async fn served(port: u16, roots: &Path) -> Result<(Vec<u8>, String), String> {
    use rustls_pki_types::pem::PemObject;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut store = rustls::RootCertStore::empty();
    for c in rustls_pki_types::CertificateDer::pem_file_iter(roots).map_err(|e| e.to_string())? {
        store.add(c.map_err(|e| e.to_string())?).map_err(|e| e.to_string())?;
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(store)
        .with_no_client_auth();
    let tcp =
        tokio::net::TcpStream::connect(("127.0.0.1", port)).await.map_err(|e| format!("connect: {e}"))?;
    let name = rustls_pki_types::ServerName::IpAddress(std::net::Ipv4Addr::LOCALHOST.into());
    let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config));
    let mut tls = tokio::time::timeout(Duration::from_secs(10), connector.connect(name, tcp))
        .await
        .map_err(|_| "the handshake timed out".to_string())?
        .map_err(|e| format!("handshake: {e}"))?;
    let cert = tls.get_ref().1.peer_certificates().and_then(|c| c.first()).map(|c| c.to_vec());
    let cert = cert.ok_or("no certificate")?;
    let request = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    tls.write_all(request).await.map_err(|e| format!("writing: {e}"))?;
    let mut buf = vec![0; 4096];
    let n = tokio::time::timeout(Duration::from_secs(10), tls.read(&mut buf))
        .await
        .map_err(|_| "no answer".to_string())?
        .map_err(|e| format!("reading: {e}"))?;
    let status = String::from_utf8_lossy(&buf[..n]).lines().next().unwrap_or("").to_string();
    Ok((cert, status))
}

/// The serial (hex) of a DER certificate.
fn serial(der: &[u8]) -> String {
    x509_parser::parse_x509_certificate(der).expect("an X.509 certificate").1.raw_serial_as_string()
}

/// The DER of the first certificate of a PEM file.
fn der_of(path: &Path) -> Vec<u8> {
    let pem = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    x509_parser::pem::parse_x509_pem(&pem).expect("a PEM certificate").1.contents
}

/// The node's kubelet-serving CSRs (asked as the node itself) made at `since` (RFC 3339, UTC)
/// or later (an earlier run's node of the same name left its own), oldest first.
fn serving_csrs(node: &Node, since: &str) -> Vec<Value> {
    let list = node.cluster.get_json(&["csr"]).unwrap_or_default();
    let mut csrs: Vec<Value> = list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| {
            c["spec"]["signerName"] == "kubernetes.io/kubelet-serving"
                && c["spec"]["username"] == format!("system:node:{}", node.name)
                && c["metadata"]["creationTimestamp"].as_str().is_some_and(|t| t >= since)
        })
        .cloned()
        .collect();
    csrs.sort_by_key(|c| c["metadata"]["creationTimestamp"].as_str().unwrap_or("").to_string());
    csrs
}

/// Neither approved nor denied yet.
fn pending(csr: &Value) -> bool {
    csr["status"]["conditions"].as_array().is_none_or(|c| c.is_empty())
}

/// The SANs of a CSR's request, as x509-parser names them.
fn requested_sans(csr: &Value) -> Vec<String> {
    use base64::Engine;
    use x509_parser::prelude::FromDer;
    let b64 = csr["spec"]["request"].as_str().expect("a request");
    let pem = base64::engine::general_purpose::STANDARD.decode(b64).expect("base64");
    let (_, pem) = x509_parser::pem::parse_x509_pem(&pem).expect("a PEM request");
    let (_, req) = x509_parser::certification_request::X509CertificationRequest::from_der(&pem.contents)
        .expect("a PKCS#10 request");
    let subject = &req.certification_request_info.subject;
    let cn = subject.iter_common_name().next().and_then(|c| c.as_str().ok()).unwrap_or("").to_string();
    let o: Vec<String> =
        subject.iter_organization().filter_map(|o| o.as_str().ok()).map(str::to_string).collect();
    let mut out = vec![format!("CN={cn}"), format!("O={}", o.join(","))];
    for e in req.requested_extensions().into_iter().flatten() {
        if let x509_parser::extensions::ParsedExtension::SubjectAlternativeName(san) = e {
            out.extend(san.general_names.iter().map(|n| n.to_string()));
        }
    }
    out
}

fn lease_renewed(node: &Node) -> Option<String> {
    let l = node.cluster.get_json(&["lease", "-n", "kube-node-lease", &node.name])?;
    l["spec"]["renewTime"].as_str().map(str::to_string)
}

#[tokio::test]
async fn node_with_only_a_bootstrap_token_goes_ready_with_a_cluster_signed_certificate() {
    let started = Instant::now();
    let since = jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = dir.path().join("kubelet.conf");
    let mut node = Node::start_bootstrapped("srv_tls_bootstrap", 10292, &kubeconfig, &[]).await;
    node.wait_ready().await;
    println!("bootstrapped node Ready after {:?}", started.elapsed());

    // The kubelet's layout under the default --cert-dir (<root-dir>/pki).
    let pki = node.agent.root.join("pki");
    let current = pki.join("kubelet-client-current.pem");
    let target = std::fs::read_link(&current).expect("kubelet-client-current.pem is a symlink");
    let file = target.file_name().unwrap().to_string_lossy().to_string();
    assert!(
        file.starts_with("kubelet-client-20")
            && file.ends_with(".pem")
            && file.len() == "kubelet-client-2026-12-07-04-30-37.pem".len(),
        "{file}"
    );
    assert_eq!(std::fs::metadata(&target).unwrap().permissions().mode() & 0o777, 0o600, "{file}");
    let text = std::fs::read_to_string(&current).unwrap();
    assert!(
        text.contains("BEGIN CERTIFICATE") && text.contains("BEGIN PRIVATE KEY"),
        "cert and key in one file"
    );
    assert!(
        !pki.join("kubelet-client.key.tmp").exists(),
        "the pending key is gone once the certificate came"
    );

    // Signed by the cluster's CA for this node's identity.
    let (cn, orgs, issuer, _) = cert_of(&current);
    assert_eq!(cn, format!("system:node:{}", node.name));
    assert_eq!(orgs, ["system:nodes"]);
    assert_eq!(issuer, "crilet-dev-ca");

    // --kubeconfig written as the kubelet writes it: the bootstrap's server and CA, the pair by
    // its current symlink.
    assert_eq!(std::fs::metadata(&kubeconfig).unwrap().permissions().mode() & 0o777, 0o600);
    let kc: serde_yaml_ng::Value =
        serde_yaml_ng::from_str(&std::fs::read_to_string(&kubeconfig).unwrap()).unwrap();
    let user = &kc["users"][0]["user"];
    assert_eq!(user["client-certificate"].as_str(), Some(current.to_str().unwrap()));
    assert_eq!(user["client-key"].as_str(), Some(current.to_str().unwrap()));
    assert_eq!(
        kc["clusters"][0]["cluster"]["server"].as_str(),
        Some(node.cluster.get("CRILET_CLUSTER_SERVER").as_str())
    );

    // The CSR: the kubelet's name, signer and usages, asked as the bootstrap token, approved by
    // the controller-manager's csrapproving (not by this test).
    let bootstrap_csr = csr_of(&node, &target);
    let name = bootstrap_csr["metadata"]["name"].as_str().unwrap_or("");
    assert!(name.starts_with("node-csr-"), "{name}");
    assert_eq!(bootstrap_csr["spec"]["signerName"], "kubernetes.io/kube-apiserver-client-kubelet");
    assert_eq!(bootstrap_csr["spec"]["usages"], serde_json::json!(["digital signature", "client auth"]));
    let requester = bootstrap_csr["spec"]["username"].as_str().unwrap_or("");
    assert!(requester.starts_with("system:bootstrap:"), "{requester}");
    let (reason, message) = approval(&bootstrap_csr);
    assert_eq!(reason, "AutoApproved", "{message}");

    // The node acts as itself: the Node's Lease is renewed with the new identity.
    let first = lease_renewed(&node).expect("the Lease");
    wait_for("the Lease to be renewed", Duration::from_secs(25), || async {
        lease_renewed(&node).filter(|t| *t != first)
    })
    .await;
    assert!(full_log(&node).contains("client certificate issued and stored"), "{}", node.agent.log());

    // No --tls-cert-file and no --rotate-server-certificates: the kubelet API serves a
    // self-signed certificate made in the cert dir (it verifies against itself for 127.0.0.1,
    // the node IP among its SANs).
    let self_signed = pki.join("kubelet.crt");
    let (first_served, status) =
        wait_for("the kubelet API to serve its self-signed certificate", Duration::from_secs(30), || async {
            served(node.port, &self_signed).await.ok()
        })
        .await;
    assert_eq!(first_served, der_of(&self_signed), "the cert dir's kubelet.crt is served");
    assert!(status.starts_with("HTTP/1.1 "), "an HTTP answer: {status}");
    assert_eq!(std::fs::metadata(pki.join("kubelet.key")).unwrap().permissions().mode() & 0o777, 0o600);
    assert!(!pki.join("kubelet-server-current.pem").exists(), "no serving CSR without the flag");
    assert!(serving_csrs(&node, &since).is_empty(), "no kubelet-serving CSR without the flag");

    // Restarted, the agent finds its kubeconfig's certificate valid: no second CSR, the same pair.
    node.agent.stop();
    node.agent.spawn();
    wait_for("the restarted agent to use its kubeconfig as it is", Duration::from_secs(30), || async {
        full_log(&node).contains("the kubeconfig's client certificate is valid; no bootstrap").then_some(())
    })
    .await;
    node.wait_ready().await;
    assert_eq!(std::fs::read_link(&current).unwrap(), target, "no new pair after a restart");
    let (again, _) = wait_for("the restarted kubelet API", Duration::from_secs(30), || async {
        served(node.port, &self_signed).await.ok()
    })
    .await;
    assert_eq!(again, first_served, "the self-signed certificate is made once and reused");
}

const PAUSE: &str = r#"
apiVersion: v1
kind: Pod
metadata:
  name: steady
spec:
  nodeName: ${NODE}
  terminationGracePeriodSeconds: 2
  containers:
  - name: app
    image: ${CRILET_IMAGE_BUSYBOX}
    command: ["sh", "-c", "while true; do sleep 1; done"]
"#;

/// One rotation test for both certificates, so the 3-minute signing duration is waited once.
#[tokio::test]
async fn client_and_serving_certificates_rotate_under_a_running_node() {
    let since = jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = dir.path().join("kubelet.conf");
    let node =
        Node::start_bootstrapped("srv_tls_rotation", 10293, &kubeconfig, &["--rotate-server-certificates"])
            .await;
    node.wait_ready().await;

    // The serving certificate is asked for by CSR: the kubelet's signer, usages and subject, the
    // Node's addresses as SANs. Nothing approves it by itself, and until someone does the
    // kubelet API refuses every handshake.
    let ca = std::path::PathBuf::from(node.cluster.get("CRILET_CLUSTER_CA"));
    let csr = wait_for("a kubelet-serving CSR from the node", Duration::from_secs(30), || async {
        serving_csrs(&node, &since).into_iter().find(pending)
    })
    .await;
    assert_eq!(csr["spec"]["usages"], serde_json::json!(["digital signature", "server auth"]), "{csr}");
    let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap().trim().to_lowercase();
    assert_eq!(
        requested_sans(&csr),
        [
            format!("CN=system:node:{}", node.name),
            "O=system:nodes".into(),
            format!("DNSName({hostname})"),
            "IPAddress(7f:00:00:01)".into()
        ],
        "{csr}"
    );
    let refused = served(node.port, &ca).await.expect_err("no serving certificate before approval");
    println!("before approval: {refused}");
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        serving_csrs(&node, &since).iter().all(pending),
        "still pending: nothing in the cluster approves it"
    );
    assert!(served(node.port, &ca).await.is_err(), "still refused");
    assert!(
        full_log(&node).contains("no serving certificate available for the kubelet"),
        "the refusal is logged: {}",
        node.agent.log()
    );
    let csr_name = csr["metadata"]["name"].as_str().unwrap().to_string();
    node.cluster.kubectl_ok(&["certificate", "approve", &csr_name]);
    let (first_serving, status) =
        wait_for("the kubelet API to serve the approved certificate", Duration::from_secs(30), || async {
            served(node.port, &ca).await.ok()
        })
        .await;
    assert!(status.starts_with("HTTP/1.1 "), "an HTTP answer: {status}");
    let serving_current = node.agent.root.join("pki").join("kubelet-server-current.pem");
    assert_eq!(der_of(&serving_current), first_serving, "the stored pair is the one served");
    let serving_pair = std::fs::read_link(&serving_current).expect("kubelet-server-current.pem is a symlink");
    let file = serving_pair.file_name().unwrap().to_string_lossy().to_string();
    assert!(file.starts_with("kubelet-server-20") && file.ends_with(".pem"), "{file}");
    assert_eq!(std::fs::metadata(&serving_pair).unwrap().permissions().mode() & 0o777, 0o600, "{file}");
    let first_serving_serial = serial(&first_serving);
    let mut approved = vec![csr_name];

    let current = node.agent.root.join("pki").join("kubelet-client-current.pem");
    let first_pair = std::fs::read_link(&current).expect("the first pair");
    let (_, _, _, first_serial) = cert_of(&current);
    let render = |yaml: &str| node.agent.env.render(yaml).replace("${NODE}", &node.name);
    node.apply(&render(PAUSE));
    let running = node
        .wait_pod("steady", "Running", Duration::from_secs(90), |p| {
            p["status"]["phase"] == "Running" && api_condition(p, "Ready") == Some("True")
        })
        .await;
    let container =
        running["status"]["containerStatuses"][0]["containerID"].as_str().unwrap_or("").to_string();
    assert!(!container.is_empty(), "{running}");

    // Until the pair changes (the deadline is 0.6–2.2 min after the first certificate), the
    // Node must stay Ready and its Lease keep being renewed: sample both every 2 s.
    let t0 = Instant::now();
    let mut last_lease = lease_renewed(&node).expect("the Lease");
    let mut last_change = Instant::now();
    let mut longest_gap = Duration::ZERO;
    let mut rotated_at = None;
    let mut serving_rotated_at = None;
    // Both certificates rotate 0.6–2.2 min after they were issued; the serving one later than
    // the client one (it waited for the approval above).
    while t0.elapsed() < Duration::from_secs(240) {
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(
            node_ready(&node),
            Some(true),
            "the Node left Ready at {:?}\n{}",
            t0.elapsed(),
            node.agent.log()
        );
        if let Some(l) = lease_renewed(&node).filter(|l| *l != last_lease) {
            longest_gap = longest_gap.max(last_change.elapsed());
            last_lease = l;
            last_change = Instant::now();
        }
        let pair = std::fs::read_link(&current).ok();
        if rotated_at.is_none() && pair.as_ref().is_some_and(|p| *p != first_pair) {
            rotated_at = Some(t0.elapsed());
        }
        // A new serving CSR: approved as an operator would; its certificate must then be served
        // by the same agent.
        for csr in serving_csrs(&node, &since).iter().filter(|c| pending(c)) {
            let name = csr["metadata"]["name"].as_str().unwrap_or("").to_string();
            if !approved.contains(&name) {
                assert_eq!(csr["spec"]["usages"], serde_json::json!(["digital signature", "server auth"]));
                node.cluster.kubectl_ok(&["certificate", "approve", &name]);
                approved.push(name);
            }
        }
        if serving_rotated_at.is_none()
            && let Ok((cert, _)) = served(node.port, &ca).await
            && serial(&cert) != first_serving_serial
        {
            serving_rotated_at = Some(t0.elapsed());
            assert_eq!(der_of(&serving_current), cert, "the new stored pair is the one served");
        }
        // Watch the Lease for 40 s past the client rotation (the new connections at work).
        if serving_rotated_at.is_some()
            && rotated_at.is_some_and(|at| t0.elapsed() > at + Duration::from_secs(40))
        {
            break;
        }
    }
    let rotated_at =
        rotated_at.unwrap_or_else(|| panic!("no client rotation within 240 s\n{}", node.agent.log()));
    let serving_rotated_at = serving_rotated_at
        .unwrap_or_else(|| panic!("no new serving certificate served within 240 s\n{}", node.agent.log()));
    println!(
        "serving certificate rotated {serving_rotated_at:?} after the pod ran ({} serving CSRs approved)",
        approved.len()
    );
    assert!(approved.len() >= 2, "a second serving CSR: {approved:?}");
    assert!(full_log(&node).contains("serving certificate rotated"), "{}", node.agent.log());
    longest_gap = longest_gap.max(last_change.elapsed());
    println!("rotated {rotated_at:?} after the pod ran; longest gap between Lease renewals {longest_gap:?}");
    assert!(longest_gap < Duration::from_secs(25), "the Lease went {longest_gap:?} without renewal");

    // A new key and certificate, for the same identity, from the same CA, asked by the node
    // itself and approved by the controller-manager (selfnodeclient).
    let (cn, orgs, issuer, serial) = cert_of(&current);
    assert_ne!(serial, first_serial);
    assert_eq!(
        (cn.as_str(), orgs, issuer.as_str()),
        (format!("system:node:{}", node.name).as_str(), vec!["system:nodes".to_string()], "crilet-dev-ca")
    );
    assert!(first_pair.exists(), "the old pair is kept, as the kubelet keeps it");
    let csr = csr_of(&node, &std::fs::read_link(&current).unwrap());
    assert!(csr["metadata"]["name"].as_str().unwrap_or("").starts_with("csr-"), "{csr}");
    assert_eq!(csr["spec"]["username"], format!("system:node:{}", node.name));
    assert_eq!(approval(&csr).0, "AutoApproved");
    assert!(full_log(&node).contains("client certificate rotated"), "{}", node.agent.log());

    // Nothing restarted: the same container, no restarts, the agent the same process.
    let p = node.api_pod("steady").expect("the pod");
    assert_eq!(p["status"]["containerStatuses"][0]["containerID"].as_str(), Some(container.as_str()));
    assert_eq!(p["status"]["containerStatuses"][0]["restartCount"], 0);
    // The pod watch came back on a new connection: a pod made after the swap runs.
    node.apply(&render(PAUSE).replace("name: steady", "name: after"));
    node.wait_pod("after", "Running after the rotation", Duration::from_secs(60), |p| {
        p["status"]["phase"] == "Running"
    })
    .await;
}
