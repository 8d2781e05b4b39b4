//! A span-level profile of the agent (for finding where the time goes at scale, not for
//! production): with `CRILET_PROFILE=FILE` set, every closed `tracing` span of the agent is
//! counted by name (plus its `op` field, for the CRI calls): how many, the wall time from
//! creation to close (which includes waiting: on the runtime, a lock, the next wake) and the
//! busy time (entered, i.e. polled), total and max. The table is appended to FILE when the
//! agent stops. Without the variable the layer is not installed and costs nothing.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use tracing::span::{Attributes, Id};
use tracing::{Subscriber, field::Field};
use tracing_subscriber::Layer;
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;

/// The environment variable naming the file the profile is written to.
pub const ENV: &str = "CRILET_PROFILE";

#[derive(Debug, Default, Clone, Copy)]
struct Stat {
    count: u64,
    wall: Duration,
    busy: Duration,
    max_wall: Duration,
}

type Stats = Arc<Mutex<BTreeMap<String, Stat>>>;

static STATS: OnceLock<Stats> = OnceLock::new();

/// The timing of one open span.
struct Timing {
    key: String,
    created: Instant,
    entered: Option<Instant>,
    busy: Duration,
}

/// The layer that collects the profile.
pub struct ProfileLayer {
    stats: Stats,
}

/// The layer, when `CRILET_PROFILE` is set.
pub fn layer() -> Option<ProfileLayer> {
    std::env::var_os(ENV)?;
    let stats = STATS.get_or_init(Stats::default).clone();
    Some(ProfileLayer { stats })
}

/// Picks the `op` field (CRI calls), to key a span by operation.
struct OpField(Option<String>);

impl tracing::field::Visit for OpField {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "op" {
            self.0 = Some(value.to_string());
        }
    }
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "op" {
            self.0 = Some(format!("{value:?}").trim_matches('"').to_string());
        }
    }
}

impl<S> Layer<S> for ProfileLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let mut op = OpField(None);
        attrs.record(&mut op);
        let name = attrs.metadata().name();
        let key = match op.0 {
            Some(op) => format!("{name} {op}"),
            None => name.to_string(),
        };
        span.extensions_mut().insert(Timing {
            key,
            created: Instant::now(),
            entered: None,
            busy: Duration::ZERO,
        });
    }

    fn on_enter(&self, id: &Id, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(id) {
            if let Some(t) = span.extensions_mut().get_mut::<Timing>() {
                t.entered = Some(Instant::now());
            }
        }
    }

    fn on_exit(&self, id: &Id, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(id) {
            if let Some(t) = span.extensions_mut().get_mut::<Timing>() {
                if let Some(at) = t.entered.take() {
                    t.busy += at.elapsed();
                }
            }
        }
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(&id) else { return };
        let ext = span.extensions();
        let Some(t) = ext.get::<Timing>() else { return };
        let wall = t.created.elapsed();
        if let Ok(mut stats) = self.stats.lock() {
            let s = stats.entry(t.key.clone()).or_default();
            s.count += 1;
            s.wall += wall;
            s.busy += t.busy;
            s.max_wall = s.max_wall.max(wall);
        }
    }
}

/// The profile so far as a markdown table, by total wall time.
pub fn report() -> Option<String> {
    let stats = STATS.get()?.lock().ok()?.clone();
    let mut rows: Vec<_> = stats.into_iter().collect();
    rows.sort_by(|a, b| b.1.wall.cmp(&a.1.wall));
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let mut out = String::from(
        "| span | count | wall total ms | wall mean ms | wall max ms | busy total ms | busy mean ms |\n\
         | --- | ---: | ---: | ---: | ---: | ---: | ---: |\n",
    );
    for (key, s) in rows {
        let n = s.count.max(1) as f64;
        let _ = writeln!(
            out,
            "| {key} | {} | {:.1} | {:.2} | {:.1} | {:.1} | {:.3} |",
            s.count,
            ms(s.wall),
            ms(s.wall) / n,
            ms(s.max_wall),
            ms(s.busy),
            ms(s.busy) / n
        );
    }
    Some(out)
}

/// Appends the profile to the file `CRILET_PROFILE` names (when the agent stops), under a
/// heading with the agent's PID (a benchmark may run several agents one after the other).
pub fn write() {
    let (Some(path), Some(text)) = (std::env::var_os(ENV), report()) else { return };
    let heading = format!("\n### crilet pid {} ({})\n\n", std::process::id(), jiff::Timestamp::now());
    let appended = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .and_then(|mut f| std::io::Write::write_all(&mut f, format!("{heading}{text}").as_bytes()));
    if let Err(e) = appended {
        tracing::warn!(error = %e, path = %std::path::Path::new(&path).display(), "writing the profile failed");
    }
}
