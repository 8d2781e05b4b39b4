//! `exec`, `attach` and `portForward`: the kubelet's streaming endpoints, as its server serves
//! them. The request names a pod's running container (or the pod, for port-forward); crilet asks
//! the runtime for a session (CRI `Exec`, `Attach`, `PortForward`), which answers with a URL on
//! its own streaming server, and proxies the client's upgraded connection (SPDY or WebSocket) to
//! that URL byte for byte. That is the kubelet's default too: the runtime's streaming server is
//! never shown to the client, and the protocol stays between the client and the runtime.

use http::request::Parts;
use http::{HeaderValue, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use tokio_util::sync::CancellationToken;
use tracing::debug;

use super::logs::decode_query;
use super::routes::Body;
use crate::cri::{CriClient, StreamingRequest, api};
use crate::model::{PodKey, keys};
use crate::registry::Registry;

/// What a streaming path asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Session {
    Exec { container: String, command: Vec<String>, io: Io },
    Attach { container: String, io: Io },
    PortForward { ports: Vec<i32> },
}

/// The streams a session carries (remotecommand's options: a flag is on only as "1").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Io {
    pub stdin: bool,
    pub stdout: bool,
    pub stderr: bool,
    pub tty: bool,
}

/// A parsed streaming request: the pod (and its UID when the path names one) and the session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Target {
    pub key: PodKey,
    pub uid: Option<String>,
    pub session: Session,
}

/// A request that cannot be served, with the kubelet's status code and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refusal(pub StatusCode, pub String);

/// `Some` when `path` is a streaming endpoint: `/exec/{ns}/{pod}[/{uid}]/{container}`,
/// `/attach/…` the same, `/portForward/{ns}/{pod}[/{uid}]`.
pub(crate) fn parse(path: &str, query: Option<&str>) -> Option<Result<Target, Refusal>> {
    let (kind, rest) = path.strip_prefix('/')?.split_once('/')?;
    if !matches!(kind, "exec" | "attach" | "portForward") {
        return None;
    }
    let seg: Vec<&str> = rest.split('/').collect();
    let pairs = query.map(decode_query).unwrap_or_default();
    let values =
        |name: &str| pairs.iter().filter(|(k, _)| k == name).map(|(_, v)| v.clone()).collect::<Vec<_>>();
    let flag = |name: &str| pairs.iter().find(|(k, _)| k == name).is_some_and(|(_, v)| v == "1");
    let (ns, pod, uid, container) = match (kind, &seg[..]) {
        ("portForward", [ns, pod]) => (*ns, *pod, None, None),
        ("portForward", [ns, pod, uid]) => (*ns, *pod, Some(*uid), None),
        (_, [ns, pod, c]) if kind != "portForward" => (*ns, *pod, None, Some(*c)),
        (_, [ns, pod, uid, c]) if kind != "portForward" => (*ns, *pod, Some(*uid), Some(*c)),
        _ => return Some(Err(Refusal(StatusCode::NOT_FOUND, "404 page not found\n".into()))),
    };
    if ns.is_empty() || pod.is_empty() || container.is_some_and(str::is_empty) {
        return Some(Err(Refusal(StatusCode::NOT_FOUND, "404 page not found\n".into())));
    }
    // The API server's names for the streams (core/v1 ExecStdinParam and the rest).
    let mut io = Io { stdin: flag("input"), stdout: flag("output"), stderr: flag("error"), tty: flag("tty") };
    // remotecommand: a terminal has no separate stderr.
    if io.tty {
        io.stderr = false;
    }
    let session = match (kind, container) {
        ("portForward", _) => {
            let mut ports = vec![];
            for p in values("port") {
                match p.parse::<u16>() {
                    Ok(n) if n > 0 => ports.push(i32::from(n)),
                    _ => return Some(Err(Refusal(StatusCode::BAD_REQUEST, format!("invalid port {p:?}")))),
                }
            }
            Session::PortForward { ports }
        }
        (_, Some(c)) => {
            if !(io.stdin || io.stdout || io.stderr) {
                return Some(Err(Refusal(
                    StatusCode::BAD_REQUEST,
                    "you must specify at least 1 of stdin, stdout, stderr".into(),
                )));
            }
            match kind {
                "exec" => Session::Exec { container: c.to_string(), command: values("command"), io },
                _ => Session::Attach { container: c.to_string(), io },
            }
        }
        _ => return None,
    };
    Some(Ok(Target { key: PodKey::new(ns, pod), uid: uid.map(str::to_string), session }))
}

/// The CRI request for `target`, from the agent's view of the pod (`pod`) and the runtime.
pub(crate) async fn cri_request(
    target: &Target,
    registry: &Registry,
    cri: &CriClient,
) -> Result<StreamingRequest, Refusal> {
    let record = registry
        .pod(&target.key)
        .ok_or_else(|| Refusal(StatusCode::NOT_FOUND, "pod does not exist".into()))?;
    let pod = &record.pod;
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    if target.uid.as_ref().is_some_and(|u| *u != uid) {
        return Err(Refusal(StatusCode::NOT_FOUND, "pod does not exist".into()));
    }
    let running = |name: &str| {
        running_container_id(pod, name).ok_or_else(|| {
            Refusal(StatusCode::INTERNAL_SERVER_ERROR, format!("container not found ({name:?})"))
        })
    };
    Ok(match &target.session {
        Session::Exec { container, command, io } => StreamingRequest::Exec(api::ExecRequest {
            container_id: running(container)?,
            cmd: command.clone(),
            tty: io.tty,
            stdin: io.stdin,
            stdout: io.stdout,
            stderr: io.stderr,
        }),
        Session::Attach { container, io } => StreamingRequest::Attach(api::AttachRequest {
            container_id: running(container)?,
            stdin: io.stdin,
            tty: io.tty,
            stdout: io.stdout,
            stderr: io.stderr,
        }),
        Session::PortForward { ports } => {
            let (sandboxes, _) = cri.list_all(Some((keys::POD_UID, &uid))).await.map_err(internal)?;
            let ready = sandboxes
                .iter()
                .filter(|s| s.state == api::PodSandboxState::SandboxReady as i32)
                .max_by_key(|s| s.created_at)
                .ok_or_else(|| {
                    Refusal(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        format!("pod {:?} has no running sandbox", target.key.name),
                    )
                })?;
            StreamingRequest::PortForward(api::PortForwardRequest {
                pod_sandbox_id: ready.id.clone(),
                port: ports.clone(),
            })
        }
    })
}

fn internal(e: impl std::fmt::Display) -> Refusal {
    Refusal(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())
}

/// The runtime ID of the running instance of container `name` (any kind), from the status.
fn running_container_id(pod: &Pod, name: &str) -> Option<String> {
    let status = pod.status.as_ref()?;
    let all =
        [&status.container_statuses, &status.init_container_statuses, &status.ephemeral_container_statuses];
    let st: &ContainerStatus = all.into_iter().flatten().flatten().find(|s| s.name == name)?;
    st.state.as_ref()?.running.as_ref()?;
    let id = st.container_id.as_deref()?;
    Some(id.split_once("://").map_or(id, |(_, id)| id).to_string())
}

/// The request asks for a protocol upgrade (`Connection: upgrade` and an `Upgrade` header).
fn is_upgrade(parts: &Parts) -> bool {
    let connection =
        parts.headers.get_all(header::CONNECTION).iter().any(|v| {
            v.to_str().is_ok_and(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case("upgrade")))
        });
    connection && parts.headers.contains_key(header::UPGRADE)
}

/// Proxies the client's upgrade request to the runtime's streaming `url` and, once the runtime
/// has switched protocols, copies bytes both ways until either side closes or the agent stops.
pub(crate) async fn proxy(mut parts: Parts, url: &str, cancel: CancellationToken) -> Response<Body> {
    if !is_upgrade(&parts) {
        return text(StatusCode::INTERNAL_SERVER_ERROR, "Upgrade request required");
    }
    let Ok(uri) = url.parse::<http::Uri>() else {
        return text(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("the runtime gave an invalid streaming URL {url:?}"),
        );
    };
    // The runtime's streaming server is local; never follow a URL anywhere else.
    let host = uri.host().unwrap_or("").trim_start_matches('[').trim_end_matches(']');
    let loopback = host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback()) || host == "localhost";
    let (Some(authority), true) = (uri.authority().cloned(), loopback && uri.scheme_str() == Some("http"))
    else {
        return text(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("the runtime's streaming URL {url:?} is not a local http URL"),
        );
    };
    let tcp = match tokio::net::TcpStream::connect(authority.as_str()).await {
        Ok(t) => t,
        Err(e) => {
            return text(
                StatusCode::BAD_GATEWAY,
                format!("connecting to the runtime's streaming server: {e}"),
            );
        }
    };
    let (mut sender, conn) = match hyper::client::conn::http1::handshake(TokioIo::new(tcp)).await {
        Ok(v) => v,
        Err(e) => return text(StatusCode::BAD_GATEWAY, format!("the runtime's streaming server: {e}")),
    };
    tokio::spawn(async move {
        if let Err(e) = conn.with_upgrades().await {
            debug!(error = %e, "runtime streaming connection ended");
        }
    });
    let mut upstream = Request::builder()
        .method(parts.method.clone())
        .uri(uri.path_and_query().map_or("/", |p| p.as_str()))
        .body(Empty::<Bytes>::new())
        .expect("a method and path from a parsed request make a request");
    for (name, value) in &parts.headers {
        // The client's credentials are the kubelet API's business, not the runtime's.
        if name != header::HOST && name != header::AUTHORIZATION {
            upstream.headers_mut().append(name.clone(), value.clone());
        }
    }
    if let Ok(v) = HeaderValue::from_str(authority.as_str()) {
        upstream.headers_mut().insert(header::HOST, v);
    }
    let mut answer = match sender.send_request(upstream).await {
        Ok(r) => r,
        Err(e) => return text(StatusCode::BAD_GATEWAY, format!("the runtime's streaming server: {e}")),
    };
    if answer.status() != StatusCode::SWITCHING_PROTOCOLS {
        let status = answer.status();
        let headers = answer.headers().clone();
        let body = answer.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
        let mut r = Response::new(Full::new(body).map_err(|never| match never {}).boxed());
        *r.status_mut() = status;
        *r.headers_mut() = headers;
        return r;
    }
    let mut response = Response::new(Empty::new().map_err(|never| match never {}).boxed());
    *response.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    *response.headers_mut() = answer.headers().clone();
    let runtime_side = hyper::upgrade::on(&mut answer);
    let client_side = parts.extensions.remove::<hyper::upgrade::OnUpgrade>();
    tokio::spawn(async move {
        let Some(client_side) = client_side else { return debug!("the connection cannot be upgraded") };
        let (client, runtime) = match tokio::join!(client_side, runtime_side) {
            (Ok(c), Ok(r)) => (c, r),
            (c, r) => return debug!(client = ?c.err(), runtime = ?r.err(), "a streaming upgrade failed"),
        };
        let (mut client, mut runtime) = (TokioIo::new(client), TokioIo::new(runtime));
        tokio::select! {
            _ = cancel.cancelled() => {}
            r = tokio::io::copy_bidirectional(&mut client, &mut runtime) => {
                if let Err(e) = r { debug!(error = %e, "streaming session ended") }
            }
        }
    });
    response
}

fn text(status: StatusCode, body: impl Into<Bytes>) -> Response<Body> {
    let mut r = Response::new(Full::new(body.into()).map_err(|never| match never {}).boxed());
    *r.status_mut() = status;
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(key: (&str, &str), uid: Option<&str>, session: Session) -> Option<Result<Target, Refusal>> {
        Some(Ok(Target { key: PodKey::new(key.0, key.1), uid: uid.map(str::to_string), session }))
    }

    #[test]
    fn streaming_paths_parse_as_the_kubelet_routes_them() {
        let io = |stdin, stdout, stderr, tty| Io { stdin, stdout, stderr, tty };
        let exec = |c: &str, cmd: &[&str], io| Session::Exec {
            container: c.into(),
            command: cmd.iter().map(|s| s.to_string()).collect(),
            io,
        };
        let bad = |code: StatusCode, msg: &str| Some(Err(Refusal(code, msg.into())));
        let cases: Vec<(&str, Option<&str>, Option<Result<Target, Refusal>>)> = vec![
            (
                "/exec/ns/p/c",
                Some("command=sh&command=-c&command=echo+a%20b&output=1&error=1"),
                target(("ns", "p"), None, exec("c", &["sh", "-c", "echo a b"], io(false, true, true, false))),
            ),
            (
                "/exec/ns/p/u-1/c",
                Some("command=ls&input=1&output=1&tty=1&error=1"),
                // A terminal has no separate stderr.
                target(("ns", "p"), Some("u-1"), exec("c", &["ls"], io(true, true, false, true))),
            ),
            // Only "1" turns a stream on, and only under the API server's names.
            (
                "/exec/ns/p/c",
                Some("command=ls&output=true&stdout=1"),
                bad(StatusCode::BAD_REQUEST, "you must specify at least 1 of stdin, stdout, stderr"),
            ),
            (
                "/attach/ns/p/c",
                Some("input=1&output=1"),
                target(
                    ("ns", "p"),
                    None,
                    Session::Attach { container: "c".into(), io: io(true, true, false, false) },
                ),
            ),
            ("/portForward/ns/p", None, target(("ns", "p"), None, Session::PortForward { ports: vec![] })),
            (
                "/portForward/ns/p/u",
                Some("port=80&port=8080"),
                target(("ns", "p"), Some("u"), Session::PortForward { ports: vec![80, 8080] }),
            ),
            ("/portForward/ns/p", Some("port=0"), bad(StatusCode::BAD_REQUEST, "invalid port \"0\"")),
            ("/portForward/ns/p", Some("port=x"), bad(StatusCode::BAD_REQUEST, "invalid port \"x\"")),
            ("/exec/ns/p", Some("output=1"), bad(StatusCode::NOT_FOUND, "404 page not found\n")),
            ("/exec/ns//c", Some("output=1"), bad(StatusCode::NOT_FOUND, "404 page not found\n")),
            ("/portForward/ns/p/u/x", None, bad(StatusCode::NOT_FOUND, "404 page not found\n")),
            ("/containerLogs/ns/p/c", None, None),
            ("/execx/ns/p/c", None, None),
        ];
        for (path, query, want) in cases {
            assert_eq!(parse(path, query), want, "{path}?{}", query.unwrap_or(""));
        }
    }

    #[test]
    fn only_a_running_instance_is_a_target() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
            "status": {
                "containerStatuses": [
                    {"name": "app", "ready": true, "restartCount": 0, "image": "i", "imageID": "",
                     "containerID": "containerd://abc", "state": {"running": {}}},
                    {"name": "done", "ready": false, "restartCount": 0, "image": "i", "imageID": "",
                     "containerID": "containerd://def", "state": {"terminated": {"exitCode": 0}}}
                ],
                "initContainerStatuses": [
                    {"name": "side", "ready": true, "restartCount": 0, "image": "i", "imageID": "",
                     "containerID": "containerd://s1", "state": {"running": {}}}
                ]
            }
        }))
        .expect("pod");
        assert_eq!(running_container_id(&pod, "app").as_deref(), Some("abc"));
        assert_eq!(running_container_id(&pod, "side").as_deref(), Some("s1"));
        assert_eq!(running_container_id(&pod, "done"), None);
        assert_eq!(running_container_id(&pod, "nope"), None);
    }
}
