//! The `crilet` binary: `crilet run` is the node agent; `crilet preflight` checks the node with
//! the same settings; every other subcommand is a client of its control socket (or reads the
//! log files).

use clap::{Parser, Subcommand};

#[path = "app/config.rs"]
mod config;
#[path = "app/run.rs"]
mod run;

use config::RunArgs;
use run::run_agent;
use tracing::error;

#[derive(Parser)]
#[command(
    name = "crilet",
    version,
    about = "A kubelet-faithful node agent for static pods on containerd (CRI)"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the node agent.
    Run(RunArgs),
    /// Check the node before running the agent (same flags as `run`); exits 1 if a check fails.
    Preflight(RunArgs),
    /// Check manifest files or directories as the agent would, without an agent; exits 1 on
    /// an error.
    Validate(crilet::cli::validate::ValidateArgs),
    #[command(flatten)]
    Client(crilet::cli::CliCommand),
}

/// `crilet preflight`: the node checks against the settings `run` would use; the exit code.
async fn preflight(args: RunArgs) -> i32 {
    let config_file = args.config.clone();
    let report = match args.resolve() {
        Ok(s) => {
            crilet::cli::preflight::run(&crilet::cli::preflight::Config {
                runtime_endpoint: s.runtime_endpoint,
                image_endpoint: s.image_endpoint,
                manifest_dir: s.manifest_dir,
                root_dir: s.root_dir,
                pod_logs_dir: s.pod_logs_dir,
                container_logs_dir: s.container_logs_dir,
                control_socket: s.control_socket,
                kubeconfig: s.cluster.as_ref().map(|c| c.config.kubeconfig.clone()),
                node_name: s.node_name,
                sysctls: s.sysctls,
                config_file,
                kubelet_config: s.kubelet_config,
                cgroup_driver: s.cgroup_driver,
                dns: s.dns,
            })
            .await
        }
        Err(e) => crilet::cli::preflight::Report::config_error(&format!("{e:#}")),
    };
    print!("{}", report.render());
    let _ = std::io::Write::flush(&mut std::io::stdout());
    if report.passed() { 0 } else { 1 }
}

/// jemalloc, not glibc's malloc: less memory held at rest (see Cargo.toml).
#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// How long an idle thread of tokio's blocking pool lives (tokio's default is 10 s). The agent's
/// file work comes in bursts (a start, a removal, a rotation); 110 pods started at once left 28
/// such threads, each holding its stack and allocator cache, resident for the default 10 s
/// (36–43 MiB RSS against ~32 MiB once they had gone, BENCHMARKS.md). A thread costs tens of
/// microseconds to start again, so keeping them longer saves nothing worth the memory.
const BLOCKING_THREAD_KEEP_ALIVE: std::time::Duration = std::time::Duration::from_secs(2);

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_keep_alive(BLOCKING_THREAD_KEEP_ALIVE)
        .build();
    match runtime {
        Ok(rt) => rt.block_on(agent_main()),
        Err(e) => {
            eprintln!("crilet: cannot start the async runtime: {e}");
            std::process::exit(1);
        }
    }
}

async fn agent_main() {
    {
        use tracing_subscriber::prelude::*;
        let filter = tracing_subscriber::EnvFilter::try_from_default_env()
            .unwrap_or_else(|_| "info,h2=warn,tower=warn,hyper=warn".into());
        let log = tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .with_filter(filter);
        // CRILET_PROFILE=FILE: the span-level profile (the agent's own spans only, never events).
        let profile = crilet::profile::layer().map(|l| {
            l.with_filter(tracing_subscriber::filter::filter_fn(|m| {
                m.is_span() && m.target().starts_with("crilet")
            }))
        });
        tracing_subscriber::registry().with(log).with(profile).init();
    }
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Run(args) => run_agent(args).await,
        Command::Preflight(args) => std::process::exit(preflight(args).await),
        Command::Validate(args) => std::process::exit(crilet::cli::validate::run(&args)),
        Command::Client(cmd) => {
            if let Err(e) = crilet::cli::run(cmd).await {
                crilet::cli::print_error(&e);
                std::process::exit(1);
            }
            Ok(())
        }
    };
    if let Err(e) = result {
        error!("{e:#}");
        eprintln!("crilet: {e:#}");
        std::process::exit(1);
    }
}
