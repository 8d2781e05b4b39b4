//! `crilet describe node`: kubectl's `describe node` layout for what the agent knows about its
//! node without an API server: its name, the pressure conditions the eviction manager keeps
//! (`Conditions:`, kubectl's columns) and the node's events (`Events:`, as `describe pod`'s).

use jiff::Timestamp;
use jiff::tz::TimeZone;

use super::describe::{Doc, events};
use super::events::EventView;
use super::format::rfc1123z;
use super::tabwriter::{self, DESCRIBE};
use crate::proto::GetNodeResponse;

/// The whole `describe node` text.
pub(crate) fn describe_node(node: &GetNodeResponse, now: Timestamp, tz: &TimeZone) -> String {
    let mut w = Doc::default();
    w.w(0, &format!("Name:\t{}\n", node.name));
    if node.conditions.is_empty() {
        w.w(0, "Conditions:\t<none>\n");
    } else {
        w.w(0, "Conditions:\n");
        w.w(1, "Type\tStatus\tLastHeartbeatTime\tLastTransitionTime\tReason\tMessage\n");
        w.w(1, "----\t------\t-----------------\t------------------\t------\t-------\n");
        let time = |t: &str| t.parse::<Timestamp>().map(|t| rfc1123z(t, tz)).unwrap_or_default();
        for c in &node.conditions {
            w.w(
                1,
                &format!(
                    "{}\t{}\t{}\t{}\t{}\t{}\n",
                    c.r#type,
                    c.status,
                    time(&c.last_heartbeat_time),
                    time(&c.last_transition_time),
                    c.reason,
                    c.message
                ),
            );
        }
    }
    let views: Vec<EventView> = node.events.iter().map(EventView::from).collect();
    events(&mut w, &views, now);
    tabwriter::align(w.text(), DESCRIBE)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::{ago, now};
    use crate::proto::{Event, NodeCondition};

    fn condition(t: &str, status: &str, reason: &str, message: &str) -> NodeCondition {
        NodeCondition {
            r#type: t.into(),
            status: status.into(),
            reason: reason.into(),
            message: message.into(),
            last_heartbeat_time: "2026-01-01T00:00:10Z".into(),
            last_transition_time: "2026-01-01T00:00:00Z".into(),
        }
    }

    #[test]
    fn describe_node_cases() {
        let pressure = GetNodeResponse {
            name: "n1".into(),
            conditions: vec![
                condition(
                    "MemoryPressure",
                    "False",
                    "KubeletHasSufficientMemory",
                    "kubelet has sufficient memory available",
                ),
                condition("DiskPressure", "True", "KubeletHasDiskPressure", "kubelet has disk pressure"),
            ],
            events: vec![Event {
                time: ago(30),
                r#type: "Warning".into(),
                reason: "EvictionThresholdMet".into(),
                object: "n1".into(),
                message: "Attempting to reclaim ephemeral-storage".into(),
                count: 1,
                first_time: String::new(),
                object_kind: "Node".into(),
            }],
            runtime: None,
        };
        let bare = GetNodeResponse { name: "n1".into(), ..Default::default() };
        let cases = [
            (
                pressure,
                "Name:  n1\n\
                 Conditions:\n\
                 \x20 Type            Status  LastHeartbeatTime                LastTransitionTime               Reason                      Message\n\
                 \x20 ----            ------  -----------------                ------------------               ------                      -------\n\
                 \x20 MemoryPressure  False   Thu, 01 Jan 2026 00:00:10 +0000  Thu, 01 Jan 2026 00:00:00 +0000  KubeletHasSufficientMemory  kubelet has sufficient memory available\n\
                 \x20 DiskPressure    True    Thu, 01 Jan 2026 00:00:10 +0000  Thu, 01 Jan 2026 00:00:00 +0000  KubeletHasDiskPressure      kubelet has disk pressure\n\
                 Events:\n\
                 \x20 Type     Reason                Age   From    Message\n\
                 \x20 ----     ------                ----  ----    -------\n\
                 \x20 Warning  EvictionThresholdMet  30s   crilet  Attempting to reclaim ephemeral-storage\n",
            ),
            (bare, "Name:        n1\nConditions:  <none>\nEvents:      <none>\n"),
        ];
        for (i, (node, want)) in cases.into_iter().enumerate() {
            let got = describe_node(&node, now(), &TimeZone::UTC);
            assert_eq!(got, want, "case {i}:\n{got}");
        }
    }
}
