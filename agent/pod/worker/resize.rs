//! In-place resize in the worker (KEP-1287): accept, defer or refuse a new request against the
//! node's room, actuate the allocation in the kubelet's order (memory before cpu, the pod
//! cgroup raised before the containers and lowered after them, decreases before increases),
//! and report it (conditions, events, `resources`/`allocatedResources`).

use k8s_openapi::api::core::v1::ContainerStatus;

use super::persist::allocation_path;
use super::*;
use crate::cgroup::CgroupName;
use crate::pod::pod_cgroup;
use crate::pod::resize::{
    self, Actions, Allocation, Amounts, ContainerUpdate, Decision, IN_PROGRESS, PENDING, REASON_DEFERRED,
    REASON_ERROR, REASON_INFEASIBLE, Room,
};
use crate::pod::spec::pod_cgroup_name;

/// How soon a deferred resize or a failed actuation is tried again.
const RESIZE_RETRY_NS: i64 = 5_000_000_000;
/// How soon a pod whose resize was just actuated is looked at again.
const RESIZE_CHECK_NS: i64 = 500_000_000;

/// A resize's state in the worker.
#[derive(Debug, Default)]
pub(super) struct ResizeState {
    /// What was accepted (loaded from the pod's dir, or admitted at the first sync).
    pub alloc: Option<Allocation>,
    /// `PodResizePending`: (reason, message, since).
    pending: Option<(String, String, jiff::Timestamp)>,
    /// `PodResizeInProgress`: since, and the actuation error if the last try failed.
    progress: Option<(jiff::Timestamp, Option<String>)>,
    /// The allocation is saved under the pod's dir (which exists once the sandbox does).
    saved: bool,
    /// The pod as it runs, for the spec (by pointer) it was made from: a sync whose spec has
    /// not changed (nearly all of them) neither decides nor copies anything.
    running: Option<(Arc<Pod>, Arc<Pod>)>,
    /// Whether the node's requests were last registered for a finished pod.
    finished: Option<bool>,
}

impl Worker {
    /// The pod as it runs: the spec with the allocation applied. A spec that asks for other
    /// resources than allocated is decided first (accepted, deferred or infeasible). Returns it
    /// with when to come back (a deferred resize is retried).
    pub(super) async fn resize_admit(&mut self) -> (Arc<Pod>, Option<i64>) {
        let spec = self.desired.pod.clone();
        let retrying = self.tracked.resize.pending.as_ref().is_some_and(|(r, _, _)| r == REASON_DEFERRED);
        if let Some((from, running)) = self.tracked.resize.running.clone() {
            if Arc::ptr_eq(&from, &spec) && !retrying && self.tracked.resize.saved {
                self.register_requests(&running, false);
                return (running, None);
            }
        }
        let alloc = match self.tracked.resize.alloc.take() {
            Some(a) => a,
            None => match tokio::fs::read(allocation_path(&self.ctx.node, &self.desired.uid))
                .await
                .ok()
                .and_then(|b| serde_json::from_slice::<Allocation>(&b).ok())
            {
                Some(a) => {
                    self.tracked.resize.saved = true;
                    a
                }
                // Admission: the pod runs with what it asks for.
                None => Allocation::of(&spec),
            },
        };
        let allocated = alloc.apply(&spec);
        let (cpu, memory) = crate::node::allocatable();
        let others = self.ctx.ledger.others(&self.desired.uid);
        let decision = resize::decide(&spec, &allocated, Room { cpu_milli: cpu, memory }, others);
        let mut requeue = None;
        let alloc = match decision {
            Decision::Unchanged => {
                self.tracked.resize.pending = None;
                alloc
            }
            Decision::Accept => {
                let a = Allocation::of(&spec);
                self.tracked.resize.saved = false;
                self.tracked.resize.pending = None;
                self.tracked.resize.progress = Some((jiff::Timestamp::now(), None));
                let text = resize::event_text("started", &spec, None);
                self.ctx.exec.rec.normal(&self.desired.key, None, "ResizeStarted", text);
                a
            }
            Decision::Deferred(message) => {
                self.set_pending(REASON_DEFERRED, message, "ResizeDeferred");
                requeue = Some(now_ns() + RESIZE_RETRY_NS);
                alloc
            }
            Decision::Infeasible(message) => {
                self.set_pending(REASON_INFEASIBLE, message, "ResizeInfeasible");
                alloc
            }
        };
        if !self.tracked.resize.saved {
            self.tracked.resize.saved = self.save_allocation(&alloc).await;
        }
        // Nearly always the spec is what is allocated: then it is the running pod itself, and
        // only a pod under a resize holds a copy of its own.
        let running =
            if alloc.changed(&spec).is_empty() { spec.clone() } else { Arc::new(alloc.apply(&spec)) };
        self.register_requests(&running, true);
        self.tracked.resize.alloc = Some(alloc);
        self.tracked.resize.running = Some((spec, running.clone()));
        (running, requeue)
    }

    /// Tells the node what the pod holds (its requests at the allocation; nothing once it has
    /// finished), when that may have changed.
    fn register_requests(&mut self, running: &Pod, changed: bool) {
        let phase = self.saved.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("");
        let finished = crate::status::is_terminal(phase);
        if !changed && self.tracked.resize.finished == Some(finished) {
            return;
        }
        self.tracked.resize.finished = Some(finished);
        let held = (!finished).then(|| crate::ledger::Held::of(running));
        self.ctx.ledger.set(&self.desired.uid, held);
    }

    fn set_pending(&mut self, reason: &str, message: String, event: &str) {
        let same = self.tracked.resize.pending.as_ref().is_some_and(|(r, m, _)| r == reason && *m == message);
        if same {
            return;
        }
        let text = resize::event_text(&reason.to_lowercase(), &self.desired.pod, Some(&message));
        self.ctx.exec.rec.warning(&self.desired.key, None, event, text);
        self.tracked.resize.pending = Some((reason.to_string(), message, jiff::Timestamp::now()));
    }

    /// A durable write (fsynced): on the blocking pool, awaited.
    async fn save_allocation(&self, a: &Allocation) -> bool {
        let path = allocation_path(&self.ctx.node, &self.desired.uid);
        let saved = crate::checkpoint::write_json_async(path, a).await;
        if let Err(e) = &saved {
            // The pod's dir is made with its sandbox; until then the allocation lives in memory
            // and the next sync saves it.
            debug!(error = %crate::error_chain(e), "saving the allocation failed");
        }
        saved.is_ok()
    }

    /// What each running container has now (by instance ID): what the runtime reports, or its
    /// cgroup for a runtime that reports nothing.
    pub(super) fn actual_resources(
        &self,
        running: &Pod,
        observed: &ObservedPod,
    ) -> BTreeMap<String, Amounts> {
        let name = pod_cgroup_name(running, &self.desired.uid);
        observed
            .containers
            .iter()
            .filter(|c| c.state == ContainerState::Running)
            .filter_map(|c| {
                let a = match &c.resources {
                    Some(l) => Amounts::from_runtime(l),
                    None => {
                        let allocated = resize::resizable(running)
                            .find(|s| s.name == c.name)
                            .map(|s| Amounts::of(s.resources.as_ref()));
                        pod_cgroup::read_container(&self.ctx.cgroups, &name, &c.id, allocated.as_ref())?
                    }
                };
                Some((c.id.clone(), a))
            })
            .collect()
    }

    /// `doPodResizeAction`: the pod cgroup and the containers, memory first then cpu. An error
    /// leaves `PodResizeInProgress` with reason Error (and a `ResizeError` event); the next
    /// sync tries again. Returns when to come back.
    pub(super) async fn resize_actuate(&mut self, running: &Pod, actions: &Actions) -> Option<i64> {
        if actions.is_empty() {
            return None;
        }
        if self.tracked.resize.progress.is_none() {
            // Allocated and actual differ without a resize accepted by this agent: one
            // accepted before a restart, carried on.
            self.tracked.resize.progress = Some((jiff::Timestamp::now(), None));
        }
        match self.do_resize(running, actions).await {
            // Back soon to see the runtime report the new values (upstream's PLEG watch
            // condition polls the same way), which completes the resize.
            Ok(()) => Some(now_ns() + RESIZE_CHECK_NS),
            Err(error) => {
                let said = self.tracked.resize.progress.as_ref().and_then(|(_, e)| e.as_deref())
                    == Some(error.as_str());
                if !said {
                    let text = resize::event_text("error", running, Some(&error));
                    self.ctx.exec.rec.warning(&self.desired.key, None, "ResizeError", text);
                }
                if let Some((_, e)) = self.tracked.resize.progress.as_mut() {
                    *e = Some(error);
                }
                Some(now_ns() + RESIZE_RETRY_NS)
            }
        }
    }

    async fn do_resize(&mut self, running: &Pod, actions: &Actions) -> Result<(), String> {
        let cgroups = self.ctx.cgroups.clone();
        let name = pod_cgroup_name(running, &self.desired.uid);
        let want = resize::pod_cgroup(running);
        let current = cgroups.read_values(cgroups.pod_path(&name)).await?;
        let pod_changes = !actions.restart.is_empty();
        if !actions.memory.is_empty() || pod_changes {
            // Limits cannot be removed (upstream TODO #128675): no limit keeps the current one.
            let new_limit = want.memory_limit.or(current.memory_limit);
            self.check_memory_decrease(&name, &current, new_limit, &actions.memory).await?;
            let (old, new) = (current.memory_limit.unwrap_or(i64::MAX), new_limit.unwrap_or(i64::MAX));
            if new > old {
                cgroups.set_memory_limit(&name, new_limit).await?;
            }
            self.update_containers(&actions.memory, "memory").await?;
            if new < old {
                cgroups.set_memory_limit(&name, new_limit).await?;
            }
        }
        if !actions.cpu.is_empty() || pod_changes {
            let new_quota = want.cpu_quota.or(current.cpu_quota);
            let (old_q, new_q) = (current.cpu_quota.unwrap_or(i64::MAX), new_quota.unwrap_or(i64::MAX));
            // Limits grow before requests, and requests shrink before limits.
            if new_q > old_q {
                cgroups.set_cpu_quota(&name, new_quota).await?;
            }
            if want.cpu_shares > current.cpu_shares {
                cgroups.set_cpu_shares(&name, want.cpu_shares).await?;
            }
            self.update_containers(&actions.cpu, "cpu").await?;
            if want.cpu_shares < current.cpu_shares {
                cgroups.set_cpu_shares(&name, want.cpu_shares).await?;
            }
            if new_q < old_q {
                cgroups.set_cpu_quota(&name, new_quota).await?;
            }
        }
        Ok(())
    }

    /// A memory limit is never lowered below what the pod or the container uses now.
    async fn check_memory_decrease(
        &self,
        pod: &CgroupName,
        current: &crate::pod::resize::PodCgroup,
        new_limit: Option<i64>,
        updates: &[ContainerUpdate],
    ) -> Result<(), String> {
        let mut problems = Vec::new();
        if let Some(limit) = new_limit.filter(|l| current.memory_limit.is_none_or(|c| l < &c)) {
            let usage = self.ctx.cgroups.memory_usage(self.ctx.cgroups.pod_path(pod)).await?;
            if usage >= limit {
                problems.push(format!(
                    "attempting to set pod memory limit ({limit}) below current usage ({usage})"
                ));
            }
        }
        let lowered = |u: &&ContainerUpdate| {
            u.desired.memory_limit > 0
                && (u.current.memory_limit == 0 || u.desired.memory_limit < u.current.memory_limit)
        };
        for u in updates.iter().filter(lowered) {
            let usage = self
                .ctx
                .cgroups
                .memory_usage(self.ctx.cgroups.container_path(pod, &u.id))
                .await
                .map_err(|_| format!("missing container {:?} memory usage", u.name))?;
            if usage >= u.desired.memory_limit {
                problems.push(format!(
                    "attempting to set container {:?} memory limit ({}) below current usage ({usage})",
                    u.name, u.desired.memory_limit
                ));
            }
        }
        match problems.len() {
            0 => Ok(()),
            1 => Err(format!("cannot decrease memory limits: {}", problems[0])),
            _ => Err(format!("cannot decrease memory limits: [{}]", problems.join(", "))),
        }
    }

    /// One `UpdateContainerResources` per container: the resource being resized at its new
    /// value, the other at what the container has now.
    async fn update_containers(&self, updates: &[ContainerUpdate], resource: &str) -> Result<(), String> {
        for u in updates {
            let a = if resource == "memory" {
                Amounts {
                    memory_limit: u.desired.memory_limit,
                    memory_request: u.desired.memory_request,
                    ..u.current
                }
            } else {
                Amounts { cpu_limit: u.desired.cpu_limit, cpu_request: u.desired.cpu_request, ..u.current }
            };
            info!(container = %u.name, resource, "resizing container");
            self.ctx
                .exec
                .cri
                .update_container_resources(&u.id, resize::linux_resources(a))
                .await
                .map_err(|e| format!("updating {} of container {:?}: {e}", resource, u.name))?;
        }
        Ok(())
    }

    /// After a sync's observation: a resize in progress whose allocation every running container
    /// now has is complete.
    pub(super) fn resize_settled(&mut self, running: &Pod, actions: &Actions) {
        if actions.is_empty() && self.tracked.resize.progress.take().is_some() {
            // The status published at the start of this sync still shows it in progress.
            self.acted = true;
            let text = resize::event_text("completed", running, None);
            self.ctx.exec.rec.normal(&self.desired.key, None, "ResizeCompleted", text);
        }
    }

    /// The resize conditions, for the status.
    pub(super) fn resize_conditions(&self) -> Vec<PodCondition> {
        let generation = self.desired.pod.metadata.generation;
        let cond =
            |t: &str, reason: Option<&str>, message: Option<&str>, since: &jiff::Timestamp| PodCondition {
                type_: t.into(),
                status: "True".into(),
                reason: reason.map(str::to_string),
                message: message.map(str::to_string),
                last_transition_time: Some(Time(*since)),
                last_probe_time: None,
                observed_generation: generation,
            };
        let mut out = Vec::new();
        if let Some((reason, message, since)) = &self.tracked.resize.pending {
            out.push(cond(PENDING, Some(reason), Some(message), since));
        }
        if let Some((since, error)) = &self.tracked.resize.progress {
            let reason = error.as_ref().map(|_| REASON_ERROR);
            out.push(cond(IN_PROGRESS, reason, error.as_deref(), since));
        }
        out
    }

    /// `resources` and `allocatedResources` of each container status with a runtime instance,
    /// as upstream reports them: the allocated requests, and the allocated resources with what
    /// the runtime applied in place of cpu/memory while the instance runs.
    pub(super) fn resize_status(&self, statuses: &mut [ContainerStatus], observed: &ObservedPod) {
        let running = match &self.tracked.resize.running {
            Some((_, running)) => running.clone(),
            None => return,
        };
        let Some(spec) = running.spec.as_ref() else { return };
        let name = pod_cgroup_name(&running, &self.desired.uid);
        for st in statuses.iter_mut() {
            let Some(c) = spec
                .containers
                .iter()
                .chain(spec.init_containers.iter().flatten())
                .find(|c| c.name == st.name)
            else {
                continue;
            };
            let Some(instance) = observed.newest(&st.name) else { continue };
            let allocated = c.resources.clone().unwrap_or_default();
            st.allocated_resources = allocated.requests.clone().filter(|r| !r.is_empty());
            let live = instance.state == ContainerState::Running
                && st.state.as_ref().is_some_and(|s| s.running.is_some());
            let actual = live
                .then(|| match &instance.resources {
                    Some(l) => Some(Amounts::from_runtime(l)),
                    None => {
                        let allocated = Amounts::of(c.resources.as_ref());
                        pod_cgroup::read_container(&self.ctx.cgroups, &name, &instance.id, Some(&allocated))
                    }
                })
                .flatten();
            st.resources = Some(if live { resize::status_resources(&allocated, actual) } else { allocated });
        }
    }
}
