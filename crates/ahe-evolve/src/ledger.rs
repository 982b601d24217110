//! The bookkeeping a phase may do, apart from its work: journal an orchestrator note, show a
//! message, check the budget, and (for the loop) journal a phase's start and end. A phase
//! gets a [`Ledger`] instead of the whole run.

use std::sync::Arc;
use std::time::Instant;

use ahe_bench::Progress;
use anyhow::Context;

use ahe_rundir::journal::{now, Entry, Journal, Phase};
use ahe_rundir::run_dir::RunDir;

/// A run's journal and live display, borrowed for notes and phase boundaries.
#[derive(Clone, Copy)]
pub struct Ledger<'a> {
    /// The run's journal.
    pub journal: &'a Journal,
    /// The live display's callback.
    pub progress: &'a Arc<dyn Fn(Progress) + Send + Sync>,
    /// The run directory (for the spend shown with each phase).
    pub dir: &'a RunDir,
    /// `iterations` of the run's config (N: the final evaluation is N + 1).
    pub iterations: u32,
    /// `[evolve] budget_usd`, and the per-call counter every model client of the run shares.
    pub budget: Option<(f64, &'a Arc<ahe_model::Budget>)>,
}

impl Ledger<'_> {
    /// Journals (and shows) an orchestrator note for iteration `t`.
    pub fn note(&self, t: u32, msg: impl Into<String>) -> anyhow::Result<()> {
        let message = msg.into();
        (self.progress)(Progress::Message {
            text: format!("[iter {t}] note: {message}"),
        });
        self.journal.append(Entry::Note { iter: t, message })
    }

    /// Whether the budget is spent (by the files on disk up to iteration `t`, or by the
    /// shared per-call counter); returns the amount spent and the limit.
    pub fn budget_spent(&self, t: u32) -> Option<(f64, f64)> {
        let (limit, counter) = self.budget?;
        let spent = self.dir.spent_usd(t).max(counter.spent_usd());
        (spent >= limit).then_some((spent, limit))
    }

    /// Shows a message on the live display.
    pub fn say(&self, text: String) {
        (self.progress)(Progress::Message { text });
    }

    /// Runs `f` as phase `p` of iteration `t` unless the journal says it finished; returns
    /// whether it ran.
    pub async fn phase<F, Fut>(&self, t: u32, p: Phase, f: F) -> anyhow::Result<bool>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = anyhow::Result<()>>,
    {
        if self.journal.phase_done(t, p) {
            return Ok(false);
        }
        let n = self.iterations;
        let last = if t > n { " final" } else { "" };
        (self.progress)(Progress::Stage {
            label: format!("iter {t}/{}{last} {}", n + 1, p.name()),
            spent_usd: self.dir.spent_usd(t),
        });
        self.journal.append(Entry::PhaseStart {
            iter: t,
            phase: p,
            ts: now(),
        })?;
        let t0 = Instant::now();
        f().await
            .with_context(|| format!("iteration {t}, phase {p:?}"))?;
        self.journal.append(Entry::PhaseEnd {
            iter: t,
            phase: p,
            ts: now(),
            secs: t0.elapsed().as_secs_f64(),
        })?;
        Ok(true)
    }
}
