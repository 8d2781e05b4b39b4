//! The systemd driver's half that talks to systemd: slices made, changed and removed over
//! D-Bus on the system bus (`org.freedesktop.systemd1.Manager`'s `StartTransientUnit`,
//! `SetUnitProperties`, `StopUnit`, `ResetFailedUnit`), as libcontainer's systemd cgroup
//! manager does it for the kubelet (opencontainers/cgroups `systemd/common.go`, `v1.go`,
//! `v2.go`). The properties are pure functions (table-tested); `Units` makes the calls.
//!
//! Nothing here connects until the first call, so an agent on the cgroupfs driver, which
//! never makes one, never opens the bus.

use std::time::Duration;

use futures::StreamExt;
use tokio::sync::Mutex;
use tracing::{debug, warn};
use zbus::zvariant::{OwnedObjectPath, Value};

use super::files::cpu_weight;
use super::{CPU_PERIOD, CgroupValues};

const DESTINATION: &str = "org.freedesktop.systemd1";
const PATH: &str = "/org/freedesktop/systemd1";
const MANAGER: &str = "org.freedesktop.systemd1.Manager";
/// How long a unit's job may take (libcontainer's `startUnit`/`stopUnit` wait 30 s).
const JOB_TIMEOUT: Duration = Duration::from_secs(30);
/// The first systemd with `CPUQuotaPeriodUSec` (libcontainer's `addCPUQuota`).
const QUOTA_PERIOD_SINCE: u32 = 242;

/// A unit property's value, as the D-Bus signature wants it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PropValue {
    Str(String),
    Bool(bool),
    U64(u64),
    Strs(Vec<String>),
}

/// A unit property: its name and value (`a(sv)` on the wire).
pub type Property = (&'static str, PropValue);

fn to_wire(props: &[Property]) -> Vec<(&'static str, Value<'static>)> {
    props
        .iter()
        .map(|(name, v)| {
            let value = match v {
                PropValue::Str(s) => Value::from(s.clone()),
                PropValue::Bool(b) => Value::from(*b),
                PropValue::U64(n) => Value::from(*n),
                PropValue::Strs(list) => Value::from(list.clone()),
            };
            (*name, value)
        })
        .collect()
}

/// The properties a slice starts with (libcontainer's `Apply` for a `.slice` unit, which the
/// kubelet's `Create` calls with no process): its description, its parent slice as `Wants=`
/// (a slice's place in the tree comes from its name; a scope would get `Slice=` and
/// `Delegate=yes` instead, and slices get no `Delegate`), accounting on for every controller,
/// and `DefaultDependencies=no`. `v2` picks `IOAccounting` over v1's `BlockIOAccounting`.
pub fn slice_properties(unit: &str, parent: &str, v2: bool) -> Vec<Property> {
    vec![
        ("Description", PropValue::Str(format!("libcontainer container {unit}"))),
        ("Wants", PropValue::Strs(vec![parent.to_string()])),
        ("MemoryAccounting", PropValue::Bool(true)),
        ("CPUAccounting", PropValue::Bool(true)),
        (if v2 { "IOAccounting" } else { "BlockIOAccounting" }, PropValue::Bool(true)),
        ("TasksAccounting", PropValue::Bool(true)),
        ("DefaultDependencies", PropValue::Bool(false)),
    ]
}

/// The unit properties of cgroup values (libcontainer's `genV2ResourcesProperties` and
/// `genV1ResourcesProperties` for what the kubelet sets: memory, shares, quota, and the pids
/// limit of `kubepods`).
/// v2: `MemoryMax`, `CPUWeight` (from the shares as the kubelet converts them), v1:
/// `MemoryLimit`, `CPUShares`; both: `CPUQuotaPeriodUSec` (systemd 242 and later) and
/// `CPUQuotaPerSecUSec`, which systemd keeps in whole percents of a CPU, so the quota is
/// rounded up to the next 10 ms a second (as libcontainer does, so that child cgroups can get
/// the quota they ask for). Each value is given only when `values` has it; `None` for the
/// memory limit or the quota means unlimited (`infinity`, u64::MAX). Returns the properties and
/// the quota, rounded, to write to the cgroup's files as well. The pids limit is `TasksMax`
/// (`infinity` when unlimited).
pub fn resource_properties(
    values: &Resources,
    v2: bool,
    systemd_version: Option<u32>,
) -> (Vec<Property>, Option<Option<i64>>) {
    let mut props = Vec::new();
    if let Some(memory) = values.memory_limit {
        let bytes = memory.and_then(|m| u64::try_from(m).ok()).unwrap_or(u64::MAX);
        props.push((if v2 { "MemoryMax" } else { "MemoryLimit" }, PropValue::U64(bytes)));
    }
    if let Some(shares) = values.cpu_shares {
        if v2 {
            props.push(("CPUWeight", PropValue::U64(u64::try_from(cpu_weight(shares)).unwrap_or(1))));
        } else {
            props.push(("CPUShares", PropValue::U64(u64::try_from(shares).unwrap_or(2))));
        }
    }
    let mut quota_out = None;
    if let Some(quota) = values.cpu_quota {
        let period = CPU_PERIOD as u64;
        if systemd_version.is_some_and(|v| v >= QUOTA_PERIOD_SINCE) {
            props.push(("CPUQuotaPeriodUSec", PropValue::U64(period)));
        }
        let (per_sec, rounded) = match quota.filter(|q| *q > 0) {
            None => (u64::MAX, None),
            Some(q) => {
                let mut per_sec = (q as u64).saturating_mul(1_000_000) / period;
                let mut q = q;
                if !per_sec.is_multiple_of(10_000) {
                    per_sec = (per_sec / 10_000 + 1) * 10_000;
                    q = i64::try_from(per_sec.saturating_mul(period) / 1_000_000).unwrap_or(i64::MAX);
                }
                (per_sec, Some(q))
            }
        };
        props.push(("CPUQuotaPerSecUSec", PropValue::U64(per_sec)));
        quota_out = Some(rounded);
    }
    if let Some(pids) = values.pids_limit {
        let tasks = pids.and_then(|p| u64::try_from(p).ok()).unwrap_or(u64::MAX);
        props.push(("TasksMax", PropValue::U64(tasks)));
    }
    (props, quota_out)
}

/// Some of a cgroup's values, each `None` when not being set (a resize sets one at a time).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Resources {
    /// `Some(None)`: unlimited.
    pub memory_limit: Option<Option<i64>>,
    pub cpu_shares: Option<i64>,
    /// `Some(None)`: unlimited.
    pub cpu_quota: Option<Option<i64>>,
    /// `pids.max` (`TasksMax`); `Some(None)`: unlimited. Only the node allocatable cgroup
    /// (`kubepods`) has one: the kubelet limits a pod's only with `podPidsLimit`, off by default.
    pub pids_limit: Option<Option<i64>>,
}

impl From<&CgroupValues> for Resources {
    fn from(v: &CgroupValues) -> Self {
        Resources {
            memory_limit: Some(v.memory_limit),
            cpu_shares: Some(v.cpu_shares),
            cpu_quota: Some(v.cpu_quota),
            pids_limit: None,
        }
    }
}

/// A failed call to systemd: which call, on which unit, and why.
#[derive(Debug, thiserror::Error)]
pub enum UnitError {
    #[error("connecting to systemd on the system bus for {call} of {unit}")]
    Connect {
        call: &'static str,
        unit: String,
        #[source]
        source: zbus::Error,
    },
    #[error("systemd {call} of {unit} failed")]
    Call {
        call: &'static str,
        unit: String,
        #[source]
        source: zbus::Error,
    },
    #[error("systemd {call} of {unit}: its job ended {result:?} (not \"done\")")]
    Job { call: &'static str, unit: String, result: String },
    #[error("systemd {call} of {unit}: its job did not end within {}s", JOB_TIMEOUT.as_secs())]
    Timeout { call: &'static str, unit: String },
}

/// The bus connection and what was learnt of systemd on it.
#[derive(Clone)]
struct Bus {
    conn: zbus::Connection,
    version: Option<u32>,
}

/// systemd's units, over one system-bus connection made at the first call and made again after
/// the bus went away (libcontainer's `retryOnDisconnect`).
pub struct Units {
    v2: bool,
    bus: Mutex<Option<Bus>>,
}

impl Units {
    pub fn new(v2: bool) -> Self {
        Units { v2, bus: Mutex::new(None) }
    }

    pub fn is_v2(&self) -> bool {
        self.v2
    }

    async fn bus(&self, call: &'static str, unit: &str) -> Result<Bus, UnitError> {
        let mut slot = self.bus.lock().await;
        if let Some(b) = slot.as_ref() {
            return Ok(b.clone());
        }
        let connect = |source| UnitError::Connect { call, unit: unit.to_string(), source };
        let conn = zbus::Connection::system().await.map_err(connect)?;
        // systemd sends JobRemoved only while some client is subscribed (systemctl does this
        // too); every job below is awaited through that signal.
        conn.call_method(Some(DESTINATION), PATH, Some(MANAGER), "Subscribe", &()).await.map_err(connect)?;
        let version = manager_version(&conn).await;
        debug!(?version, "connected to systemd on the system bus");
        let b = Bus { conn, version };
        *slot = Some(b.clone());
        Ok(b)
    }

    /// Forgets the connection after an I/O error, so the next call dials again.
    async fn forget_on_disconnect(&self, e: &zbus::Error) -> bool {
        if matches!(e, zbus::Error::InputOutput(_)) {
            *self.bus.lock().await = None;
            return true;
        }
        false
    }

    /// The systemd version (for `CPUQuotaPeriodUSec`), connecting if need be.
    pub async fn version(&self) -> Option<u32> {
        self.bus("GetManagerProperty Version", "-").await.ok().and_then(|b| b.version)
    }

    /// Starts slice `unit` with `props` (`StartTransientUnit`, mode `replace`) and waits for its
    /// job. A slice that exists already is left as it is and `false` returned (libcontainer's
    /// "kubelet making sure a slice exists"); the caller then sets what it must change.
    pub async fn start(&self, unit: &str, props: &[Property]) -> Result<bool, UnitError> {
        const CALL: &str = "StartTransientUnit";
        let aux: Vec<(&str, Vec<(&str, Value<'_>)>)> = Vec::new();
        let body = (unit, "replace", to_wire(props), aux);
        match self.job(CALL, unit, "StartTransientUnit", &body).await {
            Ok(result) if result == "done" => Ok(true),
            Ok(result) => {
                self.reset_failed(unit).await;
                Err(UnitError::Job { call: CALL, unit: unit.to_string(), result })
            }
            Err(UnitError::Call { source: zbus::Error::MethodError(name, _, _), .. })
                if name.as_str() == "org.freedesktop.systemd1.UnitExists" =>
            {
                Ok(false)
            }
            Err(e) => {
                if matches!(e, UnitError::Timeout { .. }) {
                    self.reset_failed(unit).await;
                }
                Err(e)
            }
        }
    }

    /// Sets `props` on `unit` at run time (`SetUnitProperties` with `runtime=true`, so the
    /// change lives under /run and goes with the unit).
    pub async fn set(&self, unit: &str, props: &[Property]) -> Result<(), UnitError> {
        const CALL: &str = "SetUnitProperties";
        if props.is_empty() {
            return Ok(());
        }
        let body = (unit, true, to_wire(props));
        self.call(CALL, unit, &body).await.map(|_| ())
    }

    /// Stops `unit` (`StopUnit`, mode `replace`) and waits for its job; systemd then removes
    /// its cgroup. A unit systemd does not know is already gone. A failed unit is reset so
    /// that systemd forgets it (libcontainer's `stopUnit`).
    pub async fn stop(&self, unit: &str) -> Result<(), UnitError> {
        const CALL: &str = "StopUnit";
        match self.job(CALL, unit, "StopUnit", &(unit, "replace")).await {
            Ok(result) if result != "done" => {
                warn!(unit, result = %result, "stopping the slice's job did not end \"done\"")
            }
            Ok(_) => {}
            Err(UnitError::Call { source: zbus::Error::MethodError(name, _, _), .. })
                if name.as_str() == "org.freedesktop.systemd1.NoSuchUnit" =>
            {
                return Ok(());
            }
            Err(e) => return Err(e),
        }
        self.reset_failed(unit).await;
        Ok(())
    }

    async fn reset_failed(&self, unit: &str) {
        if let Err(e) = self.call("ResetFailedUnit", unit, &(unit,)).await {
            debug!(unit, error = %crate::error_chain(&e), "ResetFailedUnit");
        }
    }

    /// One method call on the manager, dialled again once if the bus went away.
    async fn call<B>(&self, call: &'static str, unit: &str, body: &B) -> Result<zbus::Message, UnitError>
    where
        B: serde::Serialize + zbus::zvariant::DynamicType,
    {
        let mut retried = false;
        loop {
            let bus = self.bus(call, unit).await?;
            match bus.conn.call_method(Some(DESTINATION), PATH, Some(MANAGER), call, body).await {
                Ok(m) => return Ok(m),
                Err(e) if !retried && self.forget_on_disconnect(&e).await => retried = true,
                Err(source) => return Err(UnitError::Call { call, unit: unit.to_string(), source }),
            }
        }
    }

    /// A call that returns a job, and the job's result once systemd removes it (`JobRemoved`),
    /// listened for before the call so that a quick job is not missed.
    async fn job<B>(
        &self,
        call: &'static str,
        unit: &str,
        method: &'static str,
        body: &B,
    ) -> Result<String, UnitError>
    where
        B: serde::Serialize + zbus::zvariant::DynamicType,
    {
        let failed = |source| UnitError::Call { call, unit: unit.to_string(), source };
        let bus = self.bus(call, unit).await?;
        let rule = job_removed_rule().map_err(failed)?;
        let mut removed = zbus::MessageStream::for_match_rule(rule, &bus.conn, None).await.map_err(failed)?;
        let reply = self.call(method, unit, body).await?;
        let job: OwnedObjectPath = reply.body().deserialize().map_err(failed)?;
        let wait = async {
            while let Some(msg) = removed.next().await {
                let Ok(msg) = msg else { continue };
                let Ok((_id, path, _unit, result)) =
                    msg.body().deserialize::<(u32, OwnedObjectPath, String, String)>()
                else {
                    continue;
                };
                if path == job {
                    return Some(result);
                }
            }
            None
        };
        match tokio::time::timeout(JOB_TIMEOUT, wait).await {
            Ok(Some(result)) => Ok(result),
            Ok(None) => Err(failed(zbus::Error::Failure("the bus closed before the job ended".into()))),
            Err(_) => Err(UnitError::Timeout { call, unit: unit.to_string() }),
        }
    }
}

fn job_removed_rule() -> zbus::Result<zbus::MatchRule<'static>> {
    Ok(zbus::MatchRule::builder()
        .msg_type(zbus::message::Type::Signal)
        .sender(DESTINATION)?
        .path(PATH)?
        .interface(MANAGER)?
        .member("JobRemoved")?
        .build())
}

/// The manager's `Version` property ("252.39-1~deb12u1" → 252), as libcontainer reads it.
async fn manager_version(conn: &zbus::Connection) -> Option<u32> {
    let reply = conn
        .call_method(
            Some(DESTINATION),
            PATH,
            Some("org.freedesktop.DBus.Properties"),
            "Get",
            &(MANAGER, "Version"),
        )
        .await
        .ok()?;
    let value: zbus::zvariant::OwnedValue = reply.body().deserialize().ok()?;
    let text: String = value.try_into().ok()?;
    parse_version(&text)
}

/// The leading number of a systemd version string (`v245.4-1.fc32`, `"245"`, `252.39-1~deb12u1`).
pub fn parse_version(text: &str) -> Option<u32> {
    let digits: String =
        text.trim_start_matches(['"', 'v']).chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn systemd_versions() {
        for (text, want) in [
            ("v245.4-1.fc32", Some(245)),
            ("245", Some(245)),
            ("\"v245-1.fc32\"", Some(245)),
            ("252.39-1~deb12u1", Some(252)),
            ("x", None),
        ] {
            assert_eq!(parse_version(text), want, "{text}");
        }
    }

    #[test]
    fn a_slice_as_libcontainer_starts_one() {
        let props = slice_properties("kubepods-burstable-poda.slice", "kubepods-burstable.slice", true);
        assert_eq!(
            props,
            vec![
                (
                    "Description",
                    PropValue::Str("libcontainer container kubepods-burstable-poda.slice".into())
                ),
                ("Wants", PropValue::Strs(vec!["kubepods-burstable.slice".into()])),
                ("MemoryAccounting", PropValue::Bool(true)),
                ("CPUAccounting", PropValue::Bool(true)),
                ("IOAccounting", PropValue::Bool(true)),
                ("TasksAccounting", PropValue::Bool(true)),
                ("DefaultDependencies", PropValue::Bool(false)),
            ]
        );
        let v1 = slice_properties("kubepods.slice", "-.slice", false);
        assert!(v1.contains(&("BlockIOAccounting", PropValue::Bool(true))));
        assert!(!v1.iter().any(|(n, _)| *n == "IOAccounting" || *n == "Delegate"));
    }

    #[test]
    fn resources_as_unit_properties() {
        use PropValue::U64;
        let all = |memory, shares, quota| Resources {
            memory_limit: Some(memory),
            cpu_shares: Some(shares),
            cpu_quota: Some(quota),
            pids_limit: None,
        };
        let cases = [
            (
                "guaranteed, 250m and 64Mi, v2 on systemd 252",
                all(Some(64 << 20), 256, Some(25_000)),
                true,
                Some(252),
                vec![
                    ("MemoryMax", U64(64 << 20)),
                    ("CPUWeight", U64(10)),
                    ("CPUQuotaPeriodUSec", U64(100_000)),
                    ("CPUQuotaPerSecUSec", U64(250_000)),
                ],
                Some(Some(25_000)),
            ),
            (
                "the same on v1",
                all(Some(64 << 20), 256, Some(25_000)),
                false,
                Some(252),
                vec![
                    ("MemoryLimit", U64(64 << 20)),
                    ("CPUShares", U64(256)),
                    ("CPUQuotaPeriodUSec", U64(100_000)),
                    ("CPUQuotaPerSecUSec", U64(250_000)),
                ],
                Some(Some(25_000)),
            ),
            (
                "15m rounds up to whole percents (2 ms a period); an old systemd gets no period",
                all(None, 2, Some(1_500)),
                true,
                Some(241),
                vec![
                    ("MemoryMax", U64(u64::MAX)),
                    ("CPUWeight", U64(1)),
                    ("CPUQuotaPerSecUSec", U64(20_000)),
                ],
                Some(Some(2_000)),
            ),
            (
                "burstable without limits: unlimited",
                all(None, 1024, None),
                true,
                Some(252),
                vec![
                    ("MemoryMax", U64(u64::MAX)),
                    ("CPUWeight", U64(39)),
                    ("CPUQuotaPeriodUSec", U64(100_000)),
                    ("CPUQuotaPerSecUSec", U64(u64::MAX)),
                ],
                Some(None),
            ),
            (
                "a resize of the memory only",
                Resources { memory_limit: Some(Some(1 << 30)), ..Default::default() },
                true,
                None,
                vec![("MemoryMax", U64(1 << 30))],
                None,
            ),
            (
                "a resize of the shares only, v1",
                Resources { cpu_shares: Some(512), ..Default::default() },
                false,
                None,
                vec![("CPUShares", U64(512))],
                None,
            ),
            (
                "kubepods' pids limit",
                Resources { pids_limit: Some(Some(32_768)), ..Default::default() },
                true,
                Some(252),
                vec![("TasksMax", U64(32_768))],
                None,
            ),
            (
                "no pids limit: infinity",
                Resources { pids_limit: Some(None), ..Default::default() },
                false,
                None,
                vec![("TasksMax", U64(u64::MAX))],
                None,
            ),
        ];
        for (what, r, v2, version, want, quota) in cases {
            assert_eq!(resource_properties(&r, v2, version), (want, quota), "{what}");
        }
    }
}
