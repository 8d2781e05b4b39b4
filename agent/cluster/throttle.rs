//! The kubelet's client-side rate limits on the node's API requests: a token bucket of `qps`
//! tokens a second holding at most `burst`, one token per request, awaited before it is sent.
//! The kubelet has one for its main client (`--kube-api-qps 50`, `--kube-api-burst 100`: pods,
//! statuses, mirror pods, the objects volumes read), one for Events (`--event-qps 50`,
//! `--event-burst 100`), and none for the heartbeat (the Node's status and Lease), so that a
//! burst of pod work never delays the node's liveness. The status writer sends one pod after
//! another, each pod's newest status when its turn comes, so the writes that queue behind the
//! tokens are not stale ones.

use std::future::Future;
use std::num::NonZeroU32;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use tower::{Layer, Service};

/// A rate limit: `qps` requests a second on average, `burst` at once. `qps` 0: no limit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limit {
    pub qps: u32,
    pub burst: u32,
}

impl Limit {
    /// The kubelet's defaults, for the main client and for Events alike.
    pub const KUBELET_DEFAULT: Limit = Limit { qps: 50, burst: 100 };
    /// The heartbeat's: none.
    pub const NONE: Limit = Limit { qps: 0, burst: 0 };

    /// The token bucket, or none when unlimited. A burst below 1 is 1 (one request at a time).
    fn quota(self) -> Option<Quota> {
        if self.qps == 0 {
            return None;
        }
        let period = Duration::from_secs_f64(1.0 / f64::from(self.qps));
        let burst = NonZeroU32::new(self.burst).unwrap_or(NonZeroU32::MIN);
        Quota::with_period(period).map(|q| q.allow_burst(burst))
    }
}

/// A `tower` layer that makes each request wait for a token of its limit.
#[derive(Clone)]
pub struct ThrottleLayer {
    limiter: Option<Arc<DefaultDirectRateLimiter>>,
}

impl ThrottleLayer {
    pub fn new(limit: Limit) -> Self {
        Self { limiter: limit.quota().map(|q| Arc::new(RateLimiter::direct(q))) }
    }
}

impl<S> Layer<S> for ThrottleLayer {
    type Service = Throttle<S>;

    fn layer(&self, inner: S) -> Throttle<S> {
        Throttle { inner, limiter: self.limiter.clone(), waiting: None, permitted: false }
    }
}

/// The service of [`ThrottleLayer`]: not ready until the next request has its token.
pub struct Throttle<S> {
    inner: S,
    limiter: Option<Arc<DefaultDirectRateLimiter>>,
    /// Waiting for a token.
    waiting: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
    /// A token is taken for the next call.
    permitted: bool,
}

impl<S, R> Service<R> for Throttle<S>
where
    S: Service<R>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        if let Some(limiter) = self.limiter.as_ref().filter(|_| !self.permitted) {
            let limiter = limiter.clone();
            let waiting =
                self.waiting.get_or_insert_with(|| Box::pin(async move { limiter.until_ready().await }));
            ready!(waiting.as_mut().poll(cx));
            self.waiting = None;
            self.permitted = true;
        }
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: R) -> Self::Future {
        self.permitted = false;
        self.inner.call(request)
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use futures::FutureExt;
    use tower::ServiceExt;

    use super::*;

    /// A service that counts its calls, throttled by `limit`.
    fn counted(limit: Limit) -> (impl Service<(), Response = (), Error = Infallible>, Arc<AtomicUsize>) {
        let calls = Arc::new(AtomicUsize::new(0));
        let c = calls.clone();
        let inner = tower::service_fn(move |()| {
            c.fetch_add(1, Ordering::SeqCst);
            async { Ok::<_, Infallible>(()) }
        });
        (ThrottleLayer::new(limit).layer(inner), calls)
    }

    /// Sends requests for as long as each is let through at once; returns how many were.
    fn sent_at_once(svc: &mut impl Service<(), Response = (), Error = Infallible>, most: usize) -> usize {
        for n in 0..most {
            match svc.ready().now_or_never() {
                Some(Ok(s)) => {
                    let _ = s.call(()).now_or_never();
                }
                _ => return n,
            }
        }
        most
    }

    #[test]
    fn a_burst_goes_at_once_and_the_next_request_waits_for_its_token() {
        // (limit, requests tried, let through at once). One token a second: nothing refills
        // between the tries, so the bucket's size is what goes.
        let cases = [
            (Limit { qps: 1, burst: 3 }, 10, 3),
            (Limit { qps: 1, burst: 1 }, 10, 1),
            (Limit { qps: 1, burst: 0 }, 10, 1),
            (Limit::NONE, 500, 500),
        ];
        for (limit, tries, through) in cases {
            let (mut svc, calls) = counted(limit);
            assert_eq!(sent_at_once(&mut svc, tries), through, "{limit:?}");
            assert_eq!(
                calls.load(Ordering::SeqCst),
                through,
                "{limit:?}: calls reach the service only with a token"
            );
        }
    }

    #[tokio::test]
    async fn a_waiting_request_goes_once_its_token_comes() {
        // 20 tokens a second: the one after the burst waits about 50 ms, then goes.
        let (mut svc, calls) = counted(Limit { qps: 20, burst: 2 });
        assert_eq!(sent_at_once(&mut svc, 5), 2);
        svc.ready().await.unwrap().call(()).await.unwrap();
        assert_eq!(calls.load(Ordering::SeqCst), 3);
    }
}
