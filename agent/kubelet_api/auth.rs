//! Who is asking, and may they: the kubelet's delegated authentication and authorization
//! (`pkg/kubelet/server/auth.go` and the apiserver's delegating authenticator/authorizer).
//! A verified client certificate names the user (CN) and groups (O); otherwise a bearer token is
//! sent to the API server as a `TokenReview`. The request then maps to attributes on the node
//! object (`nodes/<node>`, a subresource chosen by path), each checked with a
//! `SubjectAccessReview` until one is allowed. Both answers are cached for a while, as upstream.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::hash::Hash;
use std::sync::Mutex;
use std::time::Duration;

use http::{HeaderMap, Method, header};
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec};
use kube::api::{Api, PostParams};
use tokio::time::Instant;

/// The group every authenticated user is in (the apiserver's `AuthenticatedGroupAdder`).
pub(crate) const AUTHENTICATED_GROUP: &str = "system:authenticated";

/// How long a token's review is reused: upstream's `authentication.webhook.cacheTTL` (2 min) for
/// a user; an unauthenticated answer is retried sooner.
pub(crate) const TOKEN_TTL: Duration = Duration::from_secs(120);
pub(crate) const TOKEN_REJECTED_TTL: Duration = Duration::from_secs(30);
/// How long an access decision is reused: the kubelet's `cacheAuthorizedTTL` (5 min) and
/// `cacheUnauthorizedTTL` (30 s).
pub(crate) const ALLOWED_TTL: Duration = Duration::from_secs(300);
pub(crate) const DENIED_TTL: Duration = Duration::from_secs(30);
/// Entries per cache; a full cache first drops what has expired, then everything.
const CACHE_CAPACITY: usize = 4096;

/// An authenticated user, as the API server's `UserInfo` describes one.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub(crate) struct User {
    pub name: String,
    pub uid: String,
    pub groups: Vec<String>,
    pub extra: BTreeMap<String, Vec<String>>,
}

impl User {
    /// Adds `system:authenticated` unless the authenticator already did.
    pub(crate) fn authenticated(mut self) -> Self {
        if !self.groups.iter().any(|g| g == AUTHENTICATED_GROUP) {
            self.groups.push(AUTHENTICATED_GROUP.to_string());
        }
        self
    }
}

/// What a request asks of the node object: a verb, and the subresources to try in order (the
/// first allowed one admits the request).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Attributes {
    pub verb: &'static str,
    pub subresources: Vec<&'static str>,
}

/// The kubelet's `GetRequestAttributes` (with `KubeletFineGrainedAuthz`, on by default since
/// 1.33): the verb from the HTTP method (others, HEAD among them, map to no verb, as upstream),
/// a fine-grained subresource for `/pods`, `/healthz`, `/configz`, `/statusz` and
/// `/runningpods/` tried before `proxy`, and `stats`, `metrics`, `log` (the node's `/logs/`,
/// not `/containerLogs`) or `checkpoint` by path, else `proxy`.
pub(crate) fn request_attributes(method: &Method, path: &str) -> Attributes {
    let verb = match *method {
        Method::POST => "create",
        Method::GET => "get",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE => "delete",
        _ => "",
    };
    let mut subresources = Vec::with_capacity(2);
    let fine = [
        ("/pods", "pods"),
        ("/healthz", "healthz"),
        ("/configz", "configz"),
        ("/statusz", "statusz"),
        ("/runningpods/", "pods"),
    ];
    if let Some(&(_, sub)) = fine.iter().find(|(prefix, _)| is_subpath(path, prefix)) {
        subresources.push(sub);
    }
    let coarse =
        [("/stats/", "stats"), ("/metrics", "metrics"), ("/logs/", "log"), ("/checkpoint/", "checkpoint")];
    let sub = coarse.iter().find(|(prefix, _)| is_subpath(path, prefix)).map_or("proxy", |&(_, s)| s);
    subresources.push(sub);
    Attributes { verb, subresources }
}

/// Upstream's `isSubpath`: `path` is `prefix` (without its trailing slash) or below it.
fn is_subpath(path: &str, prefix: &str) -> bool {
    let prefix = prefix.strip_suffix('/').unwrap_or(prefix);
    path.strip_prefix(prefix).is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

/// The token of an `Authorization: Bearer <token>` header (upstream's `bearertoken`
/// authenticator: the scheme case-insensitive, the token the second space-separated word).
pub(crate) fn bearer_token(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?.trim();
    let mut words = value.split(' ');
    let scheme = words.next()?;
    let token = words.next()?;
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// A review could not be had from the API server.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReviewError {
    #[error("creating a {kind} on the API server failed")]
    Api {
        kind: &'static str,
        #[source]
        source: kube::Error,
    },
    /// The TokenReview did not authenticate and said why (an unusable token, a webhook failure).
    #[error("the TokenReview failed: {0}")]
    Token(String),
}

/// Answers reviews: the API server in production ([`KubeReviewer`]), a fake in tests.
pub(crate) trait Reviewer: Send + Sync + 'static {
    /// The user a bearer token belongs to; `None` if the token does not authenticate.
    fn review_token(&self, token: &str) -> impl Future<Output = Result<Option<User>, ReviewError>> + Send;
    /// Whether `user` may `verb` the `subresource` of node `node`.
    fn review_access(
        &self,
        user: &User,
        verb: &str,
        subresource: &str,
        node: &str,
    ) -> impl Future<Output = Result<bool, ReviewError>> + Send;
}

/// Reviews through the agent's API client: `TokenReview` and `SubjectAccessReview` creates.
pub(crate) struct KubeReviewer {
    pub client: kube::Client,
}

impl Reviewer for KubeReviewer {
    async fn review_token(&self, token: &str) -> Result<Option<User>, ReviewError> {
        let review = TokenReview {
            spec: TokenReviewSpec { token: token.to_string(), audiences: None },
            ..TokenReview::default()
        };
        let api: Api<TokenReview> = Api::all(self.client.clone());
        let answer = api
            .create(&PostParams::default(), &review)
            .await
            .map_err(|source| ReviewError::Api { kind: "TokenReview", source })?;
        let status = answer.status.unwrap_or_default();
        if status.authenticated != Some(true) {
            return match status.error.filter(|e| !e.is_empty()) {
                Some(e) => Err(ReviewError::Token(e)),
                None => Ok(None),
            };
        }
        let info = status.user.unwrap_or_default();
        Ok(Some(User {
            name: info.username.unwrap_or_default(),
            uid: info.uid.unwrap_or_default(),
            groups: info.groups.unwrap_or_default(),
            extra: info.extra.unwrap_or_default(),
        }))
    }

    async fn review_access(
        &self,
        user: &User,
        verb: &str,
        subresource: &str,
        node: &str,
    ) -> Result<bool, ReviewError> {
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(user.name.clone()),
                uid: Some(user.uid.clone()).filter(|u| !u.is_empty()),
                groups: Some(user.groups.clone()),
                extra: Some(user.extra.clone()).filter(|e| !e.is_empty()),
                resource_attributes: Some(ResourceAttributes {
                    verb: Some(verb.to_string()),
                    group: Some(String::new()),
                    version: Some("v1".to_string()),
                    resource: Some("nodes".to_string()),
                    subresource: Some(subresource.to_string()),
                    name: Some(node.to_string()),
                    ..ResourceAttributes::default()
                }),
                non_resource_attributes: None,
            },
            ..SubjectAccessReview::default()
        };
        let api: Api<SubjectAccessReview> = Api::all(self.client.clone());
        let answer = api
            .create(&PostParams::default(), &review)
            .await
            .map_err(|source| ReviewError::Api { kind: "SubjectAccessReview", source })?;
        Ok(answer.status.is_some_and(|s| s.allowed))
    }
}

/// The outcome of authorizing a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Decision {
    Allowed,
    Denied,
}

/// What an access decision depends on.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct AccessKey {
    user: User,
    verb: &'static str,
    subresource: &'static str,
}

/// The [`Reviewer`] behind caches, as upstream's cached token authenticator and webhook
/// authorizer. Failed reviews are not cached.
pub(crate) struct Authenticator<R> {
    reviewer: R,
    tokens: Mutex<Cache<String, Option<User>>>,
    access: Mutex<Cache<AccessKey, bool>>,
}

impl<R: Reviewer> Authenticator<R> {
    pub(crate) fn new(reviewer: R) -> Self {
        Self { reviewer, tokens: Mutex::default(), access: Mutex::default() }
    }

    /// The user of a bearer token (with `system:authenticated`), or `None`.
    pub(crate) async fn authenticate_token(&self, token: &str) -> Result<Option<User>, ReviewError> {
        let now = Instant::now();
        if let Some(hit) = self.tokens.lock().ok().and_then(|c| c.get(token, now)) {
            return Ok(hit);
        }
        let user = self.reviewer.review_token(token).await?.map(User::authenticated);
        let ttl = if user.is_some() { TOKEN_TTL } else { TOKEN_REJECTED_TTL };
        if let Ok(mut c) = self.tokens.lock() {
            c.put(token.to_string(), user.clone(), ttl, Instant::now());
        }
        Ok(user)
    }

    /// Allowed if any of the request's subresources is allowed, tried in order.
    pub(crate) async fn authorize(
        &self,
        user: &User,
        attrs: &Attributes,
        node: &str,
    ) -> Result<Decision, ReviewError> {
        for &subresource in &attrs.subresources {
            let key = AccessKey { user: user.clone(), verb: attrs.verb, subresource };
            let cached = self.access.lock().ok().and_then(|c| c.get(&key, Instant::now()));
            let allowed = match cached {
                Some(a) => a,
                None => {
                    let a = self.reviewer.review_access(user, attrs.verb, subresource, node).await?;
                    let ttl = if a { ALLOWED_TTL } else { DENIED_TTL };
                    if let Ok(mut c) = self.access.lock() {
                        c.put(key, a, ttl, Instant::now());
                    }
                    a
                }
            };
            if allowed {
                return Ok(Decision::Allowed);
            }
        }
        Ok(Decision::Denied)
    }
}

/// A bounded map whose entries expire.
struct Cache<K, V> {
    entries: HashMap<K, (V, Instant)>,
}

impl<K, V> Default for Cache<K, V> {
    fn default() -> Self {
        Self { entries: HashMap::new() }
    }
}

impl<K: Eq + Hash, V: Clone> Cache<K, V> {
    fn get<Q>(&self, key: &Q, now: Instant) -> Option<V>
    where
        K: std::borrow::Borrow<Q>,
        Q: Eq + Hash + ?Sized,
    {
        self.entries.get(key).filter(|(_, until)| now < *until).map(|(v, _)| v.clone())
    }

    fn put(&mut self, key: K, value: V, ttl: Duration, now: Instant) {
        if self.entries.len() >= CACHE_CAPACITY {
            self.entries.retain(|_, (_, until)| now < *until);
            if self.entries.len() >= CACHE_CAPACITY {
                self.entries.clear();
            }
        }
        self.entries.insert(key, (value, now + ttl));
    }
}
