//! Publishing the pod's status (computed by `crate::status` from what the runtime shows), and
//! the termination messages it carries (R9.2).

use super::*;

impl Worker {
    pub(super) fn publish(
        &mut self,
        observed: &ObservedPod,
        terminating: bool,
        probe_states: &BTreeMap<String, ProbeState>,
    ) {
        let _span = tracing::trace_span!("publish").entered();
        let ctx = &self.ctx;
        let external = ctx.registry.external_conditions(&self.desired.key);
        if self.saved_conditions.as_deref().unwrap_or_default() != external.as_slice() {
            let path = conditions_path(ctx, &self.desired.uid);
            let written = crate::checkpoint::write_json(&path, &external).is_ok();
            if written {
                self.saved_conditions = Some(external.clone());
            }
        }
        let api_pod = self.desired.source.is_api();
        let mut external = update::with_own_condition(external, self.update.as_ref(), api_pod);
        external
            .retain(|c| c.type_ != crate::pod::resize::PENDING && c.type_ != crate::pod::resize::IN_PROGRESS);
        external.extend(self.resize_conditions());
        let status = compute(&StatusInput {
            desired: &self.desired,
            observed,
            probes: probe_states,
            start_errors: &self.start_errors,
            terminating,
            external_conditions: &external,
            previous: self.status.as_ref(),
            termination_messages: &self.termination_messages,
            host_ip: ctx.node.host_ip.as_deref(),
            now: jiff::Timestamp::now(),
        });
        let mut pod = (*self.desired.pod).clone();
        let annotations = pod.metadata.annotations.get_or_insert_with(Default::default);
        annotations
            .insert(LOG_DIR_ANNOTATION.into(), pod_log_dir(&ctx.node, &self.desired).display().to_string());
        let created = observed
            .sandboxes
            .last()
            .and_then(|s| jiff::Timestamp::from_nanosecond(i128::from(s.created_at)).ok())
            .filter(|t| *t < self.first_seen)
            .unwrap_or(self.first_seen);
        pod.metadata.creation_timestamp = Some(Time(created));
        if terminating {
            pod.metadata.deletion_timestamp = Some(Time(jiff::Timestamp::now()));
            pod.metadata.deletion_grace_period_seconds =
                pod.spec.as_ref().and_then(|s| s.termination_grace_period_seconds);
        }
        let mut status = status;
        for list in [status.container_statuses.as_mut(), status.init_container_statuses.as_mut()]
            .into_iter()
            .flatten()
        {
            self.resize_status(list, observed);
        }
        if self.deadline_exceeded {
            // Upstream's active-deadline handler: the pod fails for good.
            status.phase = Some("Failed".into());
            status.reason = Some("DeadlineExceeded".into());
            status.message = Some("Pod was active on the node longer than the specified deadline".into());
        }
        pod.status = Some(status.clone());
        crate::metrics::get().pod_published(&self.desired.uid, &pod);
        self.ctx.registry.put_pod(
            self.desired.key.clone(),
            PodRecord {
                pod,
                manifest_file: self.desired.source_text(),
                warnings: self.desired.warnings.clone(),
            },
        );
        self.save_status(&status);
        let now = jiff::Timestamp::now();
        for (name, step) in
            crate::timeline::status_steps(&self.desired.pod, self.status.as_ref(), &status, now)
        {
            self.ctx.registry.add_step(&self.desired.key, Some(&name), step);
        }
        self.status = Some(status);
    }

    /// Observes the pod and publishes its status (after actions; errors only delay that to the
    /// next sync).
    pub(super) async fn observe_and_publish(&mut self, terminating: bool) {
        match self.ctx.cri.observe(&self.desired.uid).await {
            Ok(observed) => {
                self.read_termination_messages(&observed);
                let pod = self.desired.pod.clone();
                self.probes.reconcile(&pod, &observed, terminating);
                let (_, probe_states) = self.probes.view();
                self.publish(&observed, terminating, &probe_states);
            }
            Err(e) => debug!(error = %e, "observing the pod after the sync failed; the next sync publishes"),
        }
    }

    /// Publishes the sync's live snapshot with the instance just started spliced in.
    pub(super) async fn publish_started(&mut self, id: &str, sandbox_id: &str) {
        if self.live.is_none() {
            return;
        }
        let started = match self.ctx.cri.container_status(id, sandbox_id).await {
            Ok(c) => c,
            Err(e) => {
                // The snapshot no longer shows the pod as it is: nothing more is planned from it
                // (a start it misses would be made twice).
                self.live = None;
                return debug!(error = %e, "status of the started container; the sync's end publishes");
            }
        };
        let Some(live) = self.live.as_mut() else { return };
        live.containers.retain(|c| c.id != started.id);
        live.containers.insert(0, started);
        let snapshot = live.clone();
        let (_, probe_states) = self.probes.view();
        self.publish(&snapshot, false, &probe_states);
    }

    /// R9.2: termination messages of exited instances, read once per instance.
    pub(super) fn read_termination_messages(&mut self, observed: &ObservedPod) {
        for c in observed.containers.iter().filter(|c| c.state == ContainerState::Exited) {
            if self.termination_messages.contains_key(&c.id) {
                continue;
            }
            let mut msg = c
                .annotations
                .get(crate::pod::spec::TERMINATION_FILE_ANNOTATION)
                .and_then(|f| std::fs::read(f).ok())
                .map(|b| tail_bytes(&b, 4096))
                .unwrap_or_default();
            let fallback =
                c.annotations.get(crate::model::keys::TERMINATION_MESSAGE_POLICY).map(String::as_str)
                    == Some("FallbackToLogsOnError");
            if msg.is_empty() && fallback && c.exit_code != 0 {
                msg = std::fs::read(&c.log_path).map(|b| log_tail(&b, 80, 2048)).unwrap_or_default();
            }
            self.termination_messages.insert(c.id.clone(), msg);
        }
        self.termination_messages.retain(|id, _| observed.containers.iter().any(|c| &c.id == id));
    }
}

/// The last `max` bytes of `b` as text.
pub(super) fn tail_bytes(b: &[u8], max: usize) -> String {
    let start = b.len().saturating_sub(max);
    String::from_utf8_lossy(&b[start..]).to_string()
}

/// R9.2 fallback: the last `lines` lines of a CRI log file's content, at most `max` bytes.
pub(super) fn log_tail(b: &[u8], lines: usize, max: usize) -> String {
    let text = String::from_utf8_lossy(b);
    let content: Vec<String> = text
        .lines()
        .filter_map(|l| {
            let mut parts = l.splitn(4, ' ');
            let (_ts, _stream, tag, msg) =
                (parts.next()?, parts.next()?, parts.next()?, parts.next().unwrap_or(""));
            Some(if tag == "P" { msg.to_string() } else { format!("{msg}\n") })
        })
        .collect();
    let joined: String = content[content.len().saturating_sub(lines)..].concat();
    tail_bytes(joined.as_bytes(), max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    pub(super) fn log_tail_joins_partials_and_bounds() {
        let log = b"2024-01-01T00:00:00Z stdout F one\n2024-01-01T00:00:00Z stderr P tw\n2024-01-01T00:00:00Z stderr F o\n";
        assert_eq!(log_tail(log, 80, 2048), "one\ntwo\n");
        assert_eq!(log_tail(log, 1, 2048), "o\n");
        assert_eq!(log_tail(log, 80, 3), "wo\n");
    }
}
