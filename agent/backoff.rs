//! Back-off tables with the semantics of client-go's `flowcontrol.Backoff`, as the kubelet
//! uses them for crash loops (R7.4–R7.7) and image pulls (R7.11). Times are wall-clock
//! nanoseconds because the events they are measured from (a container's `finishedAt`) are.

use std::collections::HashMap;
use std::time::Duration;

/// Crash-loop back-off: 10 s doubling to 300 s (R7.7).
pub const CRASH_LOOP_INITIAL: Duration = Duration::from_secs(10);
pub const CRASH_LOOP_MAX: Duration = Duration::from_secs(300);
/// Image pull back-off: 10 s doubling to 300 s (R7.11).
pub const IMAGE_PULL_INITIAL: Duration = Duration::from_secs(10);
pub const IMAGE_PULL_MAX: Duration = Duration::from_secs(300);

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
struct Entry {
    delay: Duration,
    last_update_ns: i64,
}

/// One back-off table (keyed by a stable string, e.g. container name + hash).
#[derive(Debug, Clone)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
    entries: HashMap<String, Entry>,
}

fn ns(d: Duration) -> i64 {
    i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)
}

impl Backoff {
    pub fn new(initial: Duration, max: Duration) -> Self {
        Self { initial, max, entries: HashMap::new() }
    }

    /// The table's entries as JSON (kept under the pod's dir so a restarted agent keeps a
    /// crash loop's back-off instead of restarting the container at once).
    pub fn to_json(&self) -> Option<Vec<u8>> {
        serde_json::to_vec(&self.entries).ok()
    }

    /// A table with `initial`/`max` and the entries saved by `to_json` (none if unreadable).
    pub fn with_json(mut self, json: &[u8]) -> Self {
        if let Ok(entries) = serde_json::from_slice(json) {
            self.entries = entries;
        }
        self
    }

    pub fn crash_loop() -> Self {
        Self::new(CRASH_LOOP_INITIAL, CRASH_LOOP_MAX)
    }

    pub fn image_pull() -> Self {
        Self::new(IMAGE_PULL_INITIAL, IMAGE_PULL_MAX)
    }

    /// An entry is stale when the event happened more than 2 × max after its last update
    /// (the container ran long enough: the schedule starts over).
    fn expired(&self, e: &Entry, event_ns: i64) -> bool {
        event_ns.saturating_sub(e.last_update_ns) > 2 * ns(self.max)
    }

    /// If `key` is backing off for an event at `event_ns`, the time (ns) the back-off ends.
    pub fn backoff_until(&self, key: &str, event_ns: i64, now_ns: i64) -> Option<i64> {
        let e = self.entries.get(key)?;
        if self.expired(e, event_ns) {
            return None;
        }
        let until = event_ns.saturating_add(ns(e.delay));
        (now_ns < until).then_some(until)
    }

    /// If `key` is backing off counted from its last recorded attempt (`IsInBackOffSinceUpdate`,
    /// the image pull rule of R7.11), the time (ns) the back-off ends.
    pub fn backoff_since_update(&self, key: &str, now_ns: i64) -> Option<i64> {
        let e = self.entries.get(key)?;
        let until = e.last_update_ns.saturating_add(ns(e.delay));
        (now_ns < until).then_some(until)
    }

    /// The current delay of `key` (for messages), if it has an entry.
    pub fn delay(&self, key: &str) -> Option<Duration> {
        self.entries.get(key).map(|e| e.delay)
    }

    /// Records an attempt: the first (or the first after expiry) sets the initial delay,
    /// each next one doubles it up to max.
    pub fn next(&mut self, key: &str, event_ns: i64, now_ns: i64) {
        let delay = match self.entries.get(key) {
            Some(e) if !self.expired(e, event_ns) => (e.delay * 2).min(self.max),
            _ => self.initial,
        };
        self.entries.insert(key.to_string(), Entry { delay, last_update_ns: now_ns });
    }

    /// Forgets `key` (e.g. after a successful pull).
    pub fn reset(&mut self, key: &str) {
        self.entries.remove(key);
    }

    /// Drops entries unused for 2 × max.
    pub fn gc(&mut self, now_ns: i64) {
        let limit = 2 * ns(self.max);
        self.entries.retain(|_, e| now_ns.saturating_sub(e.last_update_ns) <= limit);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: i64 = 1_000_000_000;

    /// The crash-loop schedule of R7.7: first restart at once, then 10, 20, 40 … 300, 300 s
    /// measured from each exit; a run longer than 10 min starts over.
    #[test]
    fn crash_loop_schedule() {
        let mut b = Backoff::crash_loop();
        let mut now = 1_000 * S;
        // First exit: no entry, restart at once.
        assert_eq!(b.backoff_until("c", now, now), None);
        b.next("c", now, now);
        let want = [10, 20, 40, 80, 160, 300, 300];
        for w in want {
            let exit = now + S; // the container runs 1 s and exits again
            now = exit;
            assert_eq!(b.backoff_until("c", exit, now), Some(exit + w * S), "delay {w}");
            assert_eq!(b.backoff_until("c", exit, exit + w * S), None, "over after {w}");
            now = exit + w * S;
            b.next("c", exit, now);
        }
        // Ran 11 minutes: expired, restart at once and start over at 10 s.
        let exit = now + 660 * S;
        assert_eq!(b.backoff_until("c", exit, exit), None);
        b.next("c", exit, exit);
        assert_eq!(b.delay("c"), Some(CRASH_LOOP_INITIAL));
    }

    /// R7.11: pull attempts after failures at 0, then ≥10, ≥20, ≥40 s.
    #[test]
    fn image_pull_schedule() {
        let mut b = Backoff::image_pull();
        let mut t = 0;
        b.next("img", t, t); // first failure
        for want in [10, 20, 40] {
            assert_eq!(
                b.backoff_since_update("img", t + want * S - 1),
                Some(t + want * S),
                "still backing off"
            );
            assert_eq!(b.backoff_since_update("img", t + want * S), None, "retry after {want} s");
            t += want * S;
            b.next("img", t, t); // the retry failed again
        }
    }

    #[test]
    fn keys_are_independent_and_gc() {
        let mut b = Backoff::image_pull();
        b.next("a", 0, 0);
        assert_eq!(b.backoff_until("b", 0, 0), None);
        assert_eq!(b.backoff_until("a", 0, S), Some(10 * S));
        b.gc(601 * S);
        assert_eq!(b.delay("a"), None);
    }

    #[test]
    fn a_saved_table_resumes_where_it_was() {
        let mut b = Backoff::crash_loop();
        b.next("c", 100 * S, 100 * S);
        b.next("c", 101 * S, 101 * S);
        let restored = Backoff::crash_loop().with_json(&b.to_json().expect("json"));
        for now in [101 * S, 105 * S, 130 * S] {
            assert_eq!(
                restored.backoff_until("c", 101 * S, now),
                b.backoff_until("c", 101 * S, now),
                "at {now}"
            );
        }
        assert_eq!(restored.delay("c"), Some(Duration::from_secs(20)));
        assert_eq!(Backoff::crash_loop().with_json(b"not json").delay("c"), None);
    }
}
