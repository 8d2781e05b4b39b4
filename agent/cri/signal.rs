//! Stop signals (KEP-4960): the names `lifecycle.stopSignal` and
//! `containerStatuses[].stopSignal` use, and CRI's `Signal` enum they map to.
//!
//! CRI numbers the signals in the order of the API's list, from 1 (`0` is `RUNTIME_DEFAULT`:
//! no signal chosen), so the mapping is the position in [`NAMES`]; it is pinned against the
//! generated enum by a test. Which names a pod may use is the manifest validation's business.

use crate::cri::api;

/// Every stop signal the API accepts, in CRI's order (`NAMES[i]` is CRI value `i + 1`).
pub const NAMES: [&str; 65] = [
    "SIGABRT",
    "SIGALRM",
    "SIGBUS",
    "SIGCHLD",
    "SIGCLD",
    "SIGCONT",
    "SIGFPE",
    "SIGHUP",
    "SIGILL",
    "SIGINT",
    "SIGIO",
    "SIGIOT",
    "SIGKILL",
    "SIGPIPE",
    "SIGPOLL",
    "SIGPROF",
    "SIGPWR",
    "SIGQUIT",
    "SIGSEGV",
    "SIGSTKFLT",
    "SIGSTOP",
    "SIGSYS",
    "SIGTERM",
    "SIGTRAP",
    "SIGTSTP",
    "SIGTTIN",
    "SIGTTOU",
    "SIGURG",
    "SIGUSR1",
    "SIGUSR2",
    "SIGVTALRM",
    "SIGWINCH",
    "SIGXCPU",
    "SIGXFSZ",
    "SIGRTMIN",
    "SIGRTMIN+1",
    "SIGRTMIN+2",
    "SIGRTMIN+3",
    "SIGRTMIN+4",
    "SIGRTMIN+5",
    "SIGRTMIN+6",
    "SIGRTMIN+7",
    "SIGRTMIN+8",
    "SIGRTMIN+9",
    "SIGRTMIN+10",
    "SIGRTMIN+11",
    "SIGRTMIN+12",
    "SIGRTMIN+13",
    "SIGRTMIN+14",
    "SIGRTMIN+15",
    "SIGRTMAX-14",
    "SIGRTMAX-13",
    "SIGRTMAX-12",
    "SIGRTMAX-11",
    "SIGRTMAX-10",
    "SIGRTMAX-9",
    "SIGRTMAX-8",
    "SIGRTMAX-7",
    "SIGRTMAX-6",
    "SIGRTMAX-5",
    "SIGRTMAX-4",
    "SIGRTMAX-3",
    "SIGRTMAX-2",
    "SIGRTMAX-1",
    "SIGRTMAX",
];

/// The signals a Windows pod may name (KEP-4960: only these two have a meaning there).
pub const WINDOWS_NAMES: [&str; 2] = ["SIGTERM", "SIGKILL"];

/// The CRI value for a `lifecycle.stopSignal`: `None` (unset) is `RUNTIME_DEFAULT`, as the
/// kubelet sends it; a name outside the API's list is `None` (validation refuses it first).
pub fn to_cri(name: Option<&str>) -> Option<api::Signal> {
    let Some(name) = name else { return Some(api::Signal::RuntimeDefault) };
    let i = NAMES.iter().position(|n| *n == name)?;
    api::Signal::try_from(i32::try_from(i + 1).ok()?).ok()
}

/// The name of a CRI signal as `containerStatuses[].stopSignal` shows it; `None` for
/// `RUNTIME_DEFAULT` (0: the runtime reported no signal, as runtimes before the field do) and
/// for a value this build does not know.
pub fn name_of(value: i32) -> Option<&'static str> {
    let i = usize::try_from(value).ok()?.checked_sub(1)?;
    NAMES.get(i).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_map_to_cri_in_the_api_order() {
        let cases = [
            ("unset: the runtime's default", None, Some(api::Signal::RuntimeDefault)),
            ("first of the list", Some("SIGABRT"), Some(api::Signal::Sigabrt)),
            ("SIGTERM is 23", Some("SIGTERM"), Some(api::Signal::Sigterm)),
            ("SIGUSR1", Some("SIGUSR1"), Some(api::Signal::Sigusr1)),
            ("realtime plus", Some("SIGRTMIN+1"), Some(api::Signal::Sigrtminplus1)),
            ("realtime minus", Some("SIGRTMAX-14"), Some(api::Signal::Sigrtmaxminus14)),
            ("last of the list", Some("SIGRTMAX"), Some(api::Signal::Sigrtmax)),
            ("not a signal name", Some("TERM"), None),
            ("lower case is not the API's spelling", Some("sigterm"), None),
            ("a number is not a name", Some("15"), None),
            ("empty", Some(""), None),
        ];
        for (what, name, want) in cases {
            assert_eq!(to_cri(name), want, "{what}");
        }
    }

    #[test]
    fn every_name_round_trips_through_the_generated_enum() {
        for (i, name) in NAMES.iter().enumerate() {
            let v = to_cri(Some(name)).unwrap_or_else(|| panic!("{name} has no CRI value"));
            assert_eq!(v as usize, i + 1, "{name}");
            // The proto's own name for the value, with `+`/`-` spelt out as CRI does.
            let proto = name.replace('+', "PLUS").replace('-', "MINUS");
            assert_eq!(v.as_str_name(), proto, "{name}");
            assert_eq!(name_of(v as i32), Some(*name));
        }
    }

    #[test]
    fn status_values_without_a_name() {
        assert_eq!(name_of(0), None, "RUNTIME_DEFAULT: the runtime reports no signal");
        assert_eq!(name_of(-1), None);
        assert_eq!(name_of(66), None, "a value newer than this build");
        assert_eq!(name_of(23), Some("SIGTERM"));
    }
}
