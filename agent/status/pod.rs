//! Pod-level status fields that do not depend on container states: QoS class (upstream
//! `GetPodQOS`) and the pod IP list (upstream `sortPodIPs`).

use std::collections::BTreeMap;
use std::net::IpAddr;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::podspec::{app_containers, init_containers};

const QOS_RESOURCES: [&str; 2] = ["cpu", "memory"];

/// `qosClass`: BestEffort without any cpu/memory request or limit; Guaranteed when every
/// container limits both cpu and memory and the summed requests equal the summed limits;
/// Burstable otherwise. A request left out next to a limit defaults to the limit, as the API
/// server's defaulting does.
pub fn qos_class(pod: &Pod) -> &'static str {
    let mut requests: BTreeMap<&str, i128> = BTreeMap::new();
    let mut limits: BTreeMap<&str, i128> = BTreeMap::new();
    let mut guaranteed = true;
    for c in app_containers(pod).iter().chain(init_containers(pod)) {
        let res = c.resources.as_ref();
        let get = |list: Option<&BTreeMap<String, Quantity>>, name: &str| {
            list.and_then(|l| l.get(name)).and_then(|q| parse_quantity(&q.0)).filter(|v| *v > 0)
        };
        let mut limited = 0;
        for name in QOS_RESOURCES {
            let limit = get(res.and_then(|r| r.limits.as_ref()), name);
            let request = get(res.and_then(|r| r.requests.as_ref()), name).or(limit);
            if let Some(v) = request {
                *requests.entry(name).or_default() += v;
            }
            if let Some(v) = limit {
                *limits.entry(name).or_default() += v;
                limited += 1;
            }
        }
        if limited < QOS_RESOURCES.len() {
            guaranteed = false;
        }
    }
    if requests.is_empty() && limits.is_empty() {
        "BestEffort"
    } else if guaranteed && requests == limits {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

/// A resource quantity in milli-units, parsed exactly as the API server does; `None` when it
/// does not parse or overflows. Enough to add and compare requests and limits.
pub(crate) fn parse_quantity(s: &str) -> Option<i128> {
    crate::quantity::Quantity::parse(s)?.milli_value()
}

/// `podIPs`: the first IP of the node's family (IPv4 when unknown), then the first of the other
/// family, re-stringified; at most two.
pub(crate) fn sort_pod_ips(ips: &[String], host_ip: Option<&str>) -> Vec<String> {
    let parsed: Vec<IpAddr> = ips.iter().filter_map(|ip| ip.trim().parse().ok()).collect();
    let v6_first = host_ip.and_then(|h| h.parse::<IpAddr>().ok()).is_some_and(|h| h.is_ipv6());
    let primary = parsed.iter().find(|ip| ip.is_ipv6() == v6_first);
    let secondary = parsed.iter().find(|ip| ip.is_ipv6() != v6_first);
    primary.into_iter().chain(secondary).map(ToString::to_string).collect()
}
