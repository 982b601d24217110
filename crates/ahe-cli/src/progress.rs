//! Live progress of `ahe eval` and `ahe evolve`: phase, trials done/total, passes so far,
//! ETA and dollars spent. An indicatif bar when stderr is a terminal; otherwise one plain
//! line per event (phase start, trial end, note).

use std::io::IsTerminal;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ahe_bench::Progress;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

mod events;

/// Counters of the current stage.
#[derive(Debug)]
struct State {
    /// Stage label (`iter 2/4 rollout`), empty for a plain evaluation.
    stage: String,
    /// Dollars spent before the stage.
    baseline_usd: f64,
    /// Dollars of the trials finished in this stage.
    trial_usd: f64,
    /// Trials to run in this stage.
    total: usize,
    /// Trials finished.
    done: usize,
    /// Trials passed.
    passes: usize,
    /// When the trials started.
    started: Instant,
    /// Image pulls in flight: image → (layers done, layers, bytes done, bytes).
    pulls: std::collections::BTreeMap<String, (u32, u32, u64, u64)>,
    /// How cost is spoken of: dollars, unknown (no prices), or no API cost (local models).
    cost: CostShown,
    /// Tokens (input + output) of the trials finished in this stage.
    tokens: u64,
    /// Whether "local model: no API cost" was said already (it is said once).
    said_local: bool,
    /// The docker hosts' load and health (`[sandbox] hosts`; empty for one engine).
    hosts: Vec<ahe_sandbox::HostLoad>,
    /// Set while the host is below its disk reserve (no trial starts): what to show.
    disk_low: Option<String>,
}

/// Shown instead of dollars when the config names no prices.
pub const COST_UNKNOWN: &str = "cost unknown (no prices in the config)";

/// Said once when every role runs on a local model (embedded or mock).
pub const NO_API_COST: &str = "local model: no API cost";

/// How the progress lines speak of cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CostShown {
    /// Dollars spent (the config names prices).
    #[default]
    Dollars,
    /// An API model without prices: "cost unknown", never "$0".
    Unknown,
    /// Every role runs on the embedded model: no money is spent; tokens are shown instead.
    Local,
}

impl CostShown {
    /// The cost basis of the models a job uses: local when all run locally, unknown when
    /// every API model lacks prices, dollars otherwise.
    pub fn of<'a>(models: impl IntoIterator<Item = &'a ahe_model::ModelConfig>) -> CostShown {
        let api: Vec<_> = models.into_iter().filter(|m| !m.runs_locally()).collect();
        if api.is_empty() {
            CostShown::Local
        } else if api.iter().all(|m| m.prices_unknown()) {
            CostShown::Unknown
        } else {
            CostShown::Dollars
        }
    }
}

impl State {
    fn spent(&self) -> f64 {
        self.baseline_usd + self.trial_usd
    }

    /// The bar's message: passes, dollars (or that they are unknown), the pulls in flight.
    fn message(&self) -> String {
        let mut m = format!("{} passed · {}", self.passes, self.spent_text());
        if !self.hosts.is_empty() {
            m.push_str(&format!(" · {}", hosts_text(&self.hosts)));
        }
        for (image, p) in &self.pulls {
            m.push_str(&format!(" · {}", pull_text(image, *p)));
        }
        if let Some(d) = &self.disk_low {
            m.push_str(&format!(" · {d}"));
        }
        m
    }

    /// `$0.1234 spent`, [`COST_UNKNOWN`], or the stage's tokens for a local model.
    fn spent_text(&self) -> String {
        match self.cost {
            CostShown::Unknown => COST_UNKNOWN.to_string(),
            CostShown::Local => format!("{} tokens", tokens_text(self.tokens)),
            CostShown::Dollars => format!("{} spent", usd(self.spent())),
        }
    }

    /// Time left at the average pace so far (None before the first trial).
    fn eta(&self) -> Option<Duration> {
        (self.done > 0 && self.total >= self.done).then(|| {
            self.started
                .elapsed()
                .mul_f64((self.total - self.done) as f64 / self.done as f64)
        })
    }
}

/// Progress display for one evaluation or evolve run.
pub struct Bar {
    bar: ProgressBar,
    plain: bool,
    quiet: bool,
    state: Arc<Mutex<State>>,
}

fn bar_style() -> ProgressStyle {
    ProgressStyle::with_template("{prefix:.bold} [{bar:20}] {pos}/{len} · {msg} · eta {eta}")
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ")
}

fn spinner_style() -> ProgressStyle {
    ProgressStyle::with_template("{spinner} {prefix:.bold} · {msg} · {elapsed}")
        .unwrap_or_else(|_| ProgressStyle::default_spinner())
}

/// `1m 05s`, `12s`.
fn short(d: Duration) -> String {
    let s = d.as_secs();
    if s >= 60 {
        format!("{}m {:02}s", s / 60, s % 60)
    } else {
        format!("{s}s")
    }
}

/// `$0.0123` / `$1.23`.
/// A token count for a progress line: `950`, `12.3k`, `4.56M`.
fn tokens_text(n: u64) -> String {
    match n {
        0..=999 => n.to_string(),
        1_000..=999_999 => format!("{:.1}k", n as f64 / 1e3),
        _ => format!("{:.2}M", n as f64 / 1e6),
    }
}

fn usd(v: f64) -> String {
    // An empty f64 sum is -0.0.
    let v = if v == 0.0 { 0.0 } else { v };
    if v < 1.0 {
        format!("${v:.4}")
    } else {
        format!("${v:.2}")
    }
}

/// `pulling IMG 3/7 layers 120/450 MB`.
fn pull_text(image: &str, (ld, lt, bd, bt): (u32, u32, u64, u64)) -> String {
    let mb = |b: u64| b as f64 / 1e6;
    if lt == 0 {
        format!("pulling {image}")
    } else {
        format!(
            "pulling {image} {ld}/{lt} layers {:.0}/{:.0} MB",
            mb(bd),
            mb(bt)
        )
    }
}

/// `hosts a 2/4 (7 done) · b down` — each host's trials in flight of its capacity and
/// sandboxes created so far, or that it is down.
fn hosts_text(hosts: &[ahe_sandbox::HostLoad]) -> String {
    let each: Vec<String> = hosts
        .iter()
        .map(|h| {
            let lost = if h.lost > 0 {
                format!(", {} lost", h.lost)
            } else {
                String::new()
            };
            if h.up {
                format!(
                    "{} {}/{} ({} run{lost})",
                    h.name, h.in_flight, h.capacity, h.trials
                )
            } else {
                format!("{} down ({} run{lost})", h.name, h.trials)
            }
        })
        .collect();
    format!("hosts {}", each.join(", "))
}

/// The key of a pull in the display: the image, and the host when there are several.
fn pull_key(e: &ahe_sandbox::PullEvent) -> String {
    match &e.host {
        Some(h) => format!("{} on {h}", e.image),
        None => e.image.clone(),
    }
}

/// The plain line of a pull event that starts, ends or fails (progress is bar-only).
pub fn pull_line(e: &ahe_sandbox::PullEvent) -> Option<String> {
    use ahe_sandbox::PullPhase;
    match &e.phase {
        PullPhase::Started => Some(format!("image: pulling {} ...", pull_key(e))),
        PullPhase::Progress { .. } => None,
        PullPhase::Done { secs, bytes } => Some(format!(
            "image: pulled {} ({:.1} MB in {secs:.1}s)",
            pull_key(e),
            *bytes as f64 / 1e6
        )),
        PullPhase::Failed { secs, error } => Some(format!(
            "image: pulling {} failed after {secs:.1}s: {error} (its trials build environment/ instead where they can)",
            pull_key(e)
        )),
    }
}

/// Where a trial ran, for its plain line: ` on b (re-run: lost on a)`, or nothing.
fn placement(r: &ahe_bench::TrialResult) -> String {
    let mut s = r
        .host
        .as_ref()
        .map(|h| format!(" on {h}"))
        .unwrap_or_default();
    if !r.lost_hosts.is_empty() {
        s.push_str(&format!(" (re-run: lost on {})", r.lost_hosts.join(", ")));
    }
    s
}

/// The line for a host that went down or came back.
fn host_change_line(h: &ahe_sandbox::HostLoad) -> String {
    if h.up {
        format!("host {}: answers again; trials go to it again", h.name)
    } else {
        format!(
            "host {}: down ({}); its trials are re-run on the other hosts",
            h.name,
            h.error.as_deref().unwrap_or("stopped answering")
        )
    }
}

/// One plain line for a finished trial (`status` may carry where it ran).
fn trial_line(st: &State, task: &str, attempt: u32, status: &str, secs: f64) -> String {
    format!(
        "{}[{}/{}] {task} #{attempt}: {status} ({secs:.1}s) · {} passed · {} · eta {}",
        if st.stage.is_empty() {
            String::new()
        } else {
            format!("[{}] ", st.stage)
        },
        st.done,
        st.total,
        st.passes,
        st.spent_text(),
        st.eta().map(short).unwrap_or_else(|| "?".into())
    ) + &st
        .disk_low
        .as_ref()
        .map(|d| format!(" · {d}"))
        .unwrap_or_default()
}

impl Bar {
    /// A bar on stderr (plain lines when stderr is not a terminal; nothing when `quiet`).
    pub fn new(quiet: bool) -> Self {
        let plain = !std::io::stderr().is_terminal();
        // Hidden until the first event (so lines printed before it are not overdrawn).
        let bar = ProgressBar::with_draw_target(Some(0), ProgressDrawTarget::hidden());
        bar.set_style(bar_style());
        bar.set_message("starting");
        Bar {
            bar,
            plain,
            quiet,
            state: Arc::new(Mutex::new(State {
                stage: String::new(),
                baseline_usd: 0.0,
                trial_usd: 0.0,
                total: 0,
                done: 0,
                passes: 0,
                started: Instant::now(),
                pulls: Default::default(),
                cost: CostShown::Dollars,
                tokens: 0,
                said_local: false,
                hosts: Vec::new(),
                disk_low: None,
            })),
        }
    }

    /// Sets how cost is spoken of (see [`CostShown::of`]).
    pub fn set_cost_shown(&self, cost: CostShown) {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).cost = cost;
    }

    /// The callback to hand to the evaluation or the evolve run.
    pub fn callback(&self) -> Arc<dyn Fn(Progress) + Send + Sync> {
        let view = events::View {
            bar: self.bar.clone(),
            plain: self.plain,
            quiet: self.quiet,
        };
        let state = self.state.clone();
        Arc::new(move |p| {
            let mut st = state.lock().unwrap_or_else(|e| e.into_inner());
            view.show(&mut st, p);
        })
    }

    /// Clears the bar.
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_trial_line_has_counts_cost_and_eta() {
        let st = State {
            stage: "iter 1/4 rollout".into(),
            baseline_usd: 0.5,
            trial_usd: 0.25,
            total: 8,
            done: 2,
            passes: 1,
            started: Instant::now() - Duration::from_secs(10),
            pulls: Default::default(),
            cost: CostShown::Dollars,
            tokens: 0,
            said_local: false,
            hosts: Vec::new(),
            disk_low: None,
        };
        let l = trial_line(&st, "fix-sum", 1, "pass", 1.25);
        assert!(
            l.starts_with("[iter 1/4 rollout] [2/8] fix-sum #1: pass (1.2s)"),
            "{l}"
        );
        assert!(l.contains("1 passed") && l.contains("$0.7500 spent"), "{l}");
        // 10 s for 2 trials → 30 s for the 6 left.
        assert!(l.contains("eta 30s") || l.contains("eta 29s"), "{l}");
        assert_eq!(short(Duration::from_secs(65)), "1m 05s");
        let unknown = State {
            cost: CostShown::Unknown,
            ..st
        };
        let l = trial_line(&unknown, "fix-sum", 1, "pass", 1.25);
        assert!(
            l.contains("1 passed · cost unknown (no prices in the config) · eta"),
            "{l}"
        );
        assert!(!l.contains('$'), "{l}");
        let local = State {
            cost: CostShown::Local,
            tokens: 12_345,
            ..unknown
        };
        let l = trial_line(&local, "fix-sum", 1, "pass", 1.25);
        assert!(l.contains("1 passed · 12.3k tokens · eta"), "{l}");
        assert!(!l.contains('$') && !l.contains("unknown"), "{l}");
        assert_eq!(
            (tokens_text(950), tokens_text(4_560_000)),
            ("950".into(), "4.56M".into())
        );
    }

    #[test]
    fn the_cost_basis_is_local_only_when_every_role_runs_locally() {
        let m = |provider: &str, price: f64| ahe_model::ModelConfig {
            provider: provider.into(),
            price_output_per_mtok: price,
            ..Default::default()
        };
        let (local, mock, api, priced) = (
            m("local", 0.0),
            m("mock", 0.0),
            m("openai", 0.0),
            m("openai", 10.0),
        );
        assert_eq!(CostShown::of([&local, &local]), CostShown::Local);
        assert_eq!(
            CostShown::of([&local, &mock]),
            CostShown::Unknown,
            "a mock is an API stand-in"
        );
        assert_eq!(CostShown::of([&local, &api]), CostShown::Unknown);
        assert_eq!(CostShown::of([&local, &api, &priced]), CostShown::Dollars);
        // Prices named on a local model do not make it cost money.
        assert_eq!(CostShown::of([&m("local", 5.0)]), CostShown::Local);
    }

    #[test]
    fn pulls_in_flight_show_layers_and_megabytes() {
        let mut st = State {
            stage: String::new(),
            baseline_usd: 0.0,
            trial_usd: 0.0,
            total: 4,
            done: 1,
            passes: 1,
            started: Instant::now(),
            pulls: Default::default(),
            cost: CostShown::Dollars,
            tokens: 0,
            said_local: false,
            hosts: Vec::new(),
            disk_low: None,
        };
        st.pulls.insert(
            "alexgshaw/regex-log:20251031".into(),
            (3, 7, 120_000_000, 450_000_000),
        );
        let m = st.message();
        assert!(
            m.ends_with("pulling alexgshaw/regex-log:20251031 3/7 layers 120/450 MB"),
            "{m}"
        );
        let e = ahe_sandbox::PullEvent {
            image: "x:1".into(),
            phase: ahe_sandbox::PullPhase::Failed {
                secs: 0.5,
                error: "no such host".into(),
            },
            host: None,
        };
        assert!(pull_line(&e)
            .unwrap()
            .contains("pulling x:1 failed after 0.5s: no such host"));
    }

    #[test]
    fn hosts_show_load_runs_and_down_state() {
        let host = |name: &str, up: bool, in_flight: usize, trials: u64, lost: u64| {
            ahe_sandbox::HostLoad {
                name: name.into(),
                url: format!("unix:///run/{name}.sock"),
                capacity: 4,
                in_flight,
                peak: 4,
                trials,
                lost,
                up,
                error: (!up).then(|| "stopped answering (connection refused)".into()),
                builds: 1,
                pulls: 0,
            }
        };
        let hosts = [host("a", true, 3, 7, 0), host("b", false, 0, 2, 2)];
        assert_eq!(
            hosts_text(&hosts),
            "hosts a 3/4 (7 run), b down (2 run, 2 lost)"
        );
        let l = host_change_line(&hosts[1]);
        assert!(l.contains("host b: down (stopped answering"), "{l}");
        let mut r = ahe_bench::TrialResult::new("t", 1);
        assert_eq!(placement(&r), "");
        r.host = Some("a".into());
        r.lost_hosts = vec!["b".into()];
        assert_eq!(placement(&r), " on a (re-run: lost on b)");
    }
}
