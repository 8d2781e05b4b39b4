//! [`ApiObjects`] on a real API server, through kube-rs.

use std::time::Duration;

use futures::StreamExt;
use futures::future::BoxFuture;
use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service, ServiceAccount};
use kube::api::{Api, PostParams};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use tracing::warn;

use super::{ApiObjects, IssuedToken, PodTokenRequest};

/// How long a container start waits for the first list of services before it fails with the
/// kubelet's "services have not yet been read" (and is retried).
const SERVICES_FIRST_LIST: Duration = Duration::from_secs(10);

/// Reads ConfigMaps and Secrets and requests tokens with the node's client (the node
/// authorizer lets a node read only what its own pods name), and keeps every Service in a
/// store fed by a watch (for service environment variables, as the kubelet's informer).
#[derive(Clone)]
pub struct KubeObjects {
    pub client: kube::Client,
    services: reflector::Store<Service>,
}

impl KubeObjects {
    /// The objects, and the watch of services that feeds their store, for the caller to run as
    /// long as the agent (it relists after outages; the agent runs it in its task set).
    pub fn new(client: kube::Client) -> (Self, impl std::future::Future<Output = ()> + Send + 'static) {
        let (services, writer) = reflector::store();
        let stream =
            reflector(writer, watcher(Api::<Service>::all(client.clone()), watcher::Config::default()))
                .default_backoff()
                .touched_objects();
        let watch = async move {
            let mut stream = std::pin::pin!(stream);
            while let Some(r) = stream.next().await {
                if let Err(e) = r {
                    warn!(error = %e, "watching services failed; retrying with back-off");
                }
            }
        };
        (Self { client, services }, watch)
    }
}

/// The API's own message for API errors (`configmaps "x" is forbidden: ...`), else the error.
fn message(e: kube::Error) -> String {
    match e {
        kube::Error::Api(status) if !status.message.is_empty() => status.message,
        other => other.to_string(),
    }
}

impl ApiObjects for KubeObjects {
    fn config_map<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<ConfigMap>, String>> {
        Box::pin(async move {
            Api::<ConfigMap>::namespaced(self.client.clone(), namespace).get_opt(name).await.map_err(message)
        })
    }

    fn secret<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<Secret>, String>> {
        Box::pin(async move {
            Api::<Secret>::namespaced(self.client.clone(), namespace).get_opt(name).await.map_err(message)
        })
    }

    fn service_account_token<'a>(
        &'a self,
        request: &'a PodTokenRequest,
    ) -> BoxFuture<'a, Result<IssuedToken, String>> {
        Box::pin(async move {
            let body = TokenRequest {
                spec: Some(TokenRequestSpec {
                    // None: the API server's default audiences.
                    audiences: request.audience.as_ref().map(|a| vec![a.clone()]),
                    expiration_seconds: Some(request.expiration_seconds),
                    bound_object_ref: Some(BoundObjectReference {
                        api_version: Some("v1".into()),
                        kind: Some("Pod".into()),
                        name: Some(request.pod_name.clone()),
                        uid: Some(request.pod_uid.clone()),
                    }),
                }),
                ..Default::default()
            };
            let api = Api::<ServiceAccount>::namespaced(self.client.clone(), &request.namespace);
            let out = api
                .create_token_request(&request.service_account, &PostParams::default(), &body)
                .await
                .map_err(message)?;
            let status =
                out.status.ok_or_else(|| "the TokenRequest came back without a status".to_string())?;
            // Both are set by a successful TokenRequest; optional in the 1.36 types only.
            let (Some(token), Some(expires)) = (status.token, status.expiration_timestamp) else {
                return Err("the TokenRequest status lacks the token or its expiry".to_string());
            };
            Ok(IssuedToken { token, expires_at: expires.0 })
        })
    }

    fn service_env<'a>(
        &'a self,
        namespace: &'a str,
        enable_service_links: bool,
    ) -> BoxFuture<'a, Result<Vec<(String, String)>, String>> {
        Box::pin(async move {
            match tokio::time::timeout(SERVICES_FIRST_LIST, self.services.wait_until_ready()).await {
                Ok(Ok(())) => {}
                _ => {
                    return Err(
                        "services have not yet been read at least once, cannot construct envvars".into()
                    );
                }
            }
            let all = self.services.state();
            Ok(super::services::service_env(all.iter().map(|s| &**s), namespace, enable_service_links))
        })
    }
}
