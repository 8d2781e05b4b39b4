//! Which cgroup driver the node uses: `--cgroup-driver` (default cgroupfs), unless the runtime
//! names its own through CRI `RuntimeConfig`, which the kubelet then follows
//! (`cmd/kubelet/app/server.go`, `getCgroupDriverFromCRI`). Pure: the caller makes the call.

use std::fmt;
use std::str::FromStr;

/// A cgroup driver: who creates and names the pods' cgroups.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CgroupDriver {
    /// Plain directories under `/sys/fs/cgroup` (`/kubepods/burstable/pod<uid>`).
    #[default]
    Cgroupfs,
    /// systemd slices made over D-Bus (`kubepods-burstable-pod<uid_>.slice`).
    Systemd,
}

impl CgroupDriver {
    pub fn as_str(self) -> &'static str {
        match self {
            CgroupDriver::Cgroupfs => "cgroupfs",
            CgroupDriver::Systemd => "systemd",
        }
    }
}

impl fmt::Display for CgroupDriver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for CgroupDriver {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "cgroupfs" => Ok(CgroupDriver::Cgroupfs),
            "systemd" => Ok(CgroupDriver::Systemd),
            other => Err(format!("unknown cgroup driver {other:?} (cgroupfs or systemd)")),
        }
    }
}

/// What the runtime's `RuntimeConfig` said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RuntimeAnswer {
    /// It names its driver.
    Reported(CgroupDriver),
    /// It answered without a Linux section (nothing to follow).
    NoLinuxSection,
    /// It does not implement the call (containerd 1.6 and 2.1, as tested here).
    Unimplemented,
    /// Any other failure, after the kubelet's retries.
    Failed(String),
}

/// The driver the agent uses, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    pub driver: CgroupDriver,
    /// Where it came from, for the log line (`"the runtime's RuntimeConfig"`, ...).
    pub source: &'static str,
    /// A flag the runtime overrode: what was asked for (logged as a warning).
    pub overridden: Option<CgroupDriver>,
}

/// The kubelet's rule: the runtime's answer wins (the flag only matters when the runtime does
/// not say); a runtime that does not implement `RuntimeConfig`, or answers without a Linux
/// section, leaves the flag in force; any other failure stops the agent's start, as it stops
/// the kubelet's. `flag` is `--cgroup-driver` as given, `None` when not given.
pub fn resolve(flag: Option<CgroupDriver>, answer: &RuntimeAnswer) -> Result<Resolved, String> {
    let (given, source) = match flag {
        Some(d) => (d, "--cgroup-driver"),
        None => (CgroupDriver::default(), "the default (--cgroup-driver not given)"),
    };
    match answer {
        RuntimeAnswer::Reported(d) => Ok(Resolved {
            driver: *d,
            source: "the runtime's RuntimeConfig",
            overridden: flag.filter(|f| f != d),
        }),
        RuntimeAnswer::NoLinuxSection | RuntimeAnswer::Unimplemented => {
            Ok(Resolved { driver: given, source, overridden: None })
        }
        RuntimeAnswer::Failed(e) => {
            Err(format!("asking the runtime for its cgroup driver (RuntimeConfig): {e}"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_print() {
        assert_eq!("systemd".parse::<CgroupDriver>(), Ok(CgroupDriver::Systemd));
        assert_eq!("cgroupfs".parse::<CgroupDriver>(), Ok(CgroupDriver::Cgroupfs));
        assert!("Systemd".parse::<CgroupDriver>().is_err());
        assert_eq!(CgroupDriver::default(), CgroupDriver::Cgroupfs);
        assert_eq!(CgroupDriver::Systemd.to_string(), "systemd");
    }

    #[test]
    fn the_runtime_wins_over_the_flag() {
        use CgroupDriver::{Cgroupfs, Systemd};
        use RuntimeAnswer::*;
        let ok = |driver, source: &'static str, overridden| -> Result<Resolved, String> {
            Ok(Resolved { driver, source, overridden })
        };
        let cases = [
            (
                "no flag, runtime says systemd",
                None,
                Reported(Systemd),
                ok(Systemd, "the runtime's RuntimeConfig", None),
            ),
            (
                "flag agrees",
                Some(Systemd),
                Reported(Systemd),
                ok(Systemd, "the runtime's RuntimeConfig", None),
            ),
            (
                "flag disagrees: the runtime's wins, the flag is reported",
                Some(Cgroupfs),
                Reported(Systemd),
                ok(Systemd, "the runtime's RuntimeConfig", Some(Cgroupfs)),
            ),
            (
                "flag systemd, runtime cgroupfs",
                Some(Systemd),
                Reported(Cgroupfs),
                ok(Cgroupfs, "the runtime's RuntimeConfig", Some(Systemd)),
            ),
            (
                "containerd 1.6/2.1: the flag",
                Some(Systemd),
                Unimplemented,
                ok(Systemd, "--cgroup-driver", None),
            ),
            (
                "no flag, no RuntimeConfig: cgroupfs",
                None,
                Unimplemented,
                ok(Cgroupfs, "the default (--cgroup-driver not given)", None),
            ),
            (
                "no Linux section: the flag",
                Some(Systemd),
                NoLinuxSection,
                ok(Systemd, "--cgroup-driver", None),
            ),
        ];
        for (what, flag, answer, want) in cases {
            assert_eq!(resolve(flag, &answer), want, "{what}");
        }
        let failed = resolve(Some(Systemd), &Failed("connection refused".into()));
        assert!(failed.is_err_and(|e| e.contains("RuntimeConfig") && e.contains("connection refused")));
    }
}
