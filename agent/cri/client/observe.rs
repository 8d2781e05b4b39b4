//! Reading the runtime's state: lists, a pod's full state (with the status cache), one object's
//! status.

use super::*;

impl CriClient {
    /// The runtime's running containers (list view), of every pod.
    pub async fn running_containers(&self) -> Result<Vec<api::Container>, CriError> {
        let mut c = self.runtime.clone();
        let filter = api::ContainerFilter {
            state: Some(api::ContainerStateValue { state: api::ContainerState::ContainerRunning as i32 }),
            ..Default::default()
        };
        Ok(self
            .call(
                "ListContainers",
                "running containers",
                CALL_TIMEOUT,
                c.list_containers(req(api::ListContainersRequest { filter: Some(filter) }, CALL_TIMEOUT)),
            )
            .await?
            .containers)
    }

    /// Every sandbox and container the runtime has that carries `label` (used by the PLEG
    /// relist and to find orphans): (sandboxes, containers) as the cheap list views.
    pub async fn list_all(
        &self,
        label: Option<(&str, &str)>,
    ) -> Result<(Vec<api::PodSandbox>, Vec<api::Container>), CriError> {
        let selector: HashMap<String, String> =
            label.map(|(k, v)| HashMap::from([(k.to_string(), v.to_string())])).unwrap_or_default();
        let (mut sc, mut cc) = (self.runtime.clone(), self.runtime.clone());
        // Both lists at once: they are independent, and every sync waits for the pair.
        let sandboxes = self.call(
            "ListPodSandbox",
            "all pods",
            CALL_TIMEOUT,
            sc.list_pod_sandbox(req(
                api::ListPodSandboxRequest {
                    filter: Some(api::PodSandboxFilter {
                        label_selector: selector.clone(),
                        ..Default::default()
                    }),
                },
                CALL_TIMEOUT,
            )),
        );
        let containers = self.call(
            "ListContainers",
            "all pods",
            CALL_TIMEOUT,
            cc.list_containers(req(
                api::ListContainersRequest {
                    filter: Some(api::ContainerFilter { label_selector: selector, ..Default::default() }),
                },
                CALL_TIMEOUT,
            )),
        );
        // Both answers are awaited, not the first error only: a call dropped half-way would be
        // missing from kubelet_runtime_operations_* (counted when it ends).
        let (sandboxes, containers) = futures::future::join(sandboxes, containers).await;
        Ok((sandboxes?.items, containers?.containers))
    }

    /// Every sandbox and container, decoded only as far as the relist needs (`brief.rs`): the
    /// same two list calls as [`CriClient::list_all`], at a fraction of the decoding.
    pub async fn list_brief(&self) -> Result<RuntimeBrief, CriError> {
        let sandboxes = self.call(
            "ListPodSandbox",
            "all pods",
            CALL_TIMEOUT,
            unary_as::<_, BriefSandboxes>(
                self.runtime_channel.clone(),
                "ListPodSandbox",
                "/runtime.v1.RuntimeService/ListPodSandbox",
                api::ListPodSandboxRequest::default(),
            ),
        );
        let containers = self.call(
            "ListContainers",
            "all pods",
            CALL_TIMEOUT,
            unary_as::<_, BriefContainers>(
                self.runtime_channel.clone(),
                "ListContainers",
                "/runtime.v1.RuntimeService/ListContainers",
                api::ListContainersRequest::default(),
            ),
        );
        let (sandboxes, containers) = futures::future::join(sandboxes, containers).await;
        let (sandboxes, containers) = (sandboxes?, containers?);
        Ok(RuntimeBrief { sandboxes: sandboxes.into_briefs(), containers: containers.into_briefs() })
    }

    /// Full state of one pod UID (R1.15): sandboxes and containers with their statuses, newest
    /// first. Objects that vanish between list and status are skipped. The statuses are those
    /// last read while the lists show the pod's objects unchanged (`status_cache.rs`).
    pub async fn observe(&self, uid: &str) -> Result<ObservedPod, CriError> {
        let since = self.statuses.as_ref().map(|c| c.generation());
        let (sandboxes, containers) = self.list_all(Some((keys::POD_UID, uid))).await?;
        let listed = Listed::new(&sandboxes, &containers);
        let mut observed = ObservedPod { uid: uid.to_string(), ..Default::default() };
        if let Some((sandboxes, containers)) = self.statuses.as_ref().and_then(|c| c.reuse(uid, &listed)) {
            observed.sandboxes = sandboxes;
            observed.containers = containers;
            return Ok(observed);
        }
        // Only what can really have been removed since the list (a not-ready sandbox, an exited
        // container) is skipped on NotFound; for a ready sandbox or a live container it is an
        // error, and the sync is retried: dropping it would start a second copy of it.
        // The statuses are asked for all at once (a pod's sync waits for the slowest, not the sum).
        let sandbox_statuses =
            futures::future::join_all(sandboxes.iter().map(|sb| self.sandbox_status(&sb.id)));
        let container_statuses = futures::future::join_all(
            containers.iter().map(|ct| self.container_status(&ct.id, &ct.pod_sandbox_id)),
        );
        let (sandbox_statuses, container_statuses) =
            futures::future::join(sandbox_statuses, container_statuses).await;
        for (sb, r) in sandboxes.iter().zip(sandbox_statuses) {
            match r {
                Ok(s) => observed.sandboxes.push(s),
                Err(e) if e.is_not_found() && sb.state != api::PodSandboxState::SandboxReady as i32 => {}
                Err(e) => return Err(e),
            }
        }
        for (ct, r) in containers.iter().zip(container_statuses) {
            match r {
                Ok(c) => observed.containers.push(c),
                Err(e) if e.is_not_found() && ct.state == api::ContainerState::ContainerExited as i32 => {}
                Err(e) => return Err(e),
            }
        }
        observed.sandboxes.sort_by_key(|s| std::cmp::Reverse(s.created_at));
        observed.containers.sort_by_key(|c| std::cmp::Reverse(c.created_at));
        if let (Some(cache), Some(since)) = (&self.statuses, since) {
            cache.keep(since, listed, &observed);
        }
        Ok(observed)
    }

    /// Where the status cache stands (for [`CriClient::keep_statuses`]); `None` without one.
    pub fn statuses_generation(&self) -> Option<u64> {
        self.statuses.as_ref().map(|c| c.generation())
    }

    /// Keeps `observed`, the whole of its pod as this agent's own status calls made since
    /// `since` ([`CriClient::statuses_generation`]) read it (a sync that created and started
    /// it), for the next observation to reuse while the lists show every object of it in the
    /// state its status gave: the runtime's events of those starts then cost lists only.
    pub fn keep_statuses(&self, since: Option<u64>, mut observed: ObservedPod) {
        if let (Some(cache), Some(since)) = (&self.statuses, since) {
            // Newest first, as `observe` returns them.
            observed.sandboxes.sort_by_key(|s| std::cmp::Reverse(s.created_at));
            observed.containers.sort_by_key(|c| std::cmp::Reverse(c.created_at));
            cache.keep(since, Listed::of(&observed), &observed);
        }
    }

    pub async fn sandbox_status(&self, id: &str) -> Result<ObservedSandbox, CriError> {
        let mut c = self.runtime.clone();
        let r = self
            .call(
                "PodSandboxStatus",
                id,
                CALL_TIMEOUT,
                c.pod_sandbox_status(req(
                    api::PodSandboxStatusRequest { pod_sandbox_id: id.to_string(), verbose: false },
                    CALL_TIMEOUT,
                )),
            )
            .await?;
        let status = r.status.ok_or_else(|| CriError::NotFound {
            op: "PodSandboxStatus",
            target: id.into(),
            kind: "status",
        })?;
        Ok(sandbox_from_status(&status))
    }

    pub async fn container_status(&self, id: &str, sandbox_id: &str) -> Result<ObservedContainer, CriError> {
        let mut c = self.runtime.clone();
        let r = self
            .call(
                "ContainerStatus",
                id,
                CALL_TIMEOUT,
                c.container_status(req(
                    api::ContainerStatusRequest { container_id: id.to_string(), verbose: false },
                    CALL_TIMEOUT,
                )),
            )
            .await?;
        let status = r.status.ok_or_else(|| CriError::NotFound {
            op: "ContainerStatus",
            target: id.into(),
            kind: "status",
        })?;
        Ok(container_from_status(&status, sandbox_id))
    }
}
