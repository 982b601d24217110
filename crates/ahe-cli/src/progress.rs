//! Live progress of trials: an indicatif bar on a terminal, a line per trial otherwise.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use ahe_bench::{Progress, TrialStatus};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Progress display for one evaluation.
pub struct Bar {
    bar: ProgressBar,
    plain: bool,
    quiet: bool,
    passes: Arc<AtomicUsize>,
}

impl Bar {
    /// A bar on stderr (plain lines when stderr is not a terminal; nothing when `quiet`).
    pub fn new(quiet: bool) -> Self {
        let plain = !std::io::stderr().is_terminal();
        let bar = if quiet || plain {
            ProgressBar::with_draw_target(None, ProgressDrawTarget::hidden())
        } else {
            ProgressBar::new(0)
        };
        bar.set_style(
            ProgressStyle::with_template(
                "{elapsed_precise} [{bar:30}] {pos}/{len} trials  {msg}  eta {eta}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
        );
        Bar {
            bar,
            plain,
            quiet,
            passes: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// The callback to hand to the evaluation.
    pub fn callback(&self) -> Arc<dyn Fn(Progress) + Send + Sync> {
        let bar = self.bar.clone();
        let passes = self.passes.clone();
        let (plain, quiet) = (self.plain, self.quiet);
        Arc::new(move |p| match p {
            Progress::Start { total } => {
                bar.set_length(total as u64);
                bar.set_position(0);
                passes.store(0, Ordering::Relaxed);
            }
            Progress::TrialDone { result } => {
                let np = passes.fetch_add(
                    (result.status == TrialStatus::Pass) as usize,
                    Ordering::Relaxed,
                ) + (result.status == TrialStatus::Pass) as usize;
                bar.inc(1);
                bar.set_message(format!("{np} passed"));
                if plain && !quiet {
                    eprintln!(
                        "[{}/{}] {} #{}: {} ({:.1}s)",
                        bar.position(),
                        bar.length().unwrap_or(0),
                        result.task,
                        result.attempt,
                        result.status.as_str(),
                        result.timings.total_ms as f64 / 1000.0
                    );
                }
            }
        })
    }

    /// Clears the bar.
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}
