//! One probe of one container instance: a timer, an attempt per period, thresholds, events,
//! and a wake of the pod worker whenever the settled result changes (R6.2–R6.7).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Probe};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::check::{Attempt, Target, run};
use super::tracker::{Outcome, ProbeKind, ProbeResult, Tracker};
use crate::context::{ProbeContext, now_ns};
use crate::model::PodKey;

/// Results of every probe of a pod, by (container ID, kind).
pub type Results = Arc<Mutex<HashMap<(String, ProbeKind), ProbeResult>>>;

/// Internal errors are retried this many times within one tick (R6.4).
const MAX_TRIES: usize = 3;

pub struct ProbeTask {
    pub ctx: Arc<ProbeContext>,
    pub key: PodKey,
    pub kind: ProbeKind,
    pub probe: Probe,
    pub spec: Arc<Container>,
    pub container_id: String,
    pub started_at_ns: i64,
    pub pod_ip: Option<String>,
    pub initial: ProbeResult,
    pub jitter: bool,
    pub results: Results,
    pub wake: Arc<Notify>,
    /// This probe's `prober_probe_*` series.
    pub metrics: crate::metrics::ProbeSeries,
}

impl ProbeTask {
    fn result_of(&self, kind: ProbeKind) -> Option<ProbeResult> {
        self.results.lock().ok()?.get(&(self.container_id.clone(), kind)).copied()
    }

    fn set(&self, r: ProbeResult) {
        if let Ok(mut m) = self.results.lock() {
            m.insert((self.container_id.clone(), self.kind), r);
        }
        self.wake.notify_one();
    }

    pub async fn run(self, cancel: CancellationToken) {
        let p = &self.probe;
        let period = Duration::from_secs(u64::try_from(p.period_seconds.unwrap_or(10).max(1)).unwrap_or(10));
        let initial_delay = i64::from(p.initial_delay_seconds.unwrap_or(0).max(0)) * 1_000_000_000;
        if self.jitter {
            // R6.2: spread probes of a freshly started agent over one period.
            let d = period.mul_f64(fastrand::f64());
            tokio::select! { _ = cancel.cancelled() => return, _ = tokio::time::sleep(d) => {} }
        }
        let mut tracker = Tracker::new(
            self.initial,
            u32::try_from(p.success_threshold.unwrap_or(1)).unwrap_or(1),
            u32::try_from(p.failure_threshold.unwrap_or(3)).unwrap_or(3),
        );
        let mut tick = tokio::time::interval(period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let name = self.spec.name.clone();
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tick.tick() => {}
            }
            if self.kind == ProbeKind::Startup && tracker.result() == ProbeResult::Success {
                return;
            }
            // R6.3: readiness and liveness wait until the container has started.
            if self.kind != ProbeKind::Startup
                && self.spec.startup_probe.is_some()
                && self.result_of(ProbeKind::Startup) != Some(ProbeResult::Success)
            {
                continue;
            }
            if now_ns() - self.started_at_ns < initial_delay {
                continue;
            }
            let target = Target {
                cri: &*self.ctx.exec.cri,
                container_id: &self.container_id,
                spec: &self.spec,
                pod_ip: self.pod_ip.as_deref(),
            };
            let began = std::time::Instant::now();
            // Boxed: an attempt's state (an HTTP client, say) lives only while it runs; inline,
            // it would size every waiting probe's task.
            let attempts = Box::pin(async {
                let mut attempt = Attempt::Error(String::new());
                for _ in 0..MAX_TRIES {
                    attempt =
                        tracing::Instrument::instrument(run(p, &target), tracing::trace_span!("probe")).await;
                    if !matches!(attempt, Attempt::Error(_)) {
                        break;
                    }
                }
                attempt
            });
            // A probe stopped mid-attempt (its pod is going) reports nothing: no late event, and
            // no metric series recreated after the pod's were removed.
            let attempt = tokio::select! {
                _ = cancel.cancelled() => return,
                attempt = attempts => attempt,
            };
            let title = self.kind.title();
            match attempt {
                Attempt::Error(e) => {
                    self.ctx.exec.rec.warning(
                        &self.key,
                        Some(&name),
                        "Unhealthy",
                        format!("{title} probe errored: {e}"),
                    );
                }
                Attempt::Done { outcome, output, warning } => {
                    self.ctx.metrics.probe(&self.metrics, outcome == Outcome::Success, began.elapsed());
                    if let Some(w) = warning {
                        self.ctx.exec.rec.warning(
                            &self.key,
                            Some(&name),
                            "ProbeWarning",
                            format!("{title} probe warning: {w}"),
                        );
                    }
                    if outcome == Outcome::Failure {
                        self.ctx.exec.rec.warning(
                            &self.key,
                            Some(&name),
                            "Unhealthy",
                            format!("{title} probe failed: {output}"),
                        );
                    }
                    if let Some(new) = tracker.observe(outcome) {
                        self.set(new);
                        // R6.4: a failed liveness/startup probe goes on hold until a new
                        // container instance appears (this task ends; the next instance gets
                        // a new one).
                        if new == ProbeResult::Failure && self.kind != ProbeKind::Readiness {
                            return;
                        }
                    }
                }
            }
        }
    }
}
