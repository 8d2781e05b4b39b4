//! One request to the kubelet API: authenticate, authorize (the kubelet's auth filter runs for
//! every request, before routing), then `/healthz[/check]`, `/stats/summary`,
//! `/metrics/resource`, `/pods`, `/configz`, `containerLogs`, or the streaming endpoints
//! (`exec`, `attach`, `portForward`). Everything else is 404. Response bodies and status codes follow the kubelet's (go-restful) handlers.

use std::io;

use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Bytes, Frame};
use tokio_stream::StreamExt;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::auth::{Attributes, Authenticator, Decision, Reviewer, User, bearer_token, request_attributes};
use super::logs::{self, FollowContext, OpenError, QueryError};
use super::streaming;
use crate::cri::CriClient;
use crate::model::PodKey;
use crate::registry::Registry;
use crate::stats::{Collector, Scope, resource_metrics};

/// The body of every response: whole, or streamed from a log.
pub(crate) type Body = BoxBody<Bytes, io::Error>;

/// What requests are served from: the reviews, the agent's pods, and this node's name.
pub(crate) struct KubeletApi<R> {
    pub auth: Authenticator<R>,
    pub registry: Registry,
    pub node_name: String,
    /// Asked for exec, attach and port-forward sessions.
    pub cri: CriClient,
    /// `/stats/summary` and `/metrics/resource`.
    pub stats: Collector,
    /// `/configz`'s document: the agent's settings as a `KubeletConfiguration`.
    pub configz: serde_json::Value,
}

impl<R: Reviewer> KubeletApi<R> {
    /// Answers one request. `cert_user` is the connection's verified client certificate's user.
    pub(crate) async fn handle<B>(
        &self,
        req: Request<B>,
        cert_user: Option<User>,
        cancel: CancellationToken,
    ) -> Response<Body> {
        let (parts, _) = req.into_parts();
        let path = parts.uri.path().to_string();
        let path = path.as_str();
        let auth_span = tracing::trace_span!("kubelet_api.auth");
        let Some(user) =
            tracing::Instrument::instrument(self.authenticate(cert_user, &parts.headers), auth_span.clone())
                .await
        else {
            return text(StatusCode::UNAUTHORIZED, "Unauthorized");
        };
        let attrs = request_attributes(&parts.method, path);
        let decision =
            tracing::Instrument::instrument(self.auth.authorize(&user, &attrs, &self.node_name), auth_span)
                .await;
        match decision {
            Ok(Decision::Allowed) => {}
            Ok(Decision::Denied) => {
                debug!(user = %user.name, verb = attrs.verb, subresources = ?attrs.subresources, "forbidden");
                return text(StatusCode::FORBIDDEN, describe("Forbidden", &user, &attrs));
            }
            Err(e) => {
                warn!(error = %crate::error_chain(&e), user = %user.name, "authorization failed");
                return text(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    describe("Authorization error", &user, &attrs),
                );
            }
        }
        if path == "/healthz" || path.starts_with("/healthz/") {
            return self.healthz(path, parts.uri.query());
        }
        let info = self.info(&parts.method, path, parts.uri.query());
        if let Some(response) =
            tracing::Instrument::instrument(info, tracing::trace_span!("kubelet_api.info", op = path)).await
        {
            return response;
        }
        if let Some(rest) = path.strip_prefix("/containerLogs/") {
            if parts.method != Method::GET {
                return text(StatusCode::METHOD_NOT_ALLOWED, "405: Method Not Allowed");
            }
            return self.container_logs(rest, parts.uri.query(), cancel).await;
        }
        if let Some(target) = streaming::parse(path, parts.uri.query()) {
            if parts.method != Method::GET && parts.method != Method::POST {
                return text(StatusCode::METHOD_NOT_ALLOWED, "405: Method Not Allowed");
            }
            let refused = |r: streaming::Refusal| text(r.0, r.1);
            let target = match target {
                Ok(t) => t,
                Err(r) => return refused(r),
            };
            let request = match streaming::cri_request(&target, &self.registry, &self.cri).await {
                Ok(r) => r,
                Err(r) => return refused(r),
            };
            let url = match self.cri.streaming_url(request).await {
                Ok(u) => u,
                Err(e) if e.is_not_found() => return text(StatusCode::NOT_FOUND, e.to_string()),
                Err(e) => return text(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
            };
            debug!(pod = %target.key, session = ?target.session, "proxying a streaming session");
            return streaming::proxy(parts, &url, cancel).await;
        }
        not_found()
    }

    /// The certificate's user, else a bearer token's; `None`: unauthenticated (anonymous
    /// requests are not allowed, as with the kubelet's `--anonymous-auth=false`).
    async fn authenticate(&self, cert_user: Option<User>, headers: &http::HeaderMap) -> Option<User> {
        if cert_user.is_some() {
            return cert_user;
        }
        let token = bearer_token(headers)?;
        match self.auth.authenticate_token(token).await {
            Ok(user) => user,
            Err(e) => {
                warn!(error = %crate::error_chain(&e), "unable to authenticate the request");
                None
            }
        }
    }

    /// The apiserver library's healthz handler with the kubelet's checks (`ping`, `log`,
    /// `syncloop`): `ok`, or 500 naming the failed check; `/healthz/<check>` for one check.
    /// The agent's liveness (its sync loop and the runtime's relist) stands for `syncloop`.
    fn healthz(&self, path: &str, query: Option<&str>) -> Response<Body> {
        let syncloop = self.registry.liveness().check().is_ok();
        let checks = [("ping", true), ("log", true), ("syncloop", syncloop)];
        if let Some(name) = path.strip_prefix("/healthz/") {
            return match checks.iter().find(|(n, _)| *n == name) {
                Some((_, true)) => text(StatusCode::OK, "ok"),
                Some((n, false)) => {
                    text(StatusCode::INTERNAL_SERVER_ERROR, format!("internal server error: {n} failed\n"))
                }
                None => not_found(),
            };
        }
        let mut listing = String::new();
        for (name, ok) in checks {
            match ok {
                true => listing.push_str(&format!("[+]{name} ok\n")),
                false => listing.push_str(&format!("[-]{name} failed: reason withheld\n")),
            }
        }
        if checks.iter().any(|(_, ok)| !ok) {
            return text(StatusCode::INTERNAL_SERVER_ERROR, format!("{listing}healthz check failed\n"));
        }
        let verbose = query.is_some_and(|q| q.split('&').any(|p| p.split('=').next() == Some("verbose")));
        match verbose {
            true => text(StatusCode::OK, format!("{listing}healthz check passed\n")),
            false => text(StatusCode::OK, "ok"),
        }
    }

    /// `/stats/summary`, `/metrics/resource`, `/pods` and `/configz`; `None` for other paths.
    /// GET only (the summary's POST with a filter, deprecated upstream, is not served). The
    /// summary's `only_cpu_and_memory=true` leaves out what the kubelet's does (networks, disks).
    async fn info(&self, method: &Method, path: &str, query: Option<&str>) -> Option<Response<Body>> {
        let path = path.strip_suffix('/').unwrap_or(path);
        if !matches!(path, "/stats/summary" | "/metrics/resource" | "/pods" | "/configz") {
            return None;
        }
        if method != Method::GET {
            return Some(text(StatusCode::METHOD_NOT_ALLOWED, "405: Method Not Allowed"));
        }
        Some(match path {
            "/stats/summary" => match self.stats.summary(summary_scope(query)).await {
                Ok(summary) => json(&summary),
                Err(e) => {
                    warn!(error = %e, "collecting the stats summary failed");
                    text(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        format!("Internal Error: failed to get node info: {e}"),
                    )
                }
            },
            "/metrics/resource" => {
                let summary = self.stats.summary(Scope::CpuAndMemory).await;
                if let Err(e) = &summary {
                    warn!(error = %e, "collecting the resource metrics failed");
                }
                let mut r = text(StatusCode::OK, resource_metrics::render(summary.as_ref().ok()));
                r.headers_mut().insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
                );
                r
            }
            "/pods" => json(&self.pod_list()),
            _ => json(&self.configz),
        })
    }

    /// The node's pods as the kubelet's `/pods` lists them: a `v1` `PodList` of the pods it
    /// runs (API and static), each with its status.
    fn pod_list(&self) -> serde_json::Value {
        let mut pods: Vec<_> = self.registry.pods().into_iter().map(|r| r.pod).collect();
        pods.sort_by(|a, b| {
            (&a.metadata.namespace, &a.metadata.name).cmp(&(&b.metadata.namespace, &b.metadata.name))
        });
        serde_json::json!({ "kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": pods })
    }

    /// `GET /containerLogs/{namespace}/{pod}/{container}` (`rest` is what follows the prefix).
    async fn container_logs(
        &self,
        rest: &str,
        query: Option<&str>,
        cancel: CancellationToken,
    ) -> Response<Body> {
        let segments: Vec<&str> = rest.split('/').collect();
        let [namespace, pod, container] = segments[..] else { return not_found() };
        for (value, message) in [
            (pod, r#"{"message": "Missing podID."}"#),
            (container, r#"{"message": "Missing container name."}"#),
            (namespace, r#"{"message": "Missing podNamespace."}"#),
        ] {
            if value.is_empty() {
                return text(StatusCode::BAD_REQUEST, message);
            }
        }
        let opts = match logs::parse_query(query, jiff::Timestamp::now()) {
            Ok(o) => o,
            Err(e @ QueryError::Decode) => return text(StatusCode::BAD_REQUEST, e.to_string()),
            Err(e @ QueryError::Invalid) => return text(StatusCode::UNPROCESSABLE_ENTITY, e.to_string()),
        };
        let key = PodKey::new(namespace, pod);
        let (registry, k, c, o) = (self.registry.clone(), key.clone(), container.to_string(), opts.clone());
        let opened = match tokio::task::spawn_blocking(move || logs::open(&registry, &k, &c, &o)).await {
            Ok(r) => r,
            Err(e) => return text(StatusCode::INTERNAL_SERVER_ERROR, format!("reading the log failed: {e}")),
        };
        let opened = match opened {
            Ok(o) => o,
            Err(e @ (OpenError::PodNotFound(_) | OpenError::ContainerNotFound { .. })) => {
                return text(StatusCode::NOT_FOUND, e.to_string());
            }
            Err(e) => return text(StatusCode::BAD_REQUEST, e.to_string()),
        };
        let ctx =
            FollowContext { registry: self.registry.clone(), key, container: container.to_string(), cancel };
        let chunks = ReceiverStream::new(logs::stream(opened, &opts, ctx)).map(|c| c.map(Frame::data));
        let mut r = Response::new(BodyExt::boxed(StreamBody::new(chunks)));
        r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
        r
    }
}

/// Upstream's denial text: `Forbidden (user=…, verb=…, resource=nodes, subresource(s)=[a b])`.
pub(crate) fn describe(what: &str, user: &User, attrs: &Attributes) -> String {
    format!(
        "{what} (user={}, verb={}, resource=nodes, subresource(s)=[{}])",
        user.name,
        attrs.verb,
        attrs.subresources.join(" ")
    )
}

fn not_found() -> Response<Body> {
    text(StatusCode::NOT_FOUND, "404 page not found\n")
}

/// The summary's scope from its query: `only_cpu_and_memory=true` (as upstream's `ParseBool`).
pub(crate) fn summary_scope(query: Option<&str>) -> Scope {
    let only = query.into_iter().flat_map(|q| q.split('&')).any(|p| {
        p.split_once('=').is_some_and(|(k, v)| {
            k == "only_cpu_and_memory" && matches!(v, "1" | "t" | "T" | "true" | "TRUE" | "True")
        })
    });
    if only { Scope::CpuAndMemory } else { Scope::Full }
}

fn json(value: &impl serde::Serialize) -> Response<Body> {
    let body = match serde_json::to_vec(value) {
        Ok(b) => b,
        Err(e) => return text(StatusCode::INTERNAL_SERVER_ERROR, format!("encoding the answer failed: {e}")),
    };
    let mut r = text(StatusCode::OK, body);
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

fn text(status: StatusCode, body: impl Into<Bytes>) -> Response<Body> {
    let body = Full::new(body.into()).map_err(|never| match never {}).boxed();
    let mut r = Response::new(body);
    *r.status_mut() = status;
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    r
}
