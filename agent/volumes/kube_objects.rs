//! [`ApiObjects`] on a real API server, through kube-rs.

use futures::future::BoxFuture;
use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{ConfigMap, Secret, ServiceAccount};
use kube::api::{Api, PostParams};

use super::{ApiObjects, IssuedToken, PodTokenRequest};

/// Reads ConfigMaps and Secrets and requests tokens with the node's client (the node
/// authorizer lets a node read only what its own pods name).
#[derive(Clone)]
pub struct KubeObjects {
    pub client: kube::Client,
}

impl KubeObjects {
    pub fn new(client: kube::Client) -> Self {
        Self { client }
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
}
