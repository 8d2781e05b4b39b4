//! One step of an in-place image update per sync (see `pod::update` for the pure parts).

use super::*;

impl Worker {
    /// One step of an in-place update (see `update`): returns the containers to hold and when to
    /// come back.
    pub(super) async fn step_update(
        &mut self,
        observed: &ObservedPod,
        probes: &ProbeResults,
        probe_states: &BTreeMap<String, ProbeState>,
    ) -> (BTreeSet<String>, Option<i64>) {
        let ctx = self.ctx.clone();
        let pod = self.desired.pod.clone();
        let key = self.desired.key.clone();
        let now = now_ns();
        let changed = update::changed_containers(&pod, observed);
        let desired_images: BTreeMap<String, String> = all_containers(&pod)
            .into_iter()
            .map(|(c, _)| (c.name.clone(), c.image.unwrap_or_default()))
            .collect();
        if changed.is_empty() {
            let Some(state) = self.saved.update.as_mut().filter(|u| !u.done) else {
                return (BTreeSet::new(), None);
            };
            // A container edited back to what it runs is no longer part of the update.
            state.images.retain(|n, img| desired_images.get(n) == Some(img));
            for (name, image) in state.images.clone() {
                if let std::collections::btree_map::Entry::Vacant(e) = state.pulled.entry(name) {
                    if let Ok(Some(img)) = ctx.exec.cri.image_id(&image).await {
                        e.insert(PulledImage { id: img.id, repo_digests: img.repo_digests });
                    }
                }
            }
            if update::finished(&pod, observed, state, probe_states) {
                state.done = true;
                state.blocked = None;
                state.transition = jiff::Timestamp::now().to_string();
                info!("in-place update complete");
                ctx.exec.rec.normal(
                    &key,
                    None,
                    "InPlaceUpdated",
                    "In-place update complete: every updated container runs its new image and is ready"
                        .into(),
                );
            }
            self.save_update().await;
            return (BTreeSet::new(), None);
        }

        // Start an update, or fold a newer edit into the one under way (the newest spec wins).
        let fresh = self.saved.update.as_ref().is_none_or(|u| u.done);
        if fresh {
            self.saved.update = Some(UpdateState {
                started_ns: now,
                transition: jiff::Timestamp::now().to_string(),
                ..Default::default()
            });
        }
        let Some(state) = self.saved.update.as_mut() else { return (BTreeSet::new(), None) };
        state.images.retain(|n, img| desired_images.get(n) == Some(img));
        let mut newly: Vec<String> = Vec::new();
        for (name, image) in &changed {
            if state.images.get(name) != Some(image) {
                state.images.insert(name.clone(), image.clone());
                state.pulled.remove(name);
                newly.push(format!("{name}: {image}"));
            }
        }
        if !newly.is_empty() {
            info!(containers = ?newly, "updating container images in place");
            ctx.exec.rec.normal(
                &key,
                None,
                "InPlaceUpdate",
                format!("Updating in place (same sandbox and IP): {}", newly.join(", ")),
            );
            for (name, image) in &changed {
                if update::floating_tag(image) {
                    ctx.exec.rec.warning(&key, Some(name), "FloatingTag", format!("Image \"{image}\" uses a floating tag: an in-place update cannot tell which version will run"));
                }
            }
        }
        let grace_s: i64 = pod
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(update::GRACE_ANNOTATION))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let wait_until = state.started_ns + grace_s.max(0) * 1_000_000_000;
        let waiting = now < wait_until;
        let mut requeue = waiting.then_some(wait_until);
        if !waiting {
            // Pull every new image before stopping anything: a failed pull leaves the old
            // container running.
            let attempt = observed.sandbox().map_or(0, |s| s.attempt);
            let mut blocked: Vec<String> = Vec::new();
            let sb_config = match changed.iter().any(|(name, _)| !state.pulled.contains_key(name)) {
                false => None,
                true => match crate::pod::start::existing_sandbox_config(&ctx.starts, &self.desired, attempt)
                    .await
                {
                    Ok(config) => Some(config),
                    Err(e) => {
                        blocked.push(format!("{}: {}", e.reason, e.message));
                        let at = now + 10_000_000_000;
                        requeue = Some(requeue.map_or(at, |r| r.min(at)));
                        None
                    }
                },
            };
            for (name, image) in &changed {
                let Some(sb_config) = &sb_config else { break };
                if state.pulled.contains_key(name) {
                    continue;
                }
                let Some((spec, _)) = all_containers(&pod).into_iter().find(|(c, _)| &c.name == name) else {
                    continue;
                };
                match ensure_image(&ctx.starts.images, &self.desired, &spec, sb_config, None).await {
                    Ok(_) => match ctx.exec.cri.image_id(image).await {
                        Ok(Some(img)) => {
                            state.pull_errors.remove(image);
                            let pulled = PulledImage { id: img.id, repo_digests: img.repo_digests };
                            if update::digest_matches(image, &pulled) {
                                state.pulled.insert(name.clone(), pulled);
                            } else {
                                blocked.push(format!(
                                    "image {image} does not carry the digest it names (runtime has {})",
                                    pulled.id
                                ));
                            }
                        }
                        _ => blocked.push(format!("image {image} not present after pull")),
                    },
                    Err(e) => {
                        let why = format!("{}: {}", e.reason, e.message);
                        // No pull is tried while the image back-off lasts: keep naming the last
                        // pull's error, or the condition would only say "Back-off pulling image".
                        let why = match state.pull_errors.get(image) {
                            Some(last) if e.reason == "ImagePullBackOff" => format!("{why}: {last}"),
                            _ => {
                                state.pull_errors.insert(image.clone(), why.clone());
                                why
                            }
                        };
                        blocked.push(why);
                        let at = now + 10_000_000_000;
                        requeue = Some(requeue.map_or(at, |r| r.min(at)));
                    }
                }
            }
            let images = &state.images;
            state.pull_errors.retain(|image, _| images.values().any(|i| i == image));
            state.blocked = (!blocked.is_empty()).then(|| blocked.join("; "));
        }
        let pulled: BTreeSet<String> = state.pulled.keys().cloned().collect();
        let held = update::held(&pod, observed, &changed, &pulled, waiting, probes);
        self.save_update().await;
        (held, requeue)
    }
}
