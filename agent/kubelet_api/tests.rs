//! The kubelet API: CRI records to output, the query, the choice of log file, the SAR
//! attributes of a request, the review caches (paused time), and a real server on 127.0.0.1 with
//! certificates made here (client certificates from the CA accepted and identified, from another
//! CA refused), a fake reviewer standing in for the API server.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::{HeaderMap, Method, Request, StatusCode, header};
use http_body_util::{BodyExt, Empty};
use hyper::body::{Bytes, Incoming};
use hyper_util::rt::{TokioExecutor, TokioIo};
use jiff::Timestamp;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose,
};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_util::sync::CancellationToken;

use super::auth::{
    Attributes, Authenticator, Decision, ReviewError, Reviewer, User, bearer_token, request_attributes,
};
use super::logs::{LogFilter, LogOptions, OpenError, QueryError, fixed_nanos, open, parse_query};
use super::routes::KubeletApi;
use super::tls::{BindError, certificate_user, server_config, server_config_from_files};
use crate::cluster::cert_slot::CertSlot;
use crate::fixtures::{pod, running, waiting, with_last_exit};
use crate::logs::RecordSink;
use crate::model::PodKey;
use crate::model::keys::LOG_DIRECTORY;
use crate::registry::{PodRecord, Registry};
use crate::stats::Scope;

fn at(s: &str) -> Timestamp {
    s.parse().expect("valid test time")
}

// ---- CRI records to output -------------------------------------------------------------------

#[test]
fn records_to_output() {
    let records: [&[u8]; 5] = [
        b"2024-05-06T12:00:01.5Z stdout F one\n",
        b"2024-05-06T12:00:02Z stdout P tw\n",
        b"2024-05-06T12:00:03.123456789Z stderr F o\n",
        b"not a record\n",
        b"2024-05-06T14:00:04+02:00 stdout F four\n",
    ];
    let opts = |f: fn(&mut LogOptions)| {
        let mut o = LogOptions::default();
        f(&mut o);
        o
    };
    let cases: [(&str, LogOptions, &str); 8] = [
        ("plain: partials joined, bad records skipped", opts(|_| {}), "one\ntwo\nfour\n"),
        (
            "timestamps: the line's first record, nine digits, the offset kept",
            opts(|o| o.timestamps = true),
            "2024-05-06T12:00:01.500000000Z one\n2024-05-06T12:00:02.000000000Z two\n\
             2024-05-06T14:00:04.000000000+02:00 four\n",
        ),
        (
            "since: a line at the instant is kept",
            opts(|o| o.since = Some(at("2024-05-06T12:00:02Z"))),
            "two\nfour\n",
        ),
        (
            "since: a line is judged by its first record",
            opts(|o| o.since = Some(at("2024-05-06T12:00:02.5Z"))),
            "four\n",
        ),
        (
            "since: an offset compares as the instant",
            opts(|o| o.since = Some(at("2024-05-06T12:00:04Z"))),
            "four\n",
        ),
        ("limitBytes cuts mid-line", opts(|o| o.limit_bytes = Some(6)), "one\ntw"),
        (
            "limitBytes counts the timestamps",
            opts(|o| {
                o.limit_bytes = Some(10);
                o.timestamps = true
            }),
            "2024-05-06",
        ),
        ("limitBytes past the end: everything", opts(|o| o.limit_bytes = Some(1000)), "one\ntwo\nfour\n"),
    ];
    for (name, opts, want) in cases {
        let mut filter = LogFilter::new(&opts);
        let mut out = Vec::new();
        for r in records {
            filter.push(r, &mut out);
        }
        assert_eq!(String::from_utf8_lossy(&out), want, "{name}");
        assert_eq!(filter.full(), opts.limit_bytes.is_some_and(|n| n < 100), "{name}: full");
    }
}

#[test]
fn fixed_nanosecond_timestamps() {
    let cases = [
        ("2024-05-06T12:00:00.123456789Z", "2024-05-06T12:00:00.123456789Z"),
        ("2024-05-06T12:00:00.1234Z", "2024-05-06T12:00:00.123400000Z"),
        ("2024-05-06T12:00:00Z", "2024-05-06T12:00:00.000000000Z"),
        ("2024-05-06T12:00:00.5+02:00", "2024-05-06T12:00:00.500000000+02:00"),
        ("2024-05-06T12:00:00.5+00:00", "2024-05-06T12:00:00.500000000Z"),
        ("2024-05-06T12:00:00.5z", "2024-05-06T12:00:00.500000000Z"),
        ("short", "short"),
    ];
    for (raw, want) in cases {
        assert_eq!(String::from_utf8_lossy(&fixed_nanos(raw.as_bytes())), want, "{raw}");
    }
}

#[test]
fn query_decoding() {
    let now = at("2024-05-06T12:00:00Z");
    let with = |f: fn(&mut LogOptions)| {
        let mut o = LogOptions::default();
        f(&mut o);
        Ok(o)
    };
    let cases: [(&str, Option<&str>, Result<LogOptions, QueryError>); 17] = [
        ("no query", None, Ok(LogOptions::default())),
        (
            "booleans",
            Some("follow=true&timestamps=1&previous=false"),
            with(|o| {
                o.follow = true;
                o.timestamps = true
            }),
        ),
        ("a bare boolean is true", Some("follow"), with(|o| o.follow = true)),
        ("FALSE is false", Some("previous=FALSE"), Ok(LogOptions::default())),
        (
            "numbers",
            Some("tailLines=10&limitBytes=100"),
            with(|o| {
                o.tail_lines = Some(10);
                o.limit_bytes = Some(100)
            }),
        ),
        ("tail is the old tailLines", Some("tail=5"), with(|o| o.tail_lines = Some(5))),
        (
            "tail=all: no limit, whatever tailLines says",
            Some("tail=all&tailLines=3"),
            Ok(LogOptions::default()),
        ),
        ("the first value counts", Some("tailLines=1&tailLines=2"), with(|o| o.tail_lines = Some(1))),
        ("sinceSeconds", Some("sinceSeconds=60"), with(|o| o.since = Some(at("2024-05-06T11:59:00Z")))),
        (
            "sinceTime, percent-encoded",
            Some("sinceTime=2024-05-06T11%3A00%3A00%2B01%3A00"),
            with(|o| o.since = Some(at("2024-05-06T10:00:00Z"))),
        ),
        ("unknown parameters are ignored", Some("container=app&stream=All"), Ok(LogOptions::default())),
        ("a number that is not", Some("tailLines=x"), Err(QueryError::Decode)),
        ("a time that is not", Some("sinceTime=yesterday"), Err(QueryError::Decode)),
        ("negative tailLines", Some("tailLines=-1"), Err(QueryError::Invalid)),
        ("limitBytes below 1", Some("limitBytes=0"), Err(QueryError::Invalid)),
        ("sinceSeconds below 1", Some("sinceSeconds=0"), Err(QueryError::Invalid)),
        ("both since forms", Some("sinceSeconds=5&sinceTime=2024-05-06T11:00:00Z"), Err(QueryError::Invalid)),
    ];
    for (name, query, want) in cases {
        assert_eq!(parse_query(query, now), want, "{name}");
    }
    assert_eq!(QueryError::Decode.to_string(), r#"{"message": "Unable to decode query."}"#);
}

// ---- which file, from the registry -------------------------------------------------------------

fn record(at_secs: u32, tag: &str, text: &str) -> String {
    format!("2024-05-06T12:00:{at_secs:02}Z stdout {tag} {text}\n")
}

/// Puts pod `name` (container `app`, logs under `dir`) with these container statuses.
fn put_pod(registry: &Registry, name: &str, dir: &Path, statuses: Value) {
    let p = pod(json!({
        "metadata": {"name": name, "annotations": {LOG_DIRECTORY: dir.display().to_string()}},
        "status": {"containerStatuses": statuses},
    }));
    registry.put_pod(
        PodKey::new("default", name),
        PodRecord { pod: p, manifest_file: String::new(), warnings: Vec::new() },
    );
}

fn write_logs(dir: &Path, files: &[(u32, String)]) {
    let app = dir.join("app");
    std::fs::create_dir_all(&app).expect("log dir");
    for (n, text) in files {
        std::fs::write(app.join(format!("{n}.log")), text).expect("log file");
    }
}

#[test]
fn container_log_choice() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    let two = record(2, "F", "two-a") + &record(3, "P", "two-") + &record(4, "F", "b");
    write_logs(dir, &[(0, record(0, "F", "zero")), (1, record(1, "F", "one")), (2, two)]);
    let registry = Registry::default();
    put_pod(&registry, "web", dir, json!([with_last_exit(running("app", true, 2), 5)]));
    // Each pod its own directory: files numbered above a pod's restartCount are newer instances.
    let first = dir.join("first");
    write_logs(&first, &[(0, record(0, "F", "zero"))]);
    put_pod(&registry, "first", &first, json!([running("app", true, 0)]));
    put_pod(&registry, "nostatus", &first, json!([]));
    put_pod(&registry, "pulling", &dir.join("pulling"), json!([waiting("app", "ErrImagePull", 0)]));
    let opts = |q: &str| parse_query(Some(q), at("2024-05-06T12:00:10Z")).expect("valid query");
    /// (case, pod, container, query, the text or the error).
    type Case = (&'static str, &'static str, &'static str, &'static str, Result<&'static str, &'static str>);
    let cases: [Case; 9] = [
        ("the current instance", "web", "app", "", Ok("two-a\ntwo-b\n")),
        ("previous: the instance before", "web", "app", "previous=true", Ok("one\n")),
        ("tailLines counts records", "web", "app", "tailLines=2", Ok("two-b\n")),
        ("tailLines=0: nothing", "web", "app", "tailLines=0", Ok("")),
        (
            "previous of the first instance",
            "first",
            "app",
            "previous=true",
            Err("previous terminated container \"app\" in pod \"first\" not found"),
        ),
        ("unknown pod", "nope", "app", "", Err("pod \"nope\" does not exist")),
        ("unknown container", "web", "side", "", Err("container \"side\" not found in pod \"web\"")),
        (
            "no status yet",
            "nostatus",
            "app",
            "",
            Err("container \"app\" in pod \"nostatus\" is not available"),
        ),
        (
            "image pull failing",
            "pulling",
            "app",
            "",
            Err("container \"app\" in pod \"pulling\" is waiting to start: image can't be pulled"),
        ),
    ];
    for (name, pod_name, container, query, want) in cases {
        let opts = opts(query);
        let got = open(&registry, &PodKey::new("default", pod_name), container, &opts).and_then(|mut o| {
            let mut out = Vec::new();
            o.file
                .drain(&mut LogFilter::new(&opts), true, &mut out)
                .map_err(|source| OpenError::Open { path: o.path.clone(), source })?;
            Ok(String::from_utf8_lossy(&out).into_owned())
        });
        assert_eq!(
            got.map_err(|e| e.to_string()),
            want.map(str::to_string).map_err(str::to_string),
            "{name}"
        );
    }
}

// ---- authorization attributes and reviews ------------------------------------------------------

#[test]
fn sar_attributes() {
    let cases: [(Method, &str, &str, &[&str]); 22] = [
        (Method::GET, "/containerLogs/default/web/app", "get", &["proxy"]),
        (Method::GET, "/healthz", "get", &["healthz", "proxy"]),
        (Method::GET, "/healthz/syncloop", "get", &["healthz", "proxy"]),
        (Method::GET, "/healthzz", "get", &["proxy"]),
        (Method::GET, "/pods", "get", &["pods", "proxy"]),
        (Method::GET, "/runningpods/", "get", &["pods", "proxy"]),
        (Method::GET, "/configz", "get", &["configz", "proxy"]),
        (Method::GET, "/statusz", "get", &["statusz", "proxy"]),
        (Method::GET, "/stats", "get", &["stats"]),
        (Method::GET, "/stats/summary", "get", &["stats"]),
        (Method::GET, "/metrics", "get", &["metrics"]),
        (Method::GET, "/metrics/cadvisor", "get", &["metrics"]),
        (Method::GET, "/metricsx", "get", &["proxy"]),
        (Method::GET, "/logs/", "get", &["log"]),
        (Method::GET, "/logs/syslog", "get", &["log"]),
        (Method::POST, "/checkpoint/default/web/app", "create", &["checkpoint"]),
        (Method::GET, "/spec/", "get", &["proxy"]),
        (Method::POST, "/exec/default/web/app", "create", &["proxy"]),
        (Method::PUT, "/x", "update", &["proxy"]),
        (Method::PATCH, "/x", "patch", &["proxy"]),
        (Method::DELETE, "/x", "delete", &["proxy"]),
        (Method::HEAD, "/healthz", "", &["healthz", "proxy"]),
    ];
    for (method, path, verb, subresources) in cases {
        let want = Attributes { verb, subresources: subresources.to_vec() };
        assert_eq!(request_attributes(&method, path), want, "{method} {path}");
    }
}

#[test]
fn bearer_tokens() {
    let cases = [
        ("Bearer abc", Some("abc")),
        ("bearer abc", Some("abc")),
        ("Bearer abc extra", Some("abc")),
        ("Bearer  abc", None),
        ("Bearer", None),
        ("Basic abc", None),
    ];
    for (value, want) in cases {
        let mut headers = HeaderMap::new();
        headers.insert(header::AUTHORIZATION, value.parse().expect("header value"));
        assert_eq!(bearer_token(&headers), want, "{value}");
    }
    assert_eq!(bearer_token(&HeaderMap::new()), None);
}

/// Stands in for the API server: tokens it knows, (user, subresource) pairs it allows; records
/// every review asked of it.
#[derive(Clone, Default)]
struct FakeReviewer {
    tokens: BTreeMap<String, User>,
    allowed: Vec<(String, String)>,
    calls: Arc<Mutex<Vec<String>>>,
}

impl FakeReviewer {
    fn calls(&self) -> Vec<String> {
        self.calls.lock().expect("calls").clone()
    }
}

impl Reviewer for FakeReviewer {
    async fn review_token(&self, token: &str) -> Result<Option<User>, ReviewError> {
        self.calls.lock().expect("calls").push(format!("token {token}"));
        Ok(self.tokens.get(token).cloned())
    }

    async fn review_access(
        &self,
        user: &User,
        verb: &str,
        subresource: &str,
        node: &str,
    ) -> Result<bool, ReviewError> {
        let groups = user.groups.join(",");
        self.calls
            .lock()
            .expect("calls")
            .push(format!("sar {} [{groups}] {verb} {subresource} {node}", user.name));
        Ok(self.allowed.iter().any(|(u, s)| *u == user.name && s == subresource))
    }
}

fn fake() -> FakeReviewer {
    let bob = User { name: "bob".into(), uid: "b-1".into(), groups: vec!["team".into()], ..User::default() };
    FakeReviewer {
        tokens: BTreeMap::from([("t-bob".to_string(), bob)]),
        allowed: vec![
            ("alice".into(), "healthz".into()),
            ("alice".into(), "proxy".into()),
            ("bob".into(), "proxy".into()),
        ],
        calls: Arc::default(),
    }
}

#[tokio::test(start_paused = true)]
async fn reviews_are_cached() {
    let reviewer = fake();
    let auth = Authenticator::new(reviewer.clone());
    let bob = auth.authenticate_token("t-bob").await.expect("reviewed").expect("bob");
    assert_eq!(bob.groups, ["team", "system:authenticated"], "system:authenticated is added");
    assert_eq!(auth.authenticate_token("nope").await.expect("reviewed"), None);
    auth.authenticate_token("t-bob").await.expect("cached");
    auth.authenticate_token("nope").await.expect("cached");
    assert_eq!(reviewer.calls(), ["token t-bob", "token nope"], "both answers cached");

    tokio::time::advance(Duration::from_secs(31)).await;
    auth.authenticate_token("t-bob").await.expect("cached");
    auth.authenticate_token("nope").await.expect("reviewed again");
    assert_eq!(reviewer.calls().len(), 3, "the rejection expired after 30s, the user did not");
    tokio::time::advance(Duration::from_secs(90)).await;
    auth.authenticate_token("t-bob").await.expect("reviewed again");
    assert_eq!(reviewer.calls().len(), 4, "the user expired after 2 min");

    reviewer.calls.lock().expect("calls").clear();
    let healthz = request_attributes(&Method::GET, "/healthz");
    for _ in 0..2 {
        assert_eq!(auth.authorize(&bob, &healthz, "node1").await.expect("authorized"), Decision::Allowed);
    }
    let calls = [
        "sar bob [team,system:authenticated] get healthz node1",
        "sar bob [team,system:authenticated] get proxy node1",
    ];
    assert_eq!(reviewer.calls(), calls, "healthz denied, then proxy allowed; both cached");
    tokio::time::advance(Duration::from_secs(31)).await;
    auth.authorize(&bob, &healthz, "node1").await.expect("authorized");
    assert_eq!(reviewer.calls()[2..], calls[..1], "the denial expired after 30s, the allowance did not");
    tokio::time::advance(Duration::from_secs(270)).await;
    auth.authorize(&bob, &healthz, "node1").await.expect("authorized");
    assert_eq!(reviewer.calls().len(), 5, "the allowance expired after 5 min");
}

// ---- a real server ----------------------------------------------------------------------------

/// A certificate and its key, PEM.
struct Pem {
    cert: String,
    key: String,
}

/// A CA and a certificate it issues for `cn`/`org` (a server one with `sans`).
struct Ca {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

impl Ca {
    fn new(name: &str) -> Self {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::DigitalSignature];
        let key = KeyPair::generate().expect("CA key");
        Self { issuer: CertifiedIssuer::self_signed(params, key).expect("CA certificate") }
    }

    fn pem(&self) -> String {
        self.issuer.pem()
    }

    fn issue(&self, cn: &str, org: Option<&str>, sans: &[&str], usage: ExtendedKeyUsagePurpose) -> Pem {
        let mut params =
            CertificateParams::new(sans.iter().map(|s| s.to_string()).collect::<Vec<_>>()).expect("params");
        params.distinguished_name.push(DnType::CommonName, cn);
        if let Some(o) = org {
            params.distinguished_name.push(DnType::OrganizationName, o);
        }
        params.extended_key_usages = vec![usage];
        let key = KeyPair::generate().expect("key");
        let cert = params.signed_by(&key, &self.issuer).expect("certificate");
        Pem { cert: cert.pem(), key: key.serialize_pem() }
    }
}

/// A kubelet API serving on 127.0.0.1 with a fake reviewer, certificates from `ca`.
struct TestServer {
    addr: SocketAddr,
    ca: Ca,
    registry: Registry,
    reviewer: FakeReviewer,
    cancel: CancellationToken,
    done: tokio::task::JoinHandle<()>,
    _dir: tempfile::TempDir,
}

impl TestServer {
    async fn start() -> Self {
        Self::start_with(None).await
    }

    /// Serving `slot`'s certificate if given, else a certificate of the test CA from files.
    async fn start_with(slot: Option<CertSlot>) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let ca = Ca::new("test CA");
        let serving =
            ca.issue("node1", None, &["127.0.0.1", "localhost"], ExtendedKeyUsagePurpose::ServerAuth);
        let (cert, key, ca_file) =
            (dir.path().join("tls.crt"), dir.path().join("tls.key"), dir.path().join("ca.crt"));
        std::fs::write(&cert, serving.cert).expect("write cert");
        std::fs::write(&key, serving.key).expect("write key");
        std::fs::write(&ca_file, ca.pem()).expect("write CA");
        let tls = match slot {
            Some(slot) => server_config(slot, Some(&ca_file)).expect("TLS config on the slot"),
            None => server_config_from_files(&cert, &key, Some(&ca_file)).expect("TLS config from the files"),
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("local addr");
        let reviewer = fake();
        let registry = Registry::default();
        // A healthy agent: /healthz answers ok.
        registry.liveness().sync_loop_beat();
        registry.liveness().relist_answered();
        let api = KubeletApi {
            auth: Authenticator::new(reviewer.clone()),
            registry: registry.clone(),
            node_name: "node1".to_string(),
            cri: no_runtime(),
            stats: no_stats(&registry),
            configz: serde_json::json!({ "kubeletconfig": { "port": 10250 } }),
        };
        let cancel = CancellationToken::new();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
        let done = tokio::spawn(super::serve(listener, acceptor, Arc::new(api), cancel.clone()));
        Self { addr, ca, registry, reviewer, cancel, done, _dir: dir }
    }

    /// A TLS client trusting the test CA, presenting `cert` if given, offering `alpn`.
    fn client(&self, cert: Option<&Pem>, alpn: &[&[u8]]) -> TlsConnector {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(CertificateDer::from_pem_slice(self.ca.pem().as_bytes()).expect("CA pem")).expect("root");
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("protocol versions")
            .with_root_certificates(roots);
        let mut config = match cert {
            Some(p) => {
                let chain = vec![CertificateDer::from_pem_slice(p.cert.as_bytes()).expect("cert pem")];
                let key = PrivateKeyDer::from_pem_slice(p.key.as_bytes()).expect("key pem");
                builder.with_client_auth_cert(chain, key).expect("client cert")
            }
            None => builder.with_no_client_auth(),
        };
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        TlsConnector::from(Arc::new(config))
    }

    /// `GET path` over HTTP/1.1, with a bearer token if given.
    async fn get(
        &self,
        tls: &TlsConnector,
        path: &str,
        token: Option<&str>,
    ) -> anyhow::Result<http::Response<Incoming>> {
        let tcp = TcpStream::connect(self.addr).await?;
        let stream = tls.connect(ServerName::try_from("127.0.0.1")?, tcp).await?;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(conn);
        let mut req = Request::get(path).header(header::HOST, "127.0.0.1");
        if let Some(t) = token {
            req = req.header(header::AUTHORIZATION, format!("Bearer {t}"));
        }
        Ok(sender.send_request(req.body(Empty::<Bytes>::new())?).await?)
    }

    async fn stop(self) {
        self.cancel.cancel();
        tokio::time::timeout(Duration::from_secs(5), self.done)
            .await
            .expect("serve returns")
            .expect("no panic");
    }
}

async fn text(resp: http::Response<Incoming>) -> (StatusCode, String) {
    let status = resp.status();
    let body = resp.into_body().collect().await.expect("body").to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

#[test]
fn certificate_identity() {
    let ca = Ca::new("test CA");
    let pem = ca.issue("alice", Some("dev"), &[], ExtendedKeyUsagePurpose::ClientAuth);
    let der = CertificateDer::from_pem_slice(pem.cert.as_bytes()).expect("pem");
    let want = User {
        name: "alice".into(),
        groups: vec!["dev".into(), "system:authenticated".into()],
        ..User::default()
    };
    assert_eq!(certificate_user(&der), Some(want));
    let nameless = ca.issue("", None, &[], ExtendedKeyUsagePurpose::ClientAuth);
    let der = CertificateDer::from_pem_slice(nameless.cert.as_bytes()).expect("pem");
    assert_eq!(certificate_user(&der), None, "no CN: not a user");
}

#[test]
fn bad_files_are_named() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = Ca::new("test CA");
    let serving = ca.issue("node1", None, &["127.0.0.1"], ExtendedKeyUsagePurpose::ServerAuth);
    let other = ca.issue("node2", None, &["127.0.0.1"], ExtendedKeyUsagePurpose::ServerAuth);
    let path = |n: &str| dir.path().join(n);
    std::fs::write(path("tls.crt"), &serving.cert).expect("write");
    std::fs::write(path("tls.key"), &serving.key).expect("write");
    std::fs::write(path("other.key"), &other.key).expect("write");
    std::fs::write(path("empty.crt"), "").expect("write");
    let err = |cert: &str, key: &str, ca: Option<&str>| {
        let ca = ca.map(path);
        let e = server_config_from_files(&path(cert), &path(key), ca.as_deref()).expect_err("refused");
        (format!("{e}"), e)
    };
    let (msg, e) = err("missing.crt", "tls.key", None);
    assert!(matches!(e, BindError::Read { what: "certificate", .. }), "{msg}");
    assert!(msg.contains("missing.crt"), "{msg}");
    let (msg, e) = err("empty.crt", "tls.key", None);
    assert!(matches!(e, BindError::NoCertificate { .. }) && msg.contains("empty.crt"), "{msg}");
    let (msg, e) = err("tls.crt", "other.key", None);
    assert!(
        matches!(e, BindError::Tls { .. }) && msg.contains("other.key"),
        "a key not the certificate's: {msg}"
    );
    let (msg, e) = err("tls.crt", "tls.key", Some("empty.crt"));
    assert!(matches!(e, BindError::NoCertificate { what: "client CA", .. }), "{msg}");
    server_config_from_files(&path("tls.crt"), &path("tls.key"), None).expect("no client CA is fine");
}

#[tokio::test]
async fn client_certificates() {
    let server = TestServer::start().await;
    let alice = server.ca.issue("alice", Some("dev"), &[], ExtendedKeyUsagePurpose::ClientAuth);
    let resp = server.get(&server.client(Some(&alice), &[]), "/healthz", None).await.expect("served");
    assert_eq!(text(resp).await, (StatusCode::OK, "ok".to_string()));
    assert_eq!(
        server.reviewer.calls(),
        ["sar alice [dev,system:authenticated] get healthz node1"],
        "the certificate's CN and O, reviewed on nodes/node1/healthz"
    );

    let stranger_ca = Ca::new("other CA");
    let mallory = stranger_ca.issue("alice", Some("dev"), &[], ExtendedKeyUsagePurpose::ClientAuth);
    let refused = server.get(&server.client(Some(&mallory), &[]), "/healthz", None).await;
    assert!(refused.is_err(), "a certificate from another CA is refused: {:?}", refused.map(|r| r.status()));
    assert_eq!(server.reviewer.calls().len(), 1, "no request got through");
    server.stop().await;
}

#[tokio::test]
async fn bearer_tokens_over_http() {
    let server = TestServer::start().await;
    let anonymous = server.client(None, &[]);
    let resp = server.get(&anonymous, "/healthz", None).await.expect("served");
    assert_eq!(text(resp).await, (StatusCode::UNAUTHORIZED, "Unauthorized".to_string()));
    let resp = server.get(&anonymous, "/healthz", Some("wrong")).await.expect("served");
    assert_eq!(text(resp).await.0, StatusCode::UNAUTHORIZED, "a token the API server rejects");

    for _ in 0..2 {
        let resp = server.get(&anonymous, "/healthz", Some("t-bob")).await.expect("served");
        assert_eq!(text(resp).await, (StatusCode::OK, "ok".to_string()), "bob may use nodes/proxy");
    }
    assert_eq!(
        server.reviewer.calls(),
        [
            "token wrong",
            "token t-bob",
            "sar bob [team,system:authenticated] get healthz node1",
            "sar bob [team,system:authenticated] get proxy node1",
        ],
        "the second request is answered from the caches"
    );
    server.stop().await;
}

#[tokio::test]
async fn forbidden_text() {
    let server = TestServer::start().await;
    let carol = server.ca.issue("carol", None, &[], ExtendedKeyUsagePurpose::ClientAuth);
    let tls = server.client(Some(&carol), &[]);
    let resp = server.get(&tls, "/healthz", None).await.expect("served");
    assert_eq!(
        text(resp).await,
        (
            StatusCode::FORBIDDEN,
            "Forbidden (user=carol, verb=get, resource=nodes, subresource(s)=[healthz proxy])".to_string()
        )
    );
    let resp = server.get(&tls, "/containerLogs/default/web/app", None).await.expect("served");
    assert_eq!(
        text(resp).await.1,
        "Forbidden (user=carol, verb=get, resource=nodes, subresource(s)=[proxy])",
        "containerLogs is nodes/proxy"
    );
    server.stop().await;
}

#[tokio::test]
async fn container_logs_over_http() {
    let server = TestServer::start().await;
    let tmp = tempfile::tempdir().expect("tempdir");
    write_logs(
        tmp.path(),
        &[(0, record(0, "F", "zero")), (1, record(1, "F", "one") + &record(2, "F", "more"))],
    );
    put_pod(&server.registry, "web", tmp.path(), json!([with_last_exit(running("app", true, 1), 5)]));
    let first = tmp.path().join("first");
    write_logs(&first, &[(0, record(0, "F", "zero"))]);
    put_pod(&server.registry, "first", &first, json!([running("app", true, 0)]));
    let alice = server.ca.issue("alice", Some("dev"), &[], ExtendedKeyUsagePurpose::ClientAuth);
    let tls = server.client(Some(&alice), &[]);
    let cases = [
        ("/containerLogs/default/web/app", StatusCode::OK, "one\nmore\n"),
        ("/containerLogs/default/web/app?previous=true", StatusCode::OK, "zero\n"),
        (
            "/containerLogs/default/web/app?tailLines=1&timestamps=true",
            StatusCode::OK,
            "2024-05-06T12:00:02.000000000Z more\n",
        ),
        ("/containerLogs/default/web/app?limitBytes=2", StatusCode::OK, "on"),
        (
            "/containerLogs/default/first/app?previous=1",
            StatusCode::BAD_REQUEST,
            "previous terminated container \"app\" in pod \"first\" not found",
        ),
        ("/containerLogs/default/gone/app", StatusCode::NOT_FOUND, "pod \"gone\" does not exist"),
        (
            "/containerLogs/default/web/side",
            StatusCode::NOT_FOUND,
            "container \"side\" not found in pod \"web\"",
        ),
        (
            "/containerLogs/default/web/app?tailLines=-1",
            StatusCode::UNPROCESSABLE_ENTITY,
            r#"{"message": "Invalid request."}"#,
        ),
        ("/containerLogs/default//app", StatusCode::BAD_REQUEST, r#"{"message": "Missing podID."}"#),
        ("/containerLogs/default/web", StatusCode::NOT_FOUND, "404 page not found\n"),
        ("/healthz/ping", StatusCode::OK, "ok"),
        ("/healthz?verbose", StatusCode::OK, "[+]ping ok\n[+]log ok\n[+]syncloop ok\nhealthz check passed\n"),
        ("/runningpods/", StatusCode::NOT_FOUND, "404 page not found\n"),
    ];
    for (path, status, body) in cases {
        let resp = server.get(&tls, path, None).await.expect("served");
        assert_eq!(text(resp).await, (status, body.to_string()), "{path}");
    }
    server.stop().await;
}

#[tokio::test]
async fn http2_is_served() {
    let server = TestServer::start().await;
    let tmp = tempfile::tempdir().expect("tempdir");
    write_logs(tmp.path(), &[(0, record(0, "F", "hello"))]);
    put_pod(&server.registry, "web", tmp.path(), json!([running("app", true, 0)]));
    let alice = server.ca.issue("alice", Some("dev"), &[], ExtendedKeyUsagePurpose::ClientAuth);
    let tls = server.client(Some(&alice), &[b"h2"]);
    let tcp = TcpStream::connect(server.addr).await.expect("connect");
    let stream = tls.connect(ServerName::try_from("127.0.0.1").expect("name"), tcp).await.expect("handshake");
    assert_eq!(stream.get_ref().1.alpn_protocol(), Some(&b"h2"[..]), "h2 negotiated");
    let (mut sender, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream)).await.expect("h2");
    tokio::spawn(conn);
    let req = Request::get("https://127.0.0.1/containerLogs/default/web/app")
        .body(Empty::<Bytes>::new())
        .expect("request");
    let resp = sender.send_request(req).await.expect("response");
    assert_eq!(text(resp).await, (StatusCode::OK, "hello\n".to_string()));
    server.stop().await;
}

/// Reads body frames until the text so far ends with `want` (or fails after 10 s).
async fn read_until(body: &mut Incoming, got: &mut String, want: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !got.ends_with(want) {
        let frame = tokio::time::timeout_at(deadline, body.frame()).await;
        let frame = frame.unwrap_or_else(|_| panic!("timed out waiting for {want:?}; got {got:?}"));
        let Some(frame) = frame else { panic!("body ended before {want:?}; got {got:?}") };
        if let Ok(data) = frame.expect("frame").into_data() {
            got.push_str(&String::from_utf8_lossy(&data));
        }
    }
}

#[tokio::test]
async fn follow_streams_across_rotation_until_the_container_stops() {
    let server = TestServer::start().await;
    let tmp = tempfile::tempdir().expect("tempdir");
    write_logs(tmp.path(), &[(0, record(0, "F", "a"))]);
    put_pod(&server.registry, "web", tmp.path(), json!([running("app", true, 0)]));
    let alice = server.ca.issue("alice", Some("dev"), &[], ExtendedKeyUsagePurpose::ClientAuth);
    let tls = server.client(Some(&alice), &[]);
    let resp = server.get(&tls, "/containerLogs/default/web/app?follow=true", None).await.expect("served");
    assert_eq!(resp.status(), StatusCode::OK);
    let mut body = resp.into_body();
    let mut got = String::new();
    read_until(&mut body, &mut got, "a\n").await;

    let log = tmp.path().join("app/0.log");
    let append = |text: &str| {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new().append(true).open(&log).expect("open log");
        f.write_all(text.as_bytes()).expect("append");
    };
    append(&record(1, "P", "b"));
    append(&record(2, "F", "c"));
    read_until(&mut body, &mut got, "bc\n").await;

    // Rotation as containerd's: renamed away, a new file at the path.
    std::fs::rename(&log, tmp.path().join("app/0.log.20240506-120003")).expect("rotate");
    std::fs::write(&log, record(3, "F", "d")).expect("new file");
    read_until(&mut body, &mut got, "d\n").await;

    let stopped = json!([{"name": "app", "ready": false, "restartCount": 0, "image": "b", "imageID": "",
                          "containerID": "containerd://app-id",
                          "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}]);
    append(&record(4, "F", "e"));
    put_pod(&server.registry, "web", tmp.path(), stopped);
    read_until(&mut body, &mut got, "e\n").await;
    let end = tokio::time::timeout(Duration::from_secs(10), body.frame()).await.expect("the body ends");
    assert!(end.is_none(), "no more frames once the container stopped");
    assert_eq!(got, "a\nbc\nd\ne\n");
    server.stop().await;
}

#[tokio::test]
async fn healthz_names_a_failed_check() {
    // A registry whose sync loop never turned.
    let api = KubeletApi {
        auth: Authenticator::new(fake()),
        registry: Registry::default(),
        node_name: "node1".into(),
        cri: no_runtime(),
        stats: no_stats(&Registry::default()),
        configz: serde_json::json!({ "kubeletconfig": {} }),
    };
    let get = |path: &str| {
        Request::get(path).header(header::AUTHORIZATION, "Bearer t-bob").body(()).expect("request")
    };
    let cases = [
        ("/healthz", "[+]ping ok\n[+]log ok\n[-]syncloop failed: reason withheld\nhealthz check failed\n"),
        ("/healthz/syncloop", "internal server error: syncloop failed\n"),
    ];
    for (path, want) in cases {
        let resp = api.handle(get(path), None, CancellationToken::new()).await;
        assert_eq!(resp.status(), StatusCode::INTERNAL_SERVER_ERROR, "{path}");
        let body = resp.into_body().collect().await.expect("body").to_bytes();
        assert_eq!(String::from_utf8_lossy(&body), want, "{path}");
    }
    let resp = api.handle(get("/healthz/ping"), None, CancellationToken::new()).await;
    assert_eq!(resp.status(), StatusCode::OK, "ping does not depend on the sync loop");
}

/// `/pods`, `/configz` and `/metrics/resource` answer (the latter with the scrape error when
/// the runtime cannot be asked); `/stats/summary` needs `nodes/stats`; POST is refused.
#[tokio::test]
async fn node_info_endpoints() {
    let mut reviewer = fake();
    reviewer.allowed.push(("bob".into(), "metrics".into()));
    let registry = Registry::default();
    let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "web", "namespace": "default", "uid": "u1"},
        "status": {"phase": "Running"}
    }))
    .expect("pod");
    registry.put_pod(
        crate::model::PodKey::new("default", "web"),
        crate::registry::PodRecord { pod, manifest_file: "web.yaml".into(), warnings: vec![] },
    );
    let api = KubeletApi {
        auth: Authenticator::new(reviewer),
        registry: registry.clone(),
        node_name: "node1".into(),
        cri: no_runtime(),
        stats: no_stats(&registry),
        configz: serde_json::json!({ "kubeletconfig": { "port": 10250 } }),
    };
    let call = |method: Method, path: &str| {
        Request::builder()
            .method(method)
            .uri(path)
            .header(header::AUTHORIZATION, "Bearer t-bob")
            .body(())
            .expect("request")
    };
    let body = |resp: http::Response<super::routes::Body>| async move {
        let status = resp.status();
        let b = resp.into_body().collect().await.expect("body").to_bytes();
        (status, String::from_utf8_lossy(&b).to_string())
    };
    let (status, pods) =
        body(api.handle(call(Method::GET, "/pods"), None, CancellationToken::new()).await).await;
    assert_eq!(status, StatusCode::OK);
    let pods: serde_json::Value = serde_json::from_str(&pods).expect("json");
    assert_eq!(pods["kind"], "PodList");
    assert_eq!(pods["items"][0]["metadata"]["name"], "web");
    assert_eq!(pods["items"][0]["status"]["phase"], "Running");
    let (status, configz) =
        body(api.handle(call(Method::GET, "/configz"), None, CancellationToken::new()).await).await;
    assert_eq!((status, configz.as_str()), (StatusCode::OK, r#"{"kubeletconfig":{"port":10250}}"#));
    let (status, metrics) =
        body(api.handle(call(Method::GET, "/metrics/resource"), None, CancellationToken::new()).await).await;
    assert_eq!(status, StatusCode::OK);
    assert!(metrics.ends_with("resource_scrape_error 1\n"), "{metrics}");
    let (status, _) =
        body(api.handle(call(Method::GET, "/stats/summary"), None, CancellationToken::new()).await).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "bob has no nodes/stats");
    for (query, want) in [
        (None, Scope::Full),
        (Some("only_cpu_and_memory=true"), Scope::CpuAndMemory),
        (Some("a=b&only_cpu_and_memory=1"), Scope::CpuAndMemory),
        (Some("only_cpu_and_memory=false"), Scope::Full),
        (Some("only_cpu_and_memory"), Scope::Full),
    ] {
        assert_eq!(super::routes::summary_scope(query), want, "{query:?}");
    }
    let (status, _) =
        body(api.handle(call(Method::POST, "/pods"), None, CancellationToken::new()).await).await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
}

/// `main` spawns the real server: its future (with the API server's reviewer) must be `Send`.
#[allow(dead_code)]
fn serving_is_send(server: super::Server, cancel: CancellationToken) {
    fn send<T: Send + 'static>(_: T) {}
    send(server.serve(cancel));
}

/// A CRI client whose endpoint does not exist (it connects lazily, so only a streaming request
/// would find out).
fn no_stats(registry: &Registry) -> crate::stats::Collector {
    crate::stats::Collector::new(
        no_runtime(),
        Arc::new(crate::cgroup::Cgroups::new(crate::cgroup::CgroupDriver::Cgroupfs)),
        registry.clone(),
        "node1".into(),
        "/nonexistent/root".into(),
        "/nonexistent/logs".into(),
        std::time::Duration::from_secs(60),
    )
}

fn no_runtime() -> crate::cri::CriClient {
    crate::cri::CriClient::new("unix:///nonexistent/cri.sock", "unix:///nonexistent/cri.sock")
        .expect("lazy client")
}

/// The certificate a new connection to `server` is served, or why the handshake failed.
async fn served_certificate(server: &TestServer, tls: &TlsConnector) -> Result<Vec<u8>, String> {
    let tcp = TcpStream::connect(server.addr).await.map_err(|e| e.to_string())?;
    let name = ServerName::try_from("127.0.0.1").map_err(|e| e.to_string())?;
    let stream = tls.connect(name, tcp).await.map_err(|e| e.to_string())?;
    let certs = stream.get_ref().1.peer_certificates().ok_or("no certificate")?;
    Ok(certs[0].to_vec())
}

#[tokio::test]
async fn handshakes_fail_without_a_serving_certificate_and_new_ones_get_the_rotated_one() {
    let slot = CertSlot::empty();
    let server = TestServer::start_with(Some(slot.clone())).await;
    let tls = server.client(None, &[]);
    let refused = served_certificate(&server, &tls).await.expect_err("no certificate yet: no handshake");
    assert!(refused.contains("alert"), "the server refuses with an alert: {refused}");

    let der = |p: &Pem| CertificateDer::from_pem_slice(p.cert.as_bytes()).expect("cert pem").to_vec();
    let first = server.ca.issue("node1", None, &["127.0.0.1"], ExtendedKeyUsagePurpose::ServerAuth);
    slot.swap(first.cert.as_bytes(), first.key.as_bytes()).expect("first pair");
    assert_eq!(served_certificate(&server, &tls).await.as_deref(), Ok(der(&first).as_slice()));
    let resp = server.get(&tls, "/healthz", None).await.expect("an answer over the first certificate");
    assert_eq!(resp.status(), StatusCode::UNAUTHORIZED, "anonymous: served, then refused by authn");

    // Rotated with no restart: the next full handshake presents the new certificate (a new
    // client: one that resumes its TLS session keeps the certificate it was authenticated with).
    let second = server.ca.issue("node1", None, &["127.0.0.1"], ExtendedKeyUsagePurpose::ServerAuth);
    slot.swap(second.cert.as_bytes(), second.key.as_bytes()).expect("second pair");
    let fresh = server.client(None, &[]);
    assert_eq!(served_certificate(&server, &fresh).await.as_deref(), Ok(der(&second).as_slice()));
    server.cancel.cancel();
}
