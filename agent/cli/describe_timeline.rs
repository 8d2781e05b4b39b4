//! The lifecycle timeline of `describe pod` (crilet's own; kubectl has no such section): under
//! each container a `Timeline:` of its steps, and above the containers a `Termination:` block
//! with each pod kill and the grace budget it used. The steps come from the agent
//! (`crate::timeline`); this file only lays them out.
//!
//! ```text
//!     Timeline:
//!       12:00:01.120          Created       containerd://3f2a1b2c3d4e (restart 0)
//!       12:00:01.180  +0.1s   Started
//!       12:00:04.200  +3.0s   Started=true  startup probe succeeded
//! ```
//! The second column is the time since the step before it, so "how long from start to ready"
//! and "how long from kill to exit" read off directly.

use jiff::Timestamp;
use jiff::tz::TimeZone;

use super::describe::Doc;
use super::format::human_duration;
use crate::proto::TimelineStep;

/// How many characters of a container ID the timeline shows.
const SHORT_ID: usize = 12;

/// The step's time: time of day with milliseconds in `tz`, with the date when it is not today.
fn clock(t: Timestamp, tz: &TimeZone, now: Timestamp) -> String {
    let zoned = t.to_zoned(tz.clone());
    if zoned.date() == now.to_zoned(tz.clone()).date() {
        zoned.strftime("%H:%M:%S%.3f").to_string()
    } else {
        zoned.strftime("%Y-%m-%d %H:%M:%S%.3f").to_string()
    }
}

/// `+0.1s` under two minutes, kubectl's human duration beyond.
fn delta(from: Timestamp, to: Timestamp) -> String {
    let d = to.duration_since(from);
    if d.as_secs() < 120 {
        format!("+{:.1}s", d.as_secs_f64().max(0.0))
    } else {
        format!("+{}", human_duration(d))
    }
}

fn short(id: &str) -> &str {
    id.get(..SHORT_ID).unwrap_or(id)
}

/// The detail cell: the instance for `Created`, else the agent's detail.
fn detail(s: &TimelineStep) -> String {
    match s.step.as_str() {
        "Created" if !s.container_id.is_empty() => match s.detail.as_str() {
            "" => format!("containerd://{}", short(&s.container_id)),
            d => format!("containerd://{} ({d})", short(&s.container_id)),
        },
        _ => s.detail.clone(),
    }
}

/// The `Timeline:` of one container (nothing when the agent recorded no step for it).
pub(crate) fn container_timeline(
    w: &mut Doc,
    steps: &[TimelineStep],
    container: &str,
    tz: &TimeZone,
    now: Timestamp,
) {
    let mine: Vec<&TimelineStep> = steps.iter().filter(|s| s.container == container).collect();
    if mine.is_empty() {
        return;
    }
    w.w(2, "Timeline:\n");
    let mut previous: Option<Timestamp> = None;
    for s in mine {
        let Ok(t) = s.time.parse::<Timestamp>() else { continue };
        let since = previous.map(|p| delta(p, t)).unwrap_or_default();
        w.w(3, &format!("{}\t{since}\t{}\t{}\n", clock(t, tz, now), s.step, detail(s)));
        previous = Some(t);
    }
}

/// The pod's `Termination:` block: each kill with its reason and budget, and how it ended (the
/// budget used); a kill still under way says how much of the budget is used so far. Its steps
/// are `Killing` and `Stopped`, of one width.
pub(crate) fn pod_termination(w: &mut Doc, steps: &[TimelineStep], tz: &TimeZone, now: Timestamp) {
    let pod: Vec<&TimelineStep> = steps.iter().filter(|s| s.container.is_empty()).collect();
    if pod.is_empty() {
        return;
    }
    w.w(0, "Termination:\n");
    let last = pod.len() - 1;
    for (i, s) in pod.iter().enumerate() {
        let Ok(t) = s.time.parse::<Timestamp>() else { continue };
        let mut text = s.detail.clone();
        if i == last && s.step == "Killing" {
            text.push_str(&format!(" ({:.1}s used so far)", now.duration_since(t).as_secs_f64().max(0.0)));
        }
        // No tabs: the block must not join the alignment of the pod's fields around it.
        w.w(1, &format!("{}  {:<7}  {text}\n", clock(t, tz, now), s.step));
    }
}
