//! `crilet logs`: reads the CRI log files the runtime writes (`<log dir>/<container>/<N>.log`, one
//! file per container instance) the way the kubelet serves them: which instance (current or
//! `--previous`) follows the kubelet's rules, lines are de-framed from the CRI format, and `-f`
//! follows the running instance until it exits. The pod comes from the agent (`GetPod`).

use std::io;
use std::time::Duration;

use anyhow::Context;
use k8s_openapi::api::core::v1::Pod;

use super::format::s;
use super::{LogsArgs, ServerError, get_pod};

use crate::logs::{
    Follower, LogFile, LogPrinter, container_status, log_directory, log_files, select_log_file, tail_offset,
};

/// kubectl's annotation naming the container `logs` picks by default.
const DEFAULT_CONTAINER_ANNOTATION: &str = "kubectl.kubernetes.io/default-container";
const POLL: Duration = Duration::from_millis(200);
/// Every this many polls, ask the agent whether the followed instance still runs.
const STATUS_EVERY: u32 = 5;

/// Picks the container like kubectl: the named one, else the default-container annotation,
/// else the first, with kubectl's notices for stderr.
pub(crate) fn pick_container(pod: &Pod, requested: Option<&str>) -> Result<(String, Vec<String>), String> {
    let spec = pod.spec.clone().unwrap_or_default();
    let pod_name = s(&pod.metadata.name);
    let init = spec.init_containers.clone().unwrap_or_default();
    let exists = |n: &str| spec.containers.iter().chain(&init).any(|c| c.name == n);
    if let Some(name) = requested {
        return match exists(name) {
            true => Ok((name.to_string(), Vec::new())),
            false => Err(format!("container {name} is not valid for pod {pod_name}")),
        };
    }
    let mut notices = Vec::new();
    if let Some(name) = pod.metadata.annotations.as_ref().and_then(|a| a.get(DEFAULT_CONTAINER_ANNOTATION)) {
        if exists(name) {
            return Ok((name.clone(), notices));
        }
        notices.push(format!("Default container name {name:?} not found in pod {pod_name}"));
    }
    let Some(first) = spec.containers.first() else {
        return Err(format!("pod {pod_name} does not have any containers"));
    };
    if spec.containers.len() > 1 || !init.is_empty() {
        let names: Vec<String> = spec
            .containers
            .iter()
            .map(|c| c.name.clone())
            .chain(init.iter().map(|c| format!("{} (init)", c.name)))
            .collect();
        notices.push(format!("Defaulted container {:?} out of: {}", first.name, names.join(", ")));
    }
    Ok((first.name.clone(), notices))
}

pub(super) async fn run(args: LogsArgs) -> anyhow::Result<()> {
    match logs(args).await {
        // `crilet logs ... | head` is not an error.
        Err(e) if e.downcast_ref::<io::Error>().is_some_and(|e| e.kind() == io::ErrorKind::BrokenPipe) => {
            Ok(())
        }
        r => r,
    }
}

async fn logs(args: LogsArgs) -> anyhow::Result<()> {
    let mut client = crate::api::connect(&args.socket.path()?).await?;
    let (pod, _) = get_pod(&mut client, &args.namespace, &args.pod).await?;
    let (name, notices) =
        pick_container(&pod, args.container.as_deref()).map_err(ServerError::bad_request)?;
    for notice in notices {
        eprintln!("{notice}");
    }
    let status = container_status(&pod, &name).cloned();
    let dir = log_directory(&pod).join(&name);
    let files = log_files(&dir).with_context(|| format!("cannot list log files in {}", dir.display()))?;
    let n = select_log_file(&files, status.as_ref(), args.previous, &name, &args.pod)
        .map_err(ServerError::bad_request)?;
    let path = dir.join(format!("{n}.log"));
    let mut file =
        LogFile::open(&path).with_context(|| format!("cannot open log file {}", path.display()))?;
    let start = match usize::try_from(args.tail) {
        Ok(lines) => tail_offset(file.reader.get_mut(), lines)?,
        Err(_) => 0,
    };
    file.seek(start)?;
    let mut printer = LogPrinter::new(args.timestamps);
    // kubectl follows only the instance that is running now, and only until it exits.
    let running_id = status
        .filter(|st| st.state.as_ref().is_some_and(|s| s.running.is_some()))
        .filter(|st| i64::from(st.restart_count) == i64::from(n))
        .and_then(|st| st.container_id);
    let follow_id = running_id.filter(|_| args.follow && !args.previous);
    // Without -f only the current file is read, as the kubelet serves it: rotated files are not.
    file.drain(&mut printer, follow_id.is_none(), &mut io::stdout().lock())?;
    let Some(id) = follow_id else { return Ok(()) };

    let mut follower = Follower::new(path, file);
    let mut polls = 0;
    let mut stopping = false;
    loop {
        tokio::time::sleep(POLL).await;
        polls += 1;
        if !stopping && polls % STATUS_EVERY == 0 {
            stopping = !still_running(&mut client, &args, &name, &id).await;
        }
        let grew = follower.poll(&mut printer, &mut io::stdout().lock())?;
        if stopping && !grew {
            follower.finish(&mut printer, &mut io::stdout().lock())?;
            return Ok(());
        }
    }
}

/// Whether the followed instance (`id`) is still the container's running one. An agent that
/// does not answer is no reason to stop: the container keeps running without it.
async fn still_running(
    client: &mut crate::proto::control_client::ControlClient<tonic::transport::Channel>,
    args: &LogsArgs,
    name: &str,
    id: &str,
) -> bool {
    match get_pod(client, &args.namespace, &args.pod).await {
        Ok((pod, _)) => container_status(&pod, name).is_some_and(|st| {
            st.container_id.as_deref() == Some(id) && st.state.as_ref().is_some_and(|s| s.running.is_some())
        }),
        Err(e) => e.downcast_ref::<ServerError>().is_none_or(|e| !e.is_not_found()),
    }
}

#[cfg(test)]
#[path = "logs_tests.rs"]
mod tests;
