//! Eviction thresholds as the kubelet parses them (`ParseThresholdConfig` in the eviction
//! manager's helpers): the signals, `signal<quantity|percent%>` statements for the hard and soft
//! sets, the soft grace periods and the minimum reclaims, with the kubelet's checks. Pure.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use crate::quantity::Quantity;

/// An eviction signal (the kubelet's `evictionapi.Signal`s that crilet observes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Signal {
    MemoryAvailable,
    NodeFsAvailable,
    NodeFsInodesFree,
    ImageFsAvailable,
    ImageFsInodesFree,
    PidAvailable,
}

impl Signal {
    pub const ALL: [Signal; 6] = [
        Signal::MemoryAvailable,
        Signal::NodeFsAvailable,
        Signal::NodeFsInodesFree,
        Signal::ImageFsAvailable,
        Signal::ImageFsInodesFree,
        Signal::PidAvailable,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Signal::MemoryAvailable => "memory.available",
            Signal::NodeFsAvailable => "nodefs.available",
            Signal::NodeFsInodesFree => "nodefs.inodesFree",
            Signal::ImageFsAvailable => "imagefs.available",
            Signal::ImageFsInodesFree => "imagefs.inodesFree",
            Signal::PidAvailable => "pid.available",
        }
    }

    /// The kubelet's signal names; the ones it has and crilet does not observe
    /// (`allocatableMemory.available`, `containerfs.*`) are refused by name.
    pub fn parse(s: &str) -> Result<Signal, String> {
        if let Some(sig) = Signal::ALL.into_iter().find(|sig| sig.as_str() == s) {
            return Ok(sig);
        }
        match s {
            "allocatableMemory.available" | "containerfs.available" | "containerfs.inodesFree" => {
                Err(format!("eviction signal {s} is not supported by crilet"))
            }
            _ => Err(format!("unsupported eviction signal {s}")),
        }
    }

    /// The resource a signal's pressure starves (`signalToResource`), as the eviction message
    /// names it.
    pub fn resource(self) -> &'static str {
        match self {
            Signal::MemoryAvailable => "memory",
            Signal::NodeFsAvailable | Signal::ImageFsAvailable => "ephemeral-storage",
            Signal::NodeFsInodesFree | Signal::ImageFsInodesFree => "inodes",
            Signal::PidAvailable => "pids",
        }
    }

    /// The node condition a met threshold of this signal sets (`signalToNodeCondition`).
    pub fn condition(self) -> Condition {
        match self {
            Signal::MemoryAvailable => Condition::MemoryPressure,
            Signal::PidAvailable => Condition::PidPressure,
            _ => Condition::DiskPressure,
        }
    }

    /// Counts (inodes, pids) print as decimal quantities, bytes as binary ones.
    fn decimal(self) -> bool {
        matches!(self, Signal::NodeFsInodesFree | Signal::ImageFsInodesFree | Signal::PidAvailable)
    }
}

impl fmt::Display for Signal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The node conditions eviction drives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Condition {
    MemoryPressure,
    DiskPressure,
    PidPressure,
}

impl Condition {
    pub fn as_str(self) -> &'static str {
        match self {
            Condition::MemoryPressure => "MemoryPressure",
            Condition::DiskPressure => "DiskPressure",
            Condition::PidPressure => "PIDPressure",
        }
    }
}

/// A threshold's value: an absolute amount (bytes or a count), or a fraction of capacity.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value {
    Amount(i64),
    /// 0 < fraction <= 1, as the kubelet keeps it (a float32 of percent/100).
    Fraction(f32),
}

impl Value {
    /// The amount this value stands for on a resource of `capacity` (`GetThresholdQuantity`).
    pub fn amount(self, capacity: i64) -> i64 {
        match self {
            Value::Amount(a) => a,
            Value::Fraction(f) => (capacity as f64 * f64::from(f)) as i64,
        }
    }
}

/// One threshold: `signal < value`, met for `grace_period` (zero: hard) before it acts.
#[derive(Debug, Clone, PartialEq)]
pub struct Threshold {
    pub signal: Signal,
    pub value: Value,
    pub grace_period: Duration,
    /// Once met, it stays met until `value + min_reclaim` is available again.
    pub min_reclaim: Option<Value>,
}

impl Threshold {
    /// A hard threshold acts at once (`isHardEvictionThreshold`).
    pub fn is_hard(&self) -> bool {
        self.grace_period.is_zero()
    }
}

/// The kubelet's default `--eviction-hard`.
pub const DEFAULT_HARD: &str =
    "memory.available<100Mi,nodefs.available<10%,nodefs.inodesFree<5%,imagefs.available<15%";

/// What the eviction flags say, as given (`None`: not given).
#[derive(Debug, Clone, Default)]
pub struct Flags<'a> {
    pub hard: Option<&'a str>,
    pub soft: Option<&'a str>,
    pub soft_grace_period: Option<&'a str>,
    pub minimum_reclaim: Option<&'a str>,
}

/// Parses the thresholds as the kubelet's `ParseThresholdConfig`: the hard set (default
/// [`DEFAULT_HARD`], replaced whole when given), then the soft set, each soft signal needing a
/// grace period; minimum reclaims apply to every threshold of their signal. Errors name the
/// flag and the entry.
pub fn parse(flags: &Flags<'_>) -> Result<Vec<Threshold>, String> {
    let hard = statements("--eviction-hard", flags.hard.unwrap_or(DEFAULT_HARD), '<')?;
    let soft = statements("--eviction-soft", flags.soft.unwrap_or(""), '<')?;
    let graces = statements("--eviction-soft-grace-period", flags.soft_grace_period.unwrap_or(""), '=')?;
    let reclaims = statements("--eviction-minimum-reclaim", flags.minimum_reclaim.unwrap_or(""), '=')?;
    let mut out = Vec::new();
    for (signal, text) in &hard {
        if let Some(value) = threshold_value("--eviction-hard", *signal, text)? {
            out.push(Threshold { signal: *signal, value, grace_period: Duration::ZERO, min_reclaim: None });
        }
    }
    let mut grace_of = BTreeMap::new();
    for (signal, text) in &graces {
        let d = crate::logrotate::plan::parse_go_duration(text).ok_or_else(|| {
            format!("--eviction-soft-grace-period: {signal}={text}: not a duration (e.g. 1m30s)")
        })?;
        grace_of.insert(*signal, d);
    }
    for (signal, text) in &soft {
        let Some(value) = threshold_value("--eviction-soft", *signal, text)? else { continue };
        let grace = grace_of.get(signal).copied().ok_or_else(|| {
            format!("--eviction-soft: {signal}<{text}: grace period must be specified for the soft eviction threshold {signal} (--eviction-soft-grace-period)")
        })?;
        out.push(Threshold { signal: *signal, value, grace_period: grace, min_reclaim: None });
    }
    for (signal, text) in &reclaims {
        let what = format!("--eviction-minimum-reclaim: {signal}={text}");
        let value = if let Some(p) = text.strip_suffix('%') {
            let f = percent(p).ok_or_else(|| format!("{what}: not a percentage"))?;
            if f <= 0.0 {
                return Err(format!("{what}: eviction percentage minimum reclaim {signal} must be positive"));
            }
            Value::Fraction(f)
        } else {
            let n = amount(text).ok_or_else(|| format!("{what}: not a quantity"))?;
            if n < 0 {
                return Err(format!("{what}: negative eviction minimum reclaim specified for {signal}"));
            }
            Value::Amount(n)
        };
        for t in out.iter_mut().filter(|t| t.signal == *signal) {
            t.min_reclaim = Some(value);
        }
    }
    Ok(out)
}

/// `signal<value,signal<value` (or `=` for grace periods and reclaims) into a map; a signal
/// given twice keeps the last value, as the kubelet's map flags do.
fn statements(flag: &str, text: &str, sep: char) -> Result<BTreeMap<Signal, String>, String> {
    let mut out = BTreeMap::new();
    for entry in text.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let (k, v) = entry.split_once(sep).ok_or_else(|| {
            format!("{flag}: {entry:?}: expected signal{sep}value (e.g. memory.available{sep}...)")
        })?;
        let signal = Signal::parse(k.trim()).map_err(|e| format!("{flag}: {entry:?}: {e}"))?;
        out.insert(signal, v.trim().to_string());
    }
    Ok(out)
}

/// One threshold's value (`parseThresholdStatement`): `0%` and `100%` mean no threshold.
fn threshold_value(flag: &str, signal: Signal, text: &str) -> Result<Option<Value>, String> {
    let what = format!("{flag}: {signal}<{text}");
    if let Some(p) = text.strip_suffix('%') {
        if text == "0%" || text == "100%" {
            return Ok(None);
        }
        let f = percent(p).ok_or_else(|| format!("{what}: not a percentage"))?;
        if f < 0.0 {
            return Err(format!("{what}: eviction percentage threshold {signal} must be >= 0%"));
        }
        if f > 1.0 {
            return Err(format!("{what}: eviction percentage threshold {signal} must be <= 100%"));
        }
        return Ok(Some(Value::Fraction(f)));
    }
    let n = amount(text).ok_or_else(|| format!("{what}: not a quantity (e.g. 100Mi)"))?;
    if n <= 0 {
        return Err(format!("{what}: eviction threshold {signal} must be positive"));
    }
    Ok(Some(Value::Amount(n)))
}

fn percent(p: &str) -> Option<f32> {
    let v: f32 = p.trim().parse().ok()?;
    v.is_finite().then_some(v / 100.0)
}

fn amount(text: &str) -> Option<i64> {
    Quantity::parse(text)?.value().and_then(|v| i64::try_from(v).ok())
}

/// A quantity as apimachinery prints it: bytes in binary SI (`100Mi`, `1536Ki`, `1023`), counts
/// in decimal SI (`5k`, `1234`), the largest unit that divides it exactly.
pub fn format(signal: Signal, n: i64) -> String {
    let (base, units): (i64, &[&str]) = if signal.decimal() {
        (1000, &["", "k", "M", "G", "T", "P", "E"])
    } else {
        (1024, &["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"])
    };
    let (mut v, mut i) = (n, 0);
    while v != 0 && v % base == 0 && i + 1 < units.len() {
        v /= base;
        i += 1;
    }
    format!("{v}{}", units[i])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hard(signal: Signal, value: Value) -> Threshold {
        Threshold { signal, value, grace_period: Duration::ZERO, min_reclaim: None }
    }

    #[test]
    fn the_flags_parse_as_the_kubelets() {
        let mi = |n: i64| Value::Amount(n << 20);
        // (case, flags, thresholds or a part of the error)
        type Case<'a> = (&'a str, Flags<'a>, Result<Vec<Threshold>, &'a str>);
        let cases: Vec<Case<'_>> = vec![
            (
                "the default hard set",
                Flags::default(),
                Ok(vec![
                    hard(Signal::MemoryAvailable, mi(100)),
                    hard(Signal::NodeFsAvailable, Value::Fraction(0.1)),
                    hard(Signal::NodeFsInodesFree, Value::Fraction(0.05)),
                    hard(Signal::ImageFsAvailable, Value::Fraction(0.15)),
                ]),
            ),
            (
                "a given hard set replaces the default",
                Flags { hard: Some("memory.available<1Gi"), ..Default::default() },
                Ok(vec![hard(Signal::MemoryAvailable, mi(1024))]),
            ),
            ("empty: none", Flags { hard: Some(""), ..Default::default() }, Ok(vec![])),
            (
                "0% and 100% are no threshold",
                Flags { hard: Some("nodefs.available<0%,imagefs.available<100%"), ..Default::default() },
                Ok(vec![]),
            ),
            (
                "soft with its grace period and a minimum reclaim",
                Flags {
                    hard: Some("memory.available<100Mi"),
                    soft: Some("memory.available<300Mi"),
                    soft_grace_period: Some("memory.available=1m30s"),
                    minimum_reclaim: Some("memory.available=50Mi"),
                },
                Ok(vec![
                    Threshold { min_reclaim: Some(mi(50)), ..hard(Signal::MemoryAvailable, mi(100)) },
                    Threshold {
                        signal: Signal::MemoryAvailable,
                        value: mi(300),
                        grace_period: Duration::from_secs(90),
                        min_reclaim: Some(mi(50)),
                    },
                ]),
            ),
            (
                "soft without a grace period",
                Flags { soft: Some("memory.available<300Mi"), ..Default::default() },
                Err("--eviction-soft: memory.available<300Mi: grace period must be specified"),
            ),
            (
                "unknown signal",
                Flags { hard: Some("memory.free<1Gi"), ..Default::default() },
                Err("--eviction-hard: \"memory.free<1Gi\": unsupported eviction signal memory.free"),
            ),
            (
                "a kubelet signal crilet does not observe",
                Flags { hard: Some("allocatableMemory.available<1Gi"), ..Default::default() },
                Err("eviction signal allocatableMemory.available is not supported by crilet"),
            ),
            (
                "no operator",
                Flags { hard: Some("memory.available=1Gi"), ..Default::default() },
                Err("--eviction-hard: \"memory.available=1Gi\": expected signal<value"),
            ),
            (
                "over 100%",
                Flags { hard: Some("nodefs.available<120%"), ..Default::default() },
                Err("must be <= 100%"),
            ),
            (
                "zero quantity",
                Flags { hard: Some("memory.available<0"), ..Default::default() },
                Err(
                    "--eviction-hard: memory.available<0: eviction threshold memory.available must be positive",
                ),
            ),
            (
                "bad quantity",
                Flags { hard: Some("memory.available<lots"), ..Default::default() },
                Err("--eviction-hard: memory.available<lots: not a quantity"),
            ),
            (
                "bad grace period",
                Flags {
                    soft: Some("memory.available<1Gi"),
                    soft_grace_period: Some("memory.available=soon"),
                    ..Default::default()
                },
                Err("--eviction-soft-grace-period: memory.available=soon: not a duration"),
            ),
            (
                "negative minimum reclaim",
                Flags { minimum_reclaim: Some("memory.available=-1Mi"), ..Default::default() },
                Err("negative eviction minimum reclaim specified for memory.available"),
            ),
            (
                "zero percent minimum reclaim",
                Flags { minimum_reclaim: Some("nodefs.available=0%"), ..Default::default() },
                Err("eviction percentage minimum reclaim nodefs.available must be positive"),
            ),
        ];
        for (name, flags, want) in cases {
            let got = parse(&flags);
            match (got, want) {
                (Ok(mut got), Ok(mut want)) => {
                    let key = |t: &Threshold| (t.signal, t.grace_period);
                    got.sort_by_key(key);
                    want.sort_by_key(key);
                    assert_eq!(got, want, "{name}");
                }
                (Err(e), Err(want)) => assert!(e.contains(want), "{name}: {e:?} lacks {want:?}"),
                (got, want) => panic!("{name}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn quantities_print_as_apimachinery_prints_them() {
        let cases = [
            (Signal::MemoryAvailable, 100 << 20, "100Mi"),
            (Signal::MemoryAvailable, 1536 << 10, "1536Ki"),
            (Signal::MemoryAvailable, 1023, "1023"),
            (Signal::MemoryAvailable, 0, "0"),
            (Signal::MemoryAvailable, 3 << 30, "3Gi"),
            (Signal::NodeFsInodesFree, 5000, "5k"),
            (Signal::PidAvailable, 1234, "1234"),
        ];
        for (signal, n, want) in cases {
            assert_eq!(format(signal, n), want, "{n}");
        }
        assert_eq!(Value::Fraction(0.1).amount(1000), 100);
        assert_eq!(Value::Amount(7).amount(1000), 7);
    }
}
