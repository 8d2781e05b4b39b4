//! Pod-level status fields that do not depend on container states: QoS class (upstream
//! `GetPodQOS`) and the pod IP list (upstream `sortPodIPs`).

use std::collections::BTreeMap;
use std::net::IpAddr;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::restart::{app_containers, init_containers};

const QOS_RESOURCES: [&str; 2] = ["cpu", "memory"];

/// `qosClass`: BestEffort without any cpu/memory request or limit; Guaranteed when every
/// container limits both cpu and memory and the summed requests equal the summed limits;
/// Burstable otherwise. A request left out next to a limit defaults to the limit, as the API
/// server's defaulting does.
pub(crate) fn qos_class(pod: &Pod) -> &'static str {
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

/// A resource quantity in nano-units (`100m` → 100_000_000, `1Ki` → 1024 × 10⁹); `None` when it
/// does not parse or overflows. Enough to add and compare requests and limits.
pub(crate) fn parse_quantity(s: &str) -> Option<i128> {
    let s = s.trim();
    let split =
        s.find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-')).unwrap_or(s.len());
    let (number, suffix) = s.split_at(split);
    let (negative, number) = match number.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, number.strip_prefix('+').unwrap_or(number)),
    };
    let (whole, frac) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() && frac.is_empty() {
        return None;
    }
    let digits: String = [whole, frac].concat();
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let mantissa: i128 = digits.parse().ok()?;
    let (exp10, exp2): (i32, u32) = match suffix {
        "" => (0, 0),
        "n" => (-9, 0),
        "u" => (-6, 0),
        "m" => (-3, 0),
        "k" => (3, 0),
        "M" => (6, 0),
        "G" => (9, 0),
        "T" => (12, 0),
        "P" => (15, 0),
        "E" => (18, 0),
        "Ki" => (0, 10),
        "Mi" => (0, 20),
        "Gi" => (0, 30),
        "Ti" => (0, 40),
        "Pi" => (0, 50),
        "Ei" => (0, 60),
        other => (other.strip_prefix(['e', 'E'])?.parse().ok()?, 0),
    };
    // Nano-units: shift by 9, minus the digits that were after the point.
    let shift = exp10 + 9 - i32::try_from(frac.len()).ok()?;
    let scaled = if shift >= 0 {
        mantissa.checked_mul(10i128.checked_pow(shift.unsigned_abs())?)?
    } else {
        mantissa / 10i128.checked_pow(shift.unsigned_abs())?
    };
    let value = scaled.checked_mul(1i128.checked_shl(exp2)?)?;
    Some(if negative { -value } else { value })
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
