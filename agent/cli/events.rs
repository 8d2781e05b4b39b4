//! `crilet events`: the agent's events as `kubectl events` prints them
//! (`LAST SEEN  TYPE  REASON  OBJECT  MESSAGE`), optionally watching for new ones.

use std::io::Write;

use anyhow::{Context, bail};
use jiff::Timestamp;

use super::format::since;
use super::tabwriter::{self, TABLE};
use super::{EventsArgs, call};
use crate::proto::{self, ListEventsRequest, PodRef};

/// An event as the printers use it, parsed from the wire form.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct EventView {
    /// Last time it happened.
    pub time: Option<Timestamp>,
    /// First time it happened, when the agent reports it (the proto does not carry it yet).
    pub first_time: Option<Timestamp>,
    pub kind: String,
    pub reason: String,
    /// The involved object's kind: `Pod`, or `Node` for the node's own events.
    pub object_kind: String,
    /// The object's namespace (`default` for the node's events, as the kubelet records them).
    pub namespace: String,
    /// The object's name: the pod's, or the node's.
    pub pod: String,
    pub container: Option<String>,
    pub message: String,
    pub count: u32,
}

impl From<&proto::Event> for EventView {
    fn from(e: &proto::Event) -> Self {
        if e.object_kind == "Node" {
            return Self {
                time: e.time.parse().ok(),
                first_time: e.first_time.parse().ok(),
                kind: e.r#type.clone(),
                reason: e.reason.clone(),
                object_kind: e.object_kind.clone(),
                namespace: "default".into(),
                pod: e.object.clone(),
                container: None,
                message: e.message.clone(),
                count: e.count,
            };
        }
        // `object` is `namespace/name`, plus `/container` when the event is about one container.
        let mut parts = e.object.splitn(3, '/');
        let namespace = parts.next().unwrap_or_default().to_string();
        let pod = parts.next().unwrap_or_default().to_string();
        Self {
            time: e.time.parse().ok(),
            first_time: e.first_time.parse().ok(),
            kind: e.r#type.clone(),
            reason: e.reason.clone(),
            object_kind: "Pod".into(),
            namespace,
            pod,
            container: parts.next().map(str::to_string),
            message: e.message.clone(),
            count: e.count,
        }
    }
}

/// kubectl's `getInterval`: `12s`, or `12s (x3 over 40s)` for a repeated event.
pub(crate) fn interval(e: &EventView, now: Timestamp) -> String {
    let last = since(e.time, now);
    if e.count <= 1 {
        return since(e.first_time.or(e.time), now);
    }
    match e.first_time {
        Some(first) => format!("{last} (x{} over {})", e.count, since(Some(first), now)),
        None => format!("{last} (x{})", e.count),
    }
}

/// The events table body (header first when `header`), as tab-separated lines for the aligner.
pub(crate) fn event_lines(
    events: &[EventView],
    all_namespaces: bool,
    header: bool,
    now: Timestamp,
) -> String {
    let mut text = String::new();
    if header {
        if all_namespaces {
            text.push_str("NAMESPACE\t");
        }
        text.push_str("LAST SEEN\tTYPE\tREASON\tOBJECT\tMESSAGE\n");
    }
    for e in events {
        if all_namespaces {
            text.push_str(&e.namespace);
            text.push('\t');
        }
        // kubectl events prints `<involvedObject.kind>/<name>`.
        let line = format!(
            "{}\t{}\t{}\t{}/{}\t{}\n",
            interval(e, now),
            e.kind,
            e.reason,
            e.object_kind,
            e.pod,
            e.message.trim()
        );
        text.push_str(&line);
    }
    text
}

/// Parses `--for pod/NAME` (kubectl also accepts `pods/` and `po/`).
pub(crate) fn parse_for(target: &str) -> anyhow::Result<String> {
    match target.split_once('/') {
        Some(("pod" | "pods" | "po", name)) if !name.is_empty() && !name.contains('/') => {
            Ok(name.to_string())
        }
        _ => bail!("--for must name a pod as pod/NAME, not {target:?}"),
    }
}

/// Whether `e` is already shown by an entry of `shown`: the same event (kind, object, reason,
/// message) seen at the same time or later. Repeats bump an event's count and time, so a newer
/// copy of a shown event is news, an older or equal one is not.
pub(crate) fn already_shown(shown: &[EventView], e: &EventView) -> bool {
    shown.iter().any(|s| {
        (&s.kind, &s.object_kind, &s.namespace, &s.pod, &s.container, &s.reason, &s.message)
            == (&e.kind, &e.object_kind, &e.namespace, &e.pod, &e.container, &e.reason, &e.message)
            && s.time >= e.time
    })
}

pub(super) async fn run(args: EventsArgs) -> anyhow::Result<()> {
    let pod = args.for_object.as_deref().map(parse_for).transpose()?;
    // Without --for, the node's events too (in namespace default, as `kubectl events` shows
    // the kubelet's events about its Node).
    let request = |watch| ListEventsRequest {
        pod: pod.clone().map(|name| PodRef { namespace: args.namespace.clone(), name }),
        watch,
        node: pod.is_none(),
    };
    let wanted = |e: &EventView| args.all_namespaces || e.namespace == args.namespace;
    let mut client = crate::api::connect(&args.socket.path()?).await?;

    // Like kubectl: list (sorted, aligned as one table), then watch from there on.
    let mut stream = call(client.list_events(request(false)).await, "list events")?.into_inner();
    let mut backlog = Vec::new();
    while let Some(e) = call(stream.message().await, "receive events")? {
        backlog.push(EventView::from(&e));
    }
    backlog.retain(|e| wanted(e));
    // kubectl sorts by last-seen time, oldest first.
    backlog.sort_by_key(|e| e.time);
    let mut widths = Vec::new();
    let mut header = !backlog.is_empty();
    if header {
        let text = event_lines(&backlog, args.all_namespaces, true, Timestamp::now());
        write_out(&tabwriter::align_remembering(&text, TABLE, &mut widths))?;
    } else if !args.watch {
        match args.all_namespaces {
            true => eprintln!("No events found."),
            false => eprintln!("No events found in {} namespace.", args.namespace),
        }
    }
    if !args.watch {
        return Ok(());
    }

    // The watch stream repeats the backlog first; skip what is already on screen.
    let mut stream = call(client.list_events(request(true)).await, "watch events")?.into_inner();
    while let Some(e) = call(stream.message().await, "receive events")? {
        let view = EventView::from(&e);
        if !wanted(&view) || already_shown(&backlog, &view) {
            continue;
        }
        let text = event_lines(std::slice::from_ref(&view), args.all_namespaces, !header, Timestamp::now());
        header = true;
        write_out(&tabwriter::align_remembering(&text, TABLE, &mut widths))?;
    }
    Ok(())
}

fn write_out(text: &str) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes()).and_then(|()| out.flush()).context("cannot write to stdout")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::{ago, now};

    fn ev(object: &str, secs_ago: i64, count: u32, reason: &str, message: &str) -> EventView {
        EventView::from(&proto::Event {
            time: ago(secs_ago),
            r#type: "Normal".into(),
            reason: reason.into(),
            object: object.into(),
            message: message.into(),
            count,
            first_time: String::new(),
            object_kind: String::new(),
        })
    }

    fn node_ev(secs_ago: i64, count: u32, reason: &str, message: &str) -> EventView {
        EventView::from(&proto::Event {
            time: ago(secs_ago),
            r#type: "Warning".into(),
            reason: reason.into(),
            object: "n1".into(),
            message: message.into(),
            count,
            first_time: String::new(),
            object_kind: "Node".into(),
        })
    }

    #[test]
    fn node_events_are_about_the_node_in_default() {
        let e = node_ev(3, 1, "EvictionThresholdMet", "Attempting to reclaim memory");
        let got = (e.object_kind.as_str(), e.namespace.as_str(), e.pod.as_str(), e.container.as_deref());
        assert_eq!(got, ("Node", "default", "n1", None));
        let events = [
            node_ev(20, 1, "NodeHasDiskPressure", "Node n1 status is now: NodeHasDiskPressure"),
            ev("default/web", 5, 1, "Started", "Started container app"),
        ];
        assert_eq!(
            tabwriter::align(&event_lines(&events, false, true, now()), TABLE),
            "LAST SEEN   TYPE      REASON                OBJECT    MESSAGE\n\
             20s         Warning   NodeHasDiskPressure   Node/n1   Node n1 status is now: NodeHasDiskPressure\n\
             5s          Normal    Started               Pod/web   Started container app\n"
        );
        // A pod named like the node is another object.
        assert!(!already_shown(&[ev("default/n1", 20, 1, "R", "m")], &node_ev(20, 1, "R", "m")));
    }

    #[test]
    fn event_view_from_proto() {
        let e = ev("default/web/app", 3, 1, "Started", "Started container app");
        assert_eq!(
            (e.namespace.as_str(), e.pod.as_str(), e.container.as_deref(), e.time),
            ("default", "web", Some("app"), Some(now() - jiff::SignedDuration::from_secs(3)))
        );
        assert_eq!(ev("kube-system/dns", 3, 1, "R", "m").container, None);
    }

    #[test]
    fn interval_cases() {
        let mut repeated = ev("default/web", 12, 3, "BackOff", "m");
        let cases = [
            ("single", ev("default/web", 12, 1, "Pulled", "m"), "12s"),
            ("repeated, first time unknown", repeated.clone(), "12s (x3)"),
            (
                "repeated",
                {
                    repeated.first_time = Some(now() - jiff::SignedDuration::from_secs(40));
                    repeated
                },
                "12s (x3 over 40s)",
            ),
        ];
        for (name, e, want) in cases {
            assert_eq!(interval(&e, now()), want, "{name}");
        }
    }

    #[test]
    fn table() {
        let events = [
            ev("default/web/app", 75, 1, "Pulling", "Pulling image \"busybox\""),
            ev("default/web/app", 5, 1, "Started", "Started container app "),
        ];
        let text = event_lines(&events, false, true, now());
        assert_eq!(
            tabwriter::align(&text, TABLE),
            "LAST SEEN   TYPE     REASON    OBJECT    MESSAGE\n\
             75s         Normal   Pulling   Pod/web   Pulling image \"busybox\"\n\
             5s          Normal   Started   Pod/web   Started container app\n"
        );
        let all = tabwriter::align(&event_lines(&events[..1], true, true, now()), TABLE);
        assert!(all.starts_with("NAMESPACE   LAST SEEN   TYPE"), "{all}");
    }

    #[test]
    fn already_shown_cases() {
        let shown = [ev("default/web/app", 10, 2, "BackOff", "m")];
        let cases = [
            ("same event, same time", ev("default/web/app", 10, 2, "BackOff", "m"), true),
            ("older copy before the count bump", ev("default/web/app", 20, 1, "BackOff", "m"), true),
            ("a newer repeat", ev("default/web/app", 1, 3, "BackOff", "m"), false),
            ("another container", ev("default/web/side", 10, 2, "BackOff", "m"), false),
            ("another message", ev("default/web/app", 10, 2, "BackOff", "n"), false),
        ];
        for (name, e, want) in cases {
            assert_eq!(already_shown(&shown, &e), want, "{name}");
        }
    }

    #[test]
    fn for_argument() {
        assert_eq!(parse_for("pod/web").expect("valid"), "web");
        assert_eq!(parse_for("po/web").expect("valid"), "web");
        assert!(parse_for("deployment/web").is_err());
        assert!(parse_for("web").is_err());
    }
}
