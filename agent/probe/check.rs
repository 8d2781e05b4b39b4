//! One probe attempt with each handler (R6.8–R6.11): exec through CRI `ExecSync`, httpGet
//! (redirects only to the same host, 200–399 succeed), tcpSocket connect, gRPC health `Check`.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Probe};
use tokio::net::TcpStream;

use super::tracker::Outcome;
use crate::cri::{CriError, Runtime};
use crate::expand::expand;
use crate::http_get::{HttpRequest, http_get};
use crate::ports::resolve_port;

/// The result of one attempt: the outcome and its text (event message), or an internal error
/// that must not move the counters (R6.4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attempt {
    Done { outcome: Outcome, output: String, warning: Option<String> },
    Error(String),
}

fn done(outcome: Outcome, output: impl Into<String>) -> Attempt {
    Attempt::Done { outcome, output: output.into(), warning: None }
}

/// What a probe attempt needs to know about its target.
pub struct Target<'a> {
    pub cri: &'a dyn Runtime,
    pub container_id: &'a str,
    pub spec: &'a Container,
    pub pod_ip: Option<&'a str>,
}

pub fn timeout_of(p: &Probe) -> Duration {
    Duration::from_secs(u64::try_from(p.timeout_seconds.unwrap_or(1).max(1)).unwrap_or(1))
}

/// Runs one attempt of `probe` against `t`.
pub async fn run(probe: &Probe, t: &Target<'_>) -> Attempt {
    let timeout = timeout_of(probe);
    if let Some(exec) = &probe.exec {
        return exec_probe(t, exec.command.clone().unwrap_or_default(), timeout).await;
    }
    if let Some(get) = &probe.http_get {
        let Some(port) = resolve_port(&get.port, t.spec) else {
            return Attempt::Error(format!("unable to resolve port {:?}", get.port));
        };
        let host = get.host.clone().filter(|h| !h.is_empty()).or_else(|| t.pod_ip.map(str::to_string));
        let Some(host) = host else { return Attempt::Error("pod has no IP yet".into()) };
        let req = HttpRequest::for_action(
            get,
            host,
            port,
            format!("kube-probe/{}", crate::KUBE_VERSION),
            Some(timeout),
        );
        return http_probe(req).await;
    }
    if let Some(tcp) = &probe.tcp_socket {
        let Some(port) = resolve_port(&tcp.port, t.spec) else {
            return Attempt::Error(format!("unable to resolve port {:?}", tcp.port));
        };
        let host = tcp.host.clone().filter(|h| !h.is_empty()).or_else(|| t.pod_ip.map(str::to_string));
        let Some(host) = host else { return Attempt::Error("pod has no IP yet".into()) };
        return tcp_probe(&host, port, timeout).await;
    }
    if let Some(grpc) = &probe.grpc {
        let Some(ip) = t.pod_ip else { return Attempt::Error("pod has no IP yet".into()) };
        let Ok(port) = u16::try_from(grpc.port) else {
            return Attempt::Error(format!("bad port {}", grpc.port));
        };
        return grpc_probe(ip, port, grpc.service.clone().unwrap_or_default(), timeout).await;
    }
    Attempt::Error("probe has no handler".into())
}

/// R6.8: `$(VAR)` from the container's literal env only; valueFrom names become empty.
fn expand_command(cmd: Vec<String>, spec: &Container) -> Vec<String> {
    let lookup = |n: &str| {
        spec.env.iter().flatten().find(|e| e.name == n).map(|e| e.value.clone().unwrap_or_default())
    };
    cmd.iter().map(|a| expand(a, &lookup)).collect()
}

async fn exec_probe(t: &Target<'_>, cmd: Vec<String>, timeout: Duration) -> Attempt {
    let cmd = expand_command(cmd, t.spec);
    match t.cri.exec_sync(t.container_id, cmd, timeout).await {
        Ok((0, out)) => done(Outcome::Success, bounded(&out)),
        Ok((code, out)) => {
            let text = bounded(&out);
            let text = if text.is_empty() { format!("command exited with {code}") } else { text };
            done(Outcome::Failure, text)
        }
        // An exec that outlives its timeout is a failure (ExecProbeTimeout).
        Err(CriError::DeadlineExceeded { .. }) => {
            done(Outcome::Failure, format!("command timed out after {timeout:?}"))
        }
        Err(CriError::Rpc { message, .. }) if message.contains("timeout") || message.contains("deadline") => {
            done(Outcome::Failure, format!("command timed out: {message}"))
        }
        Err(e) => Attempt::Error(e.to_string()),
    }
}

fn bounded(out: &[u8]) -> String {
    let end = out.len().min(10 * 1024);
    String::from_utf8_lossy(&out[..end]).trim_end().to_string()
}

/// R6.9: follow redirects only to the same host (at most 10); a redirect elsewhere succeeds
/// with a warning.
async fn http_probe(mut req: HttpRequest) -> Attempt {
    for _ in 0..=10 {
        let resp = match http_get(&req).await {
            Ok(r) => r,
            Err(e) => return done(Outcome::Failure, e.to_string()),
        };
        if (300..400).contains(&resp.status) {
            if let Some(loc) = resp.location.as_deref().and_then(|l| redirect_target(&req, l)) {
                if loc.0 == req.host && loc.1 == req.port {
                    req.path = loc.2;
                    continue;
                }
                return Attempt::Done {
                    outcome: Outcome::Success,
                    output: String::new(),
                    warning: Some(format!(
                        "Probe terminated redirects, Response body: {}",
                        String::from_utf8_lossy(&resp.body)
                    )),
                };
            }
            return done(Outcome::Success, String::from_utf8_lossy(&resp.body));
        }
        if (200..400).contains(&resp.status) {
            return done(Outcome::Success, String::from_utf8_lossy(&resp.body));
        }
        return done(Outcome::Failure, format!("HTTP probe failed with statuscode: {}", resp.status));
    }
    done(Outcome::Failure, "stopped after 10 redirects")
}

/// (host, port, path) of a Location header, relative to `req`.
fn redirect_target(req: &HttpRequest, location: &str) -> Option<(String, u16, String)> {
    if location.starts_with('/') {
        return Some((req.host.clone(), req.port, location.to_string()));
    }
    let uri: http::Uri = location.parse().ok()?;
    let host = uri.host()?.trim_matches(['[', ']']).to_string();
    let default_port = if uri.scheme_str() == Some("https") { 443 } else { 80 };
    let port = uri.port_u16().unwrap_or(default_port);
    let path = uri.path_and_query().map(|p| p.as_str().to_string()).unwrap_or_else(|| "/".into());
    Some((host, port, path))
}

async fn tcp_probe(host: &str, port: u16, timeout: Duration) -> Attempt {
    let addr = if host.contains(':') { format!("[{host}]:{port}") } else { format!("{host}:{port}") };
    match tokio::time::timeout(timeout, TcpStream::connect(&addr)).await {
        Ok(Ok(_stream)) => done(Outcome::Success, ""),
        Ok(Err(e)) => done(Outcome::Failure, format!("dial tcp {addr}: {e}")),
        Err(_) => done(Outcome::Failure, format!("dial tcp {addr}: i/o timeout")),
    }
}

async fn grpc_probe(ip: &str, port: u16, service: String, timeout: Duration) -> Attempt {
    use tonic_health::pb::HealthCheckRequest;
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::health_client::HealthClient;
    let addr = if ip.contains(':') { format!("http://[{ip}]:{port}") } else { format!("http://{ip}:{port}") };
    let fut = async {
        let endpoint = tonic::transport::Endpoint::from_shared(addr.clone())
            .map_err(|e| e.to_string())?
            .user_agent(format!("kube-probe/{}", crate::KUBE_VERSION))
            .map_err(|e| e.to_string())?
            .connect_timeout(timeout);
        let channel =
            endpoint.connect().await.map_err(|e| format!("failed to connect service {addr}: {e}"))?;
        let mut client = HealthClient::new(channel);
        let resp = client.check(HealthCheckRequest { service }).await.map_err(|s| {
            if s.code() == tonic::Code::Unimplemented {
                format!(
                    "this server does not implement the grpc health protocol (grpc.health.v1.Health): {}",
                    s.message()
                )
            } else {
                format!("health rpc probe failed: {s}")
            }
        })?;
        Ok::<i32, String>(resp.into_inner().status)
    };
    match tokio::time::timeout(timeout, fut).await {
        Ok(Ok(s)) if s == ServingStatus::Serving as i32 => done(Outcome::Success, "service is serving"),
        Ok(Ok(s)) => done(
            Outcome::Failure,
            format!(
                "service unhealthy (responded with {:?})",
                ServingStatus::try_from(s).unwrap_or(ServingStatus::Unknown)
            ),
        ),
        Ok(Err(e)) => done(Outcome::Failure, e),
        Err(_) => done(Outcome::Failure, format!("timeout: health rpc did not complete within {timeout:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req() -> HttpRequest {
        HttpRequest {
            https: false,
            host: "10.0.0.2".into(),
            port: 8080,
            path: "/".into(),
            headers: vec![],
            user_agent: String::new(),
            timeout: None,
        }
    }

    #[test]
    fn redirect_targets() {
        let r = req();
        assert_eq!(redirect_target(&r, "/x?y=1"), Some(("10.0.0.2".into(), 8080, "/x?y=1".into())));
        assert_eq!(
            redirect_target(&r, "http://10.0.0.2:8080/a"),
            Some(("10.0.0.2".into(), 8080, "/a".into()))
        );
        assert_eq!(
            redirect_target(&r, "http://example.com/a"),
            Some(("example.com".into(), 80, "/a".into()))
        );
    }

    #[test]
    fn exec_command_expansion() {
        let spec = Container {
            env: Some(vec![
                k8s_openapi::api::core::v1::EnvVar {
                    name: "A".into(),
                    value: Some("1".into()),
                    value_from: None,
                },
                k8s_openapi::api::core::v1::EnvVar {
                    name: "B".into(),
                    value: None,
                    value_from: Some(Default::default()),
                },
            ]),
            ..Default::default()
        };
        let got = expand_command(vec!["$(A)".into(), "$(B)".into(), "$(C)".into()], &spec);
        assert_eq!(got, vec!["1", "", "$(C)"]);
    }
}
