//! How each progress event changes the counters of the stage and what it shows: a line
//! (plain on stderr, or above the bar) and the bar's prefix, length and message.

use std::time::{Duration, Instant};

use ahe_bench::{Progress, TrialStatus};
use indicatif::{ProgressBar, ProgressDrawTarget};

use super::{
    bar_style, host_change_line, placement, pull_key, pull_line, spinner_style, trial_line, usd,
    CostShown, State, COST_UNKNOWN, NO_API_COST,
};

/// Where progress shows: the bar, plain lines when stderr is not a terminal, or nowhere
/// (`quiet`).
pub(super) struct View {
    pub(super) bar: ProgressBar,
    pub(super) plain: bool,
    pub(super) quiet: bool,
}

impl View {
    /// Prints a line for the researcher (above the bar, or plain; nothing when quiet).
    fn say(&self, line: String) {
        if self.quiet {
        } else if self.plain {
            eprintln!("{line}");
        } else {
            self.bar.println(line);
        }
    }

    /// Applies one event to the counters and the display (the bar shows from the first one).
    pub(super) fn show(&self, st: &mut State, p: Progress) {
        if !self.plain && !self.quiet && self.bar.is_hidden() {
            self.bar.set_draw_target(ProgressDrawTarget::stderr());
        }
        match p {
            Progress::Stage { label, spent_usd } => self.stage(st, label, spent_usd),
            Progress::Start { total } => self.start(st, total),
            Progress::TrialDone { result } => self.trial_done(st, &result),
            Progress::Message { text } => self.say(text),
            Progress::Disk(e) => {
                st.disk_low = (e.state != "ok").then(|| {
                    format!(
                        "PAUSED: disk low ({} free, reserve {})",
                        ahe_bench::disk::gib(e.free_bytes),
                        ahe_bench::disk::gib(e.min_free_bytes)
                    )
                });
                self.say(e.text());
                self.bar.set_message(st.message());
            }
            Progress::Hosts(hosts) => {
                // A host that went down or came back gets a line of its own.
                for h in &hosts {
                    let before = st.hosts.iter().find(|o| o.name == h.name);
                    if before.is_some_and(|o| o.up != h.up) {
                        self.say(host_change_line(h));
                    }
                }
                st.hosts = hosts;
                self.bar.set_message(st.message());
            }
            Progress::Pull(e) => self.pull(st, &e),
        }
    }

    /// A new stage: its counters reset, a `[label] started` line with the dollars spent so
    /// far, and a spinner until its trials start.
    fn stage(&self, st: &mut State, label: String, spent_usd: f64) {
        st.stage = label.clone();
        st.baseline_usd = spent_usd;
        st.trial_usd = 0.0;
        st.total = 0;
        st.done = 0;
        st.passes = 0;
        st.tokens = 0;
        let so_far = match st.cost {
            CostShown::Unknown => format!(" · {COST_UNKNOWN}"),
            CostShown::Local if !st.said_local => format!(" · {NO_API_COST}"),
            CostShown::Local => String::new(),
            CostShown::Dollars => format!(" · {} spent so far", usd(spent_usd)),
        };
        st.said_local |= st.cost == CostShown::Local;
        self.say(format!("[{label}] started{so_far}"));
        let bar = &self.bar;
        bar.set_style(spinner_style());
        bar.reset_elapsed();
        bar.set_prefix(label);
        bar.set_message(st.spent_text());
        bar.enable_steady_tick(Duration::from_millis(200));
    }

    /// The trials start: a bar of `total` from zero (said once: a local model costs nothing).
    fn start(&self, st: &mut State, total: usize) {
        if st.cost == CostShown::Local && !st.said_local {
            st.said_local = true;
            self.say(NO_API_COST.to_string());
        }
        st.total = total;
        st.done = 0;
        st.passes = 0;
        st.started = Instant::now();
        let bar = &self.bar;
        bar.disable_steady_tick();
        bar.set_style(bar_style());
        bar.set_prefix(if st.stage.is_empty() {
            "eval".to_string()
        } else {
            st.stage.clone()
        });
        bar.set_length(total as u64);
        bar.set_position(0);
        bar.reset_eta();
        bar.set_message(st.message());
    }

    /// A trial finished: counted (pass, dollars, tokens), the bar moved, a plain line.
    fn trial_done(&self, st: &mut State, result: &ahe_bench::TrialResult) {
        st.done += 1;
        st.passes += (result.status == TrialStatus::Pass) as usize;
        st.trial_usd += result.cost_usd;
        st.tokens += result.usage.input_tokens + result.usage.output_tokens;
        self.bar.inc(1);
        self.bar.set_message(st.message());
        if self.plain && !self.quiet {
            eprintln!(
                "{}",
                trial_line(
                    st,
                    &result.task,
                    result.attempt,
                    &format!("{}{}", result.status.as_str(), placement(result)),
                    result.timings.total_ms as f64 / 1000.0
                )
            );
        }
    }

    /// An image pull: its progress kept for the bar's message while it runs, a line when it
    /// starts, ends or fails.
    fn pull(&self, st: &mut State, e: &ahe_sandbox::PullEvent) {
        use ahe_sandbox::PullPhase;
        match &e.phase {
            PullPhase::Started => {
                st.pulls.insert(pull_key(e), (0, 0, 0, 0));
            }
            PullPhase::Progress {
                layers_done,
                layers_total,
                bytes_done,
                bytes_total,
            } => {
                st.pulls.insert(
                    pull_key(e),
                    (*layers_done, *layers_total, *bytes_done, *bytes_total),
                );
            }
            PullPhase::Done { .. } | PullPhase::Failed { .. } => {
                st.pulls.remove(&pull_key(e));
            }
        }
        if let Some(line) = pull_line(e) {
            self.say(line);
        }
        self.bar.set_message(st.message());
    }
}
