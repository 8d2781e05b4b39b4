//! Waits on observable state with a deadline: a check polled at a fixed pace until it yields
//! a value, and a deadline past which the wait gives up (returns None, or panics naming what it
//! waited for).

use std::future::Future;
use std::time::{Duration, Instant};

/// `CRILET_TEST_TIME_SCALE` (a number, 1 when unset): how much slower than this machine the
/// one running the tests is. `hack/guest.sh test` sets it for the QEMU guest, which runs on TCG
/// several times slower; every wait's deadline is stretched by it, nothing else.
pub fn time_scale() -> f64 {
    std::env::var("CRILET_TEST_TIME_SCALE")
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s >= 1.0)
        .unwrap_or(1.0)
}

/// Runs `f` every `every` until it returns Some; None once `limit` (times [`time_scale`]) has
/// passed since the start (`f` runs at least once, and once more after the deadline's last sleep).
pub async fn poll_until<T, F, Fut>(limit: Duration, every: Duration, mut f: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let limit = limit.mul_f64(time_scale());
    let start = Instant::now();
    loop {
        if let Some(v) = f().await {
            return Some(v);
        }
        if start.elapsed() > limit {
            return None;
        }
        tokio::time::sleep(every).await;
    }
}

/// [`poll_until`], panicking "timed out after LIMIT waiting for WHAT" at the deadline.
pub async fn wait_until<T, F, Fut>(what: &str, limit: Duration, every: Duration, f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    match poll_until(limit, every, f).await {
        Some(v) => v,
        None => panic!("timed out after {limit:?} waiting for {what}"),
    }
}

/// [`wait_until`] every 200 ms.
pub async fn wait_for<T, F, Fut>(what: &str, limit: Duration, f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    wait_until(what, limit, Duration::from_millis(200), f).await
}

#[cfg(test)]
mod tests {
    use super::*;

    // Real time (the waits run on the monotonic clock, as the agents they wait for), kept short.
    #[tokio::test]
    async fn returns_the_first_value() {
        let mut n = 0;
        let v = wait_until("n to reach 3", Duration::from_secs(10), Duration::from_millis(1), || {
            n += 1;
            std::future::ready((n == 3).then_some(n))
        })
        .await;
        assert_eq!(v, 3);
    }

    #[tokio::test]
    async fn gives_up_at_the_deadline() {
        let start = Instant::now();
        let mut calls = 0;
        let got: Option<()> = poll_until(Duration::from_millis(100), Duration::from_millis(30), || {
            calls += 1;
            std::future::ready(None)
        })
        .await;
        assert_eq!(got, None);
        assert!(start.elapsed() > Duration::from_millis(100));
        // At 0, 30, 60, 90 and 120 ms on an idle machine; fewer when sleeps overshoot.
        assert!((2..=5).contains(&calls), "{calls} calls");
    }

    #[tokio::test]
    #[should_panic(expected = "timed out after 50ms waiting for nothing")]
    async fn wait_panics_naming_the_wait() {
        wait_until("nothing", Duration::from_millis(50), Duration::from_millis(10), || {
            std::future::ready(None::<()>)
        })
        .await;
    }
}
