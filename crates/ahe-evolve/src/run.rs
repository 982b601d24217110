//! A run being executed: what every phase of the loop shares (config, tasks, journal,
//! harness repository, sandbox backend, budget), and the bookkeeping around phases
//! (journaled phase boundaries, notes, budget checks, rollout specs).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use ahe_bench::{Progress, Task};
use anyhow::{bail, Context};

use crate::commit::HarnessRepo;
use crate::journal::{now, Entry, Journal, Phase};
use crate::run_dir::RunDir;
use crate::RunConfig;

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
    pub lock: crate::lock::RunLock,
}

/// Per-task exercised-files map used by attribution.
pub type Exercised = BTreeMap<String, BTreeSet<String>>;

/// Splits tasks into visible and held-out by the config.
pub fn split_holdout(
    cfg: &RunConfig,
    tasks: &[Task],
) -> anyhow::Result<(BTreeSet<String>, BTreeSet<String>)> {
    let names: Vec<String> = tasks.iter().map(|t| t.name.clone()).collect();
    let mut hold: BTreeSet<String> = BTreeSet::new();
    for n in &cfg.holdout.tasks {
        if !names.contains(n) {
            bail!("holdout.tasks: unknown task {n:?}");
        }
        hold.insert(n.clone());
    }
    if let Some(f) = cfg.holdout.fraction {
        use rand::{seq::SliceRandom, SeedableRng};
        let mut rest: Vec<&String> = names.iter().filter(|n| !hold.contains(*n)).collect();
        rest.shuffle(&mut rand::rngs::StdRng::seed_from_u64(cfg.holdout.seed));
        let n = (names.len() as f64 * f).round() as usize;
        hold.extend(rest.into_iter().take(n).cloned());
    }
    let visible: BTreeSet<String> = names.into_iter().filter(|n| !hold.contains(n)).collect();
    if visible.is_empty() {
        bail!("holdout: every task is held out; the evolve agent would see nothing");
    }
    Ok((visible, hold))
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

    /// Whether the budget is spent (by the files on disk up to iteration `t`, or by the
    /// shared per-call counter); returns the amount spent and the limit.
    pub fn budget_spent(&self, t: u32) -> Option<(f64, f64)> {
        let limit = self.cfg.evolve.budget_usd?;
        let counted = self.budget.as_ref().map_or(0.0, |b| b.spent_usd());
        let spent = self.dir.spent_usd(t).max(counted);
        (spent >= limit).then_some((spent, limit))
    }

    /// Journals (and shows) an orchestrator note for iteration `t`.
    pub fn note(&self, t: u32, msg: impl Into<String>) -> anyhow::Result<()> {
        let message = msg.into();
        (self.progress)(Progress::Message {
            text: format!("[iter {t}] note: {message}"),
        });
        self.journal.append(Entry::Note { iter: t, message })
    }

    /// Shows a message on the live display.
    pub fn say(&self, text: String) {
        (self.progress)(Progress::Message { text });
    }

    /// Runs `f` as phase `p` of iteration `t` unless the journal says it finished.
    pub async fn phase<F, Fut>(&self, t: u32, p: Phase, f: F) -> anyhow::Result<bool>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = anyhow::Result<()>>,
    {
        if self.journal.phase_done(t, p) {
            return Ok(false);
        }
        let n = self.cfg.iterations;
        (self.progress)(Progress::Stage {
            label: format!(
                "iter {t}/{}{} {}",
                n + 1,
                if t > n { " final" } else { "" },
                p.name()
            ),
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

    /// The rollout of `harness` on `tasks` (k trials each) into `out_dir`, with this run's
    /// model, backend and limits.
    pub fn rollout_spec(
        &self,
        mut harness: ahe_harness::Harness,
        tasks: Vec<Task>,
        k: u32,
        out_dir: &Path,
        prior: Vec<ahe_bench::TrialResult>,
    ) -> crate::RolloutSpec {
        self.cfg.agent.cap(&mut harness);
        crate::RolloutSpec {
            harness: Arc::new(harness),
            model_cfg: self.cfg.model("code_agent"),
            tasks,
            backend: self.backend.clone(),
            k,
            concurrency: self.cfg.sandbox.concurrency,
            infra_retries: self.cfg.sandbox.infra_retries,
            verifier: self.cfg.verifier,
            default_agent_timeout_sec: self.cfg.agent.default_timeout_sec,
            out_dir: out_dir.to_path_buf(),
            run: self.dir.name(),
            prior,
            schedule: Default::default(),
            expected_sec: Default::default(),
            judge: self.cfg.judge_model(),
            min_free_disk: self.cfg.sandbox.min_free_disk,
        }
    }
}

/// A permanent model error (bad key, unknown model, replay miss) stops the run: the
/// debugger and evolve agents would otherwise carry on without their model.
pub fn stop_on_permanent(
    client: Option<&ahe_model::ModelClient>,
    role: &str,
) -> anyhow::Result<()> {
    let Some(stats) = client.map(|c| c.stats()) else {
        return Ok(());
    };
    match stats.permanent_error() {
        Some(e) => bail!("the {role} model cannot be used: {e}"),
        None => Ok(()),
    }
}

/// Loads a harness exported for evaluation, listing every problem when it does not validate.
pub fn load_harness(dir: &Path) -> anyhow::Result<ahe_harness::Harness> {
    ahe_harness::load(dir).map_err(|p| {
        anyhow::anyhow!(
            "the evaluated harness does not validate: {}",
            p.iter()
                .map(|x| x.to_string())
                .collect::<Vec<_>>()
                .join("; ")
        )
    })
}
