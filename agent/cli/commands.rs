//! The request/print glue of `get`, `describe`, `version` and `set-condition` (logs and events,
//! which stream, have their own modules).

use std::io::Write;

use anyhow::{Context, bail};
use jiff::Timestamp;
use jiff::tz::TimeZone;
use serde_json::Value;

use super::describe::{DescribeInput, describe_pod};
use super::events::EventView;
use super::output::{pod_list, to_json, to_yaml};
use super::pods::{pod_row, render_pod_table, runtime_warning};
use super::{DescribeArgs, GetArgs, OutputFormat, SetConditionArgs, VersionArgs, call, get_pod};
use crate::proto::{
    GetNodeRequest, ListPodsRequest, PodRef, SetConditionRequest, VersionRequest, VersionResponse,
};

/// kubectl's names for the one resource crilet serves.
fn check_resource(resource: &str) -> anyhow::Result<()> {
    match resource {
        "pods" | "pod" | "po" => Ok(()),
        other => bail!("the server doesn't have a resource type {other:?}"),
    }
}

fn print(text: &str) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes()).and_then(|()| out.flush()).context("cannot write to stdout")
}

fn no_resources(all_namespaces: bool, namespace: &str) {
    match all_namespaces {
        true => eprintln!("No resources found"),
        false => eprintln!("No resources found in {namespace} namespace."),
    }
}

pub(super) async fn get(a: GetArgs) -> anyhow::Result<()> {
    check_resource(&a.resource)?;
    if a.all_namespaces && a.name.is_some() {
        bail!("a resource cannot be retrieved by name across all namespaces");
    }
    let mut client = crate::api::connect(&a.socket.path()?).await?;
    let (pods_json, runtime): (Vec<String>, _) = match &a.name {
        Some(name) => {
            let (_, response) = get_pod(&mut client, &a.namespace, name).await?;
            (response.pod.map(|p| p.pod_json).into_iter().collect(), response.runtime)
        }
        None => {
            let namespace = if a.all_namespaces { String::new() } else { a.namespace.clone() };
            let response = call(client.list_pods(ListPodsRequest { namespace }).await, "list pods")?;
            let response = response.into_inner();
            (response.pods.into_iter().map(|p| p.pod_json).collect(), response.runtime)
        }
    };
    if let Some(warning) = runtime_warning(runtime.as_ref(), Timestamp::now()) {
        eprintln!("{warning}");
    }
    let values = pods_json
        .iter()
        .map(|j| serde_json::from_str::<Value>(j))
        .collect::<Result<Vec<_>, _>>()
        .context("the agent sent a pod as invalid JSON")?;
    let single = a.name.is_some();
    match a.output {
        Some(format @ (OutputFormat::Json | OutputFormat::Yaml)) => {
            // kubectl prints a named object bare and anything else as a List.
            let value = match (single, values.as_slice()) {
                (true, [one]) => one.clone(),
                _ => pod_list(values),
            };
            let text = if format == OutputFormat::Json { to_json(&value)? } else { to_yaml(&value)? };
            print(&text)
        }
        wide => {
            if values.is_empty() {
                no_resources(a.all_namespaces, &a.namespace);
                return Ok(());
            }
            let now = Timestamp::now();
            let rows = values
                .into_iter()
                .map(|v| serde_json::from_value(v).map(|p| pod_row(&p, now)))
                .collect::<Result<Vec<_>, _>>()
                .context("the agent sent a pod that is not a valid v1 Pod")?;
            print(&render_pod_table(&rows, a.all_namespaces, wide == Some(OutputFormat::Wide)))
        }
    }
}

pub(super) async fn describe(a: DescribeArgs) -> anyhow::Result<()> {
    if matches!(a.resource.as_str(), "node" | "nodes" | "no") {
        return describe_node(a).await;
    }
    check_resource(&a.resource)?;
    let mut client = crate::api::connect(&a.socket.path()?).await?;
    let names = match &a.name {
        Some(name) => vec![name.clone()],
        None => {
            let request = ListPodsRequest { namespace: a.namespace.clone() };
            let pods = call(client.list_pods(request).await, "list pods")?.into_inner().pods;
            let mut names = Vec::new();
            for p in pods {
                let pod: k8s_openapi::api::core::v1::Pod =
                    serde_json::from_str(&p.pod_json).context("the agent sent a pod as invalid JSON")?;
                names.extend(pod.metadata.name);
            }
            names
        }
    };
    if names.is_empty() {
        no_resources(false, &a.namespace);
        return Ok(());
    }
    let tz = TimeZone::system();
    let mut texts = Vec::new();
    for name in names {
        let (pod, response) = get_pod(&mut client, &a.namespace, &name).await?;
        let record = response.pod.unwrap_or_default();
        let events: Vec<EventView> = response.events.iter().map(EventView::from).collect();
        let input = DescribeInput {
            pod: &pod,
            manifest_file: &record.manifest_file,
            warnings: &record.warnings,
            events: &events,
            runtime: response.runtime.as_ref(),
            timeline: &response.timeline,
        };
        texts.push(describe_pod(&input, Timestamp::now(), &tz));
    }
    print(&texts.join("\n\n"))
}

/// `crilet describe node [NAME]`: the agent's node (a name that is not its name is not found,
/// as kubectl says of a node the API server does not have).
async fn describe_node(a: DescribeArgs) -> anyhow::Result<()> {
    let mut client = crate::api::connect(&a.socket.path()?).await?;
    let node = call(client.get_node(GetNodeRequest {}).await, "get the node")?.into_inner();
    if let Some(name) = a.name.as_deref().filter(|n| *n != node.name) {
        bail!("nodes {name:?} not found (this agent's node is {:?})", node.name);
    }
    print(&super::describe_node::describe_node(&node, Timestamp::now(), &TimeZone::system()))
}

/// `crilet version`'s text: the client's version, then what the agent reports.
pub(crate) fn version_text(client: &str, server: Option<&VersionResponse>) -> String {
    let mut text = format!("Client Version: {client}\n");
    if let Some(v) = server {
        text.push_str(&format!(
            "Server Version: {}\nRuntime Name: {}\nRuntime Version: {}\nRuntime API Version: {}\n\
             Runtime Changes: {} ({} CRI events received)\n",
            v.crilet_version,
            v.runtime_name,
            v.runtime_version,
            v.runtime_api_version,
            v.pleg_mode,
            v.events_received
        ));
    }
    text
}

pub(super) async fn version(a: VersionArgs) -> anyhow::Result<()> {
    let client_version = env!("CARGO_PKG_VERSION");
    if a.client {
        return print(&version_text(client_version, None));
    }
    // Like kubectl: the client version even when the server cannot be reached, then the error.
    let server = async {
        let mut client = crate::api::connect(&a.socket.path()?).await?;
        call(client.version(VersionRequest {}).await, "version").map(|r| r.into_inner())
    }
    .await;
    print(&version_text(client_version, server.as_ref().ok()))?;
    server.map(|_| ())
}

pub(super) async fn set_condition(a: SetConditionArgs) -> anyhow::Result<()> {
    let status = if a.remove { String::new() } else { a.status.clone().unwrap_or_default() };
    let request = SetConditionRequest {
        pod: Some(PodRef { namespace: a.namespace.clone(), name: a.pod.clone() }),
        r#type: a.condition_type.clone(),
        status: status.clone(),
        reason: a.reason.clone(),
        message: a.message.clone(),
    };
    let mut client = crate::api::connect(&a.socket.path()?).await?;
    call(client.set_condition(request).await, "set condition")?;
    match a.remove {
        true => print(&format!("pod/{} condition {} removed\n", a.pod, a.condition_type)),
        false => print(&format!("pod/{} condition {} set to {status}\n", a.pod, a.condition_type)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_cases() {
        let server = VersionResponse {
            crilet_version: "0.1.0".into(),
            runtime_name: "containerd".into(),
            runtime_version: "1.6.20~ds1".into(),
            runtime_api_version: "v1".into(),
            pleg_mode: "events".into(),
            events_received: 7,
        };
        assert_eq!(version_text("0.1.0", None), "Client Version: 0.1.0\n");
        assert_eq!(
            version_text("0.1.0", Some(&server)),
            "Client Version: 0.1.0\nServer Version: 0.1.0\nRuntime Name: containerd\n\
             Runtime Version: 1.6.20~ds1\nRuntime API Version: v1\n\
             Runtime Changes: events (7 CRI events received)\n"
        );
    }

    #[test]
    fn resource_names() {
        assert!(check_resource("pods").is_ok() && check_resource("po").is_ok());
        let err = check_resource("deployments").expect_err("not served");
        assert_eq!(err.to_string(), "the server doesn't have a resource type \"deployments\"");
    }
}
