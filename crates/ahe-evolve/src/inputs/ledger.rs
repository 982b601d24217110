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

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    /// A ledger over a fresh run directory, its journal and display lines, with a budget.
    fn fixture(
        d: &Path,
        budget: Option<(f64, &Arc<ahe_model::Budget>)>,
        run: impl FnOnce(Ledger, &std::sync::Mutex<Vec<String>>),
    ) {
        let dir = RunDir::new(d);
        let journal = Journal::open(&dir.journal_path()).unwrap();
        let shown = Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink = shown.clone();
        let progress: Arc<dyn Fn(Progress) + Send + Sync> = Arc::new(move |p| match p {
            Progress::Message { text } => sink.lock().unwrap().push(text),
            Progress::Stage { label, .. } => sink.lock().unwrap().push(label),
            _ => {}
        });
        let ledger = Ledger {
            journal: &journal,
            progress: &progress,
            dir: &dir,
            iterations: 2,
            budget,
        };
        run(ledger, &shown);
    }

    #[tokio::test]
    async fn a_finished_phase_is_skipped_and_a_failed_one_is_not_finished() {
        let d = tempfile::tempdir().unwrap();
        let dir = RunDir::new(d.path());
        let journal = Journal::open(&dir.journal_path()).unwrap();
        let progress: Arc<dyn Fn(Progress) + Send + Sync> = Arc::new(|_| {});
        let ledger = Ledger {
            journal: &journal,
            progress: &progress,
            dir: &dir,
            iterations: 2,
            budget: None,
        };
        let runs = std::sync::atomic::AtomicU32::new(0);
        let count = || async {
            runs.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Ok(())
        };
        assert!(ledger.phase(1, Phase::Clean, count).await.unwrap());
        assert!(!ledger.phase(1, Phase::Clean, count).await.unwrap());
        assert!(ledger.phase(2, Phase::Clean, count).await.unwrap());
        assert_eq!(runs.load(std::sync::atomic::Ordering::SeqCst), 2);
        let failing = || async { Err(anyhow::anyhow!("boom")) };
        let e = ledger.phase(1, Phase::Debug, failing).await.unwrap_err();
        assert!(
            format!("{e:#}").contains("iteration 1, phase Debug: boom"),
            "{e:#}"
        );
        assert!(
            !journal.phase_done(1, Phase::Debug),
            "a failed phase is not done"
        );
        assert!(ledger.phase(1, Phase::Debug, count).await.unwrap());
    }

    #[test]
    fn the_budget_counts_the_shared_counter_and_notes_are_journaled_and_shown() {
        let d = tempfile::tempdir().unwrap();
        let counter = Arc::new(ahe_model::Budget::new(1.0));
        fixture(d.path(), Some((1.0, &counter)), |ledger, shown| {
            assert_eq!(ledger.budget_spent(1), None);
            counter.charge(0.6);
            assert_eq!(ledger.budget_spent(1), None);
            counter.charge(0.5);
            let (spent, limit) = ledger.budget_spent(1).expect("over the limit");
            assert!(
                (spent - 1.1).abs() < 1e-9 && limit == 1.0,
                "{spent} {limit}"
            );
            ledger.note(1, "over").unwrap();
            assert_eq!(shown.lock().unwrap().as_slice(), ["[iter 1] note: over"]);
        });
        let journal = Journal::open(&RunDir::new(d.path()).journal_path()).unwrap();
        let noted = journal
            .entries()
            .into_iter()
            .any(|e| matches!(e, Entry::Note { iter: 1, message } if message == "over"));
        assert!(noted, "the note is in the journal");
        fixture(d.path(), None, |ledger, _| {
            assert_eq!(ledger.budget_spent(1), None, "no budget, never spent");
        });
    }
}
