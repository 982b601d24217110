//! A run being executed: what the loop holds (config, tasks, journal, harness repository,
//! sandbox backend, budget), and the narrow views its phases take instead of the whole run:
//! the [`Ledger`] (notes, phase boundaries), [`Trials`] (running trials), [`Split`] (tasks).

use std::collections::BTreeSet;
use std::sync::Arc;

use ahe_bench::{Progress, Task};

use crate::inputs::ledger::Ledger;
use crate::inputs::trials::Trials;
use ahe_rundir::journal::Journal;
use ahe_rundir::run_dir::RunDir;
use ahe_runner::config::RunConfig;
use ahe_runner::repo::HarnessRepo;

/// A run being executed: config, tasks, journal, harness repository, sandbox backend.
pub struct Run {
    /// `runs/<name>/`.
    pub dir: RunDir,
    /// Frozen config.
    pub cfg: RunConfig,
    /// Every selected task.
    pub tasks: Vec<Task>,
    /// Tasks shown to the debugger and evolve agent.
    pub visible: BTreeSet<String>,
    /// Held-out tasks.
    pub holdout: BTreeSet<String>,
    /// The journal.
    pub journal: Journal,
    /// The harness repository.
    pub repo: HarnessRepo,
    /// Sandbox backend.
    pub backend: Arc<dyn ahe_sandbox::Backend>,
    /// Progress callback for trials.
    pub progress: Arc<dyn Fn(Progress) + Send + Sync>,
    /// `[evolve] budget_usd`, shared by every model client of the run and checked before
    /// each call (resumed runs start with what earlier iterations spent).
    pub budget: Option<Arc<ahe_model::Budget>>,
    /// The run directory's exclusive lock (`.lock`), held as long as this run is open.
    pub lock: crate::inputs::lock::RunLock,
}

/// The run's budget: `budget_usd` minus what the iterations on disk already spent.
pub fn run_budget(cfg: &RunConfig, dir: &RunDir) -> Option<Arc<ahe_model::Budget>> {
    let limit = cfg.evolve.budget_usd?;
    let spent = dir.spent_usd(cfg.iterations + 1);
    Some(Arc::new(ahe_model::Budget::with_spent(limit, spent)))
}

impl Run {
    /// Client options of every model client of this run: the run's `model-cache/` and budget.
    pub fn client_opts(&self) -> ahe_model::ClientOptions {
        ahe_model::ClientOptions {
            default_cache_dir: Some(self.dir.model_cache()),
            budget: self.budget.clone(),
        }
    }

    /// The run's journal and display, for notes and phase boundaries.
    pub fn ledger(&self) -> Ledger<'_> {
        Ledger {
            journal: &self.journal,
            progress: &self.progress,
            dir: &self.dir,
            iterations: self.cfg.iterations,
            budget: self.cfg.evolve.budget_usd.zip(self.budget.as_ref()),
        }
    }

    /// The interface through which phases run trials of this run's harness commits.
    pub fn trials(&self) -> Trials<'_> {
        let opts = self.client_opts();
        Trials::new(
            &self.tasks,
            &self.repo,
            self.ledger(),
            &self.cfg,
            &self.backend,
            opts,
        )
    }

    /// The run's tasks, as the debugger and evolve agent see them and as held out.
    pub fn split(&self) -> Split<'_> {
        Split {
            tasks: &self.tasks,
            visible: &self.visible,
            holdout: &self.holdout,
        }
    }
}

/// The run's tasks and which of them are visible or held out.
#[derive(Clone, Copy)]
pub struct Split<'a> {
    /// Every selected task.
    pub tasks: &'a [Task],
    /// Tasks shown to the debugger and evolve agent.
    pub visible: &'a BTreeSet<String>,
    /// Held-out tasks.
    pub holdout: &'a BTreeSet<String>,
}
