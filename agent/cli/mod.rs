//! The `crilet` client commands (`get`, `describe`, `logs`, `events`, `version`,
//! `set-condition`): each talks to the agent's control socket (`crate::api::connect`) and prints
//! what kubectl would print for the same pods. The printers are pure functions in the sibling
//! modules; this file holds the flags, the command dispatch and the error reporting.
//! `preflight` and `validate` are the exceptions: they work without an agent (see those modules).

mod commands;
mod describe;
mod describe_containers;
mod describe_node;
mod describe_timeline;
mod events;
mod format;
pub mod kubelet_config;
pub(crate) mod logs;
mod output;
mod pods;
pub mod preflight;
mod tabwriter;
pub mod validate;

use std::path::PathBuf;

use k8s_openapi::api::core::v1::Pod;
use tonic::transport::Channel;

pub use crate::logs::LOG_DIRECTORY_ANNOTATION;
use crate::proto::control_client::ControlClient;
use crate::proto::{GetPodRequest, GetPodResponse, PodRef};

/// `--control-socket`'s default (same as `crilet run`'s).
pub const DEFAULT_CONTROL_SOCKET: &str = "/run/crilet/crilet.sock";

/// The client subcommands of `crilet`.
#[derive(clap::Subcommand, Debug)]
pub enum CliCommand {
    /// Display pods (like `kubectl get pods`).
    Get(GetArgs),
    /// Show details of a pod or of the node: its pressure conditions and events (like
    /// `kubectl describe pod`, `kubectl describe node`).
    Describe(DescribeArgs),
    /// Print the logs of a container in a pod (like `kubectl logs`).
    Logs(LogsArgs),
    /// List events (like `kubectl events`).
    Events(EventsArgs),
    /// Print the client and agent versions and the container runtime's.
    Version(VersionArgs),
    /// Set or remove a pod condition that one of the pod's readiness gates names.
    SetCondition(SetConditionArgs),
}

/// Where the agent listens.
#[derive(clap::Args, Debug, Clone)]
pub struct SocketArg {
    /// The agent's control socket [default: the `control-socket` of --config, else
    /// /run/crilet/crilet.sock]
    #[arg(long = "control-socket", env = "CRILET_CONTROL_SOCKET")]
    pub control_socket: Option<PathBuf>,
    /// The agent's config file (`crilet run --config`): its `control-socket` is used when
    /// neither --control-socket nor CRILET_CONTROL_SOCKET is given.
    #[arg(long = "config")]
    pub config: Option<PathBuf>,
}

impl SocketArg {
    /// The socket to dial: --control-socket, then CRILET_CONTROL_SOCKET (clap reads both into
    /// one field, the flag first), then the config file's `control-socket`, then the default.
    pub fn path(&self) -> anyhow::Result<PathBuf> {
        if let Some(p) = &self.control_socket {
            return Ok(p.clone());
        }
        let Some(config) = &self.config else { return Ok(PathBuf::from(DEFAULT_CONTROL_SOCKET)) };
        let text = std::fs::read_to_string(config)
            .map_err(|e| anyhow::anyhow!("reading config {}: {e}", config.display()))?;
        Ok(socket_from_config(&text)
            .map_err(|e| anyhow::anyhow!("config {}: {e}", config.display()))?
            .unwrap_or_else(|| PathBuf::from(DEFAULT_CONTROL_SOCKET)))
    }
}

/// The `control-socket` setting of a `crilet run --config` file, if it has one.
pub fn socket_from_config(text: &str) -> Result<Option<PathBuf>, String> {
    #[derive(serde::Deserialize)]
    struct Config {
        #[serde(rename = "control-socket")]
        control_socket: Option<PathBuf>,
    }
    if text.trim().is_empty() {
        return Ok(None);
    }
    serde_yaml_ng::from_str::<Config>(text).map(|c| c.control_socket).map_err(|e| e.to_string())
}

/// `-o` for `get`.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputFormat {
    Wide,
    Json,
    Yaml,
}

/// `crilet get pods [NAME]`.
#[derive(clap::Args, Debug)]
pub struct GetArgs {
    /// The resource type: `pods` (or `pod`, `po`).
    pub resource: String,
    /// Only this pod.
    pub name: Option<String>,
    /// The namespace.
    #[arg(short, long, default_value = "default")]
    pub namespace: String,
    /// List pods in every namespace.
    #[arg(short = 'A', long)]
    pub all_namespaces: bool,
    /// Output format.
    #[arg(short, long, value_enum)]
    pub output: Option<OutputFormat>,
    #[command(flatten)]
    pub socket: SocketArg,
}

/// `crilet describe pod [NAME]`, `crilet describe node [NAME]`.
#[derive(clap::Args, Debug)]
pub struct DescribeArgs {
    /// The resource type: `pod` (or `pods`, `po`), or `node` (`nodes`, `no`).
    pub resource: String,
    /// The pod (every pod in the namespace when omitted), or the node (this agent's).
    pub name: Option<String>,
    #[arg(short, long, default_value = "default")]
    pub namespace: String,
    #[command(flatten)]
    pub socket: SocketArg,
}

/// `crilet logs POD`.
#[derive(clap::Args, Debug)]
pub struct LogsArgs {
    /// The pod.
    pub pod: String,
    #[arg(short, long, default_value = "default")]
    pub namespace: String,
    /// The container (default: the `kubectl.kubernetes.io/default-container` one, else the first).
    #[arg(short, long)]
    pub container: Option<String>,
    /// Keep printing while the container instance runs.
    #[arg(short, long)]
    pub follow: bool,
    /// Print the logs of the previous instance of the container.
    #[arg(short, long)]
    pub previous: bool,
    /// Lines from the end to print; -1 prints all.
    #[arg(long, default_value_t = -1, allow_negative_numbers = true)]
    pub tail: i64,
    /// Prefix each line with the time the runtime recorded it.
    #[arg(long)]
    pub timestamps: bool,
    #[command(flatten)]
    pub socket: SocketArg,
}

/// `crilet events`.
#[derive(clap::Args, Debug)]
pub struct EventsArgs {
    #[arg(short, long, default_value = "default")]
    pub namespace: String,
    /// Events of every namespace.
    #[arg(short = 'A', long)]
    pub all_namespaces: bool,
    /// Only events about this object (`pod/NAME`).
    #[arg(long = "for", value_name = "pod/NAME")]
    pub for_object: Option<String>,
    /// After listing, keep printing new events.
    #[arg(short, long)]
    pub watch: bool,
    #[command(flatten)]
    pub socket: SocketArg,
}

/// `crilet version`.
#[derive(clap::Args, Debug)]
pub struct VersionArgs {
    /// Print only the client version (do not contact the agent).
    #[arg(long)]
    pub client: bool,
    #[command(flatten)]
    pub socket: SocketArg,
}

/// `crilet set-condition POD TYPE STATUS` or `crilet set-condition POD TYPE --remove`.
#[derive(clap::Args, Debug)]
pub struct SetConditionArgs {
    /// The pod.
    pub pod: String,
    /// The condition type; one of the pod's `spec.readinessGates`.
    #[arg(value_name = "TYPE")]
    pub condition_type: String,
    /// `True`, `False` or `Unknown`.
    #[arg(required_unless_present = "remove", conflicts_with = "remove")]
    pub status: Option<String>,
    /// Machine-readable reason for the condition.
    #[arg(long, default_value = "")]
    pub reason: String,
    /// Human-readable message.
    #[arg(long, default_value = "")]
    pub message: String,
    /// Remove the condition instead.
    #[arg(long)]
    pub remove: bool,
    #[arg(short, long, default_value = "default")]
    pub namespace: String,
    #[command(flatten)]
    pub socket: SocketArg,
}

/// Runs one client command.
pub async fn run(cmd: CliCommand) -> anyhow::Result<()> {
    match cmd {
        CliCommand::Get(a) => commands::get(a).await,
        CliCommand::Describe(a) => commands::describe(a).await,
        CliCommand::Logs(a) => logs::run(a).await,
        CliCommand::Events(a) => events::run(a).await,
        CliCommand::Version(a) => commands::version(a).await,
        CliCommand::SetCondition(a) => commands::set_condition(a).await,
    }
}

/// Prints a failed command's error to stderr as kubectl does: `Error from server (Reason): ...`
/// for what the agent refused, `error: ...` (with its causes) for everything else. `main` calls
/// this and exits with status 1.
pub fn print_error(err: &anyhow::Error) {
    if let Some(e) = err.downcast_ref::<ServerError>() {
        eprintln!("{e}");
        return;
    }
    // tonic nests some io errors twice; print each cause once.
    let mut causes: Vec<String> = Vec::new();
    for cause in err.chain().map(ToString::to_string) {
        if causes.last() != Some(&cause) {
            causes.push(cause);
        }
    }
    eprintln!("error: {}", causes.join(": "));
}

/// A request the agent answered with a refusal, printed like kubectl prints API errors.
#[derive(Debug, thiserror::Error)]
#[error("Error from server ({reason}): {message}")]
pub struct ServerError {
    /// The Kubernetes status reason (`NotFound`, `BadRequest`).
    pub reason: &'static str,
    pub message: String,
}

impl ServerError {
    pub(crate) fn bad_request(message: String) -> Self {
        Self { reason: "BadRequest", message }
    }

    pub(crate) fn is_not_found(&self) -> bool {
        self.reason == "NotFound"
    }
}

/// The result of one control API call, with refusals turned into [`ServerError`]s.
pub(crate) fn call<T>(result: Result<T, tonic::Status>, what: &str) -> anyhow::Result<T> {
    result.map_err(|status| {
        let reason = match status.code() {
            tonic::Code::NotFound => "NotFound",
            tonic::Code::InvalidArgument | tonic::Code::FailedPrecondition => "BadRequest",
            _ => return anyhow::anyhow!("{what} failed: {}: {}", status.code(), status.message()),
        };
        ServerError { reason, message: status.message().to_string() }.into()
    })
}

/// `GetPod`, with the pod decoded.
pub(crate) async fn get_pod(
    client: &mut ControlClient<Channel>,
    namespace: &str,
    name: &str,
) -> anyhow::Result<(Pod, GetPodResponse)> {
    let request =
        GetPodRequest { pod: Some(PodRef { namespace: namespace.to_string(), name: name.to_string() }) };
    let response = call(client.get_pod(request).await, "get pod")?.into_inner();
    let json = response.pod.as_ref().map_or("", |p| p.pod_json.as_str());
    let pod = serde_json::from_str(json)
        .map_err(|e| anyhow::anyhow!("the agent sent pod {name} as invalid JSON: {e}"))?;
    Ok((pod, response))
}
