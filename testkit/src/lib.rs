//! What crilet's integration tests (tests/) and benchmarks (benches/) share:
//! - [`env`]: the env files `hack/setup.sh` and `hack/cluster.sh` write (`CRILET_*=value`
//!   lines), and which one the tests read (`CRILET_ENV_FILE`);
//! - [`agent`]: one `crilet run` launcher (binary, flags, directories, log capture) and the
//!   handling of the child process (alive?, SIGTERM then SIGKILL, the log's tail);
//! - [`wait`]: waits on observable state with a deadline;
//! - [`report`]: what a container reports about its own confinement, and its parse.
//!
//! Nothing here knows crilet's own types: what needs them (CRI clients, the control socket)
//! stays with the callers, who pass it in as the closures of the waits.

pub mod agent;
pub mod env;
pub mod report;
pub mod wait;

pub use agent::{
    AgentCmd, assert_alive, bench_bin, exited, kill, log_tail, print_last_lines, spawn_logged, stop,
    stop_when_done, terminate,
};
pub use env::{CLUSTER_ENV_FILE, EnvFile, MAIN_ENV_FILE, env_file};
pub use wait::{poll_until, wait_for, wait_until};
