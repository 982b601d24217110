//! The one interface through which the loop's phases run trials of a harness commit: the
//! rollout, and the trial sets beyond it (confirmation, counterfactual, canary, screen,
//! final re-evaluation: `iterations/NNN/extra/<set>/`). A phase gets a [`Trials`] instead of
//! the whole run; every finished trial is journaled so that a resumed phase runs none twice.
//! Extra sets' costs are counted apart from the rollout's.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;

use ahe_bench::{Progress, Scores, Task, TrialResult};
use tokio_util::sync::CancellationToken;

use crate::inputs::ledger::Ledger;
use ahe_rundir::journal::Entry;
use ahe_rundir::run_dir::IterationDir;
use ahe_runner::config::RunConfig;
use ahe_runner::repo::HarnessRepo;
use ahe_runner::rollout::RolloutSpec;

use ahe_rundir::evidence::SetCost;

/// Runs trials of the run's harness commits with the run's model, backend and limits.
pub struct Trials<'a> {
    /// Every selected task (sets name their tasks; the rest are not run).
    pub tasks: &'a [Task],
    /// The harness repository the commits are exported from.
    pub repo: &'a HarnessRepo,
    /// Journal (finished trials) and display.
    pub ledger: Ledger<'a>,
    /// The run's frozen config: the code agent's model and caps, sandbox limits, verifier.
    cfg: &'a RunConfig,
    /// Sandbox backend.
    backend: &'a Arc<dyn ahe_sandbox::Backend>,
    /// Model client options (the run's cache and budget).
    opts: ahe_model::ClientOptions,
}

/// Every finished trial of a set, by task, in attempt order.
pub type SetResults = BTreeMap<String, Vec<TrialResult>>;

impl<'a> Trials<'a> {
    /// Binds the parts of a run that running trials needs.
    pub fn new(
        tasks: &'a [Task],
        repo: &'a HarnessRepo,
        ledger: Ledger<'a>,
        cfg: &'a RunConfig,
        backend: &'a Arc<dyn ahe_sandbox::Backend>,
        opts: ahe_model::ClientOptions,
    ) -> Self {
        Trials {
            tasks,
            repo,
            ledger,
            cfg,
            backend,
            opts,
        }
    }

    /// `[sandbox] concurrency`: trials of one set (or of sets side by side) at once.
    pub fn concurrency(&self) -> usize {
        self.cfg.sandbox.concurrency.max(1)
    }

    /// Model client options of every client of the run (its cache and budget).
    pub fn client_opts(&self) -> &ahe_model::ClientOptions {
        &self.opts
    }

    /// The rollout of `harness` on `tasks` (k trials each) into `out_dir`, with this run's
    /// model, backend and limits; `prior` are finished trials kept as they are.
    pub fn spec(
        &self,
        mut harness: ahe_harness::Harness,
        tasks: Vec<Task>,
        k: u32,
        out_dir: &Path,
        prior: Vec<TrialResult>,
    ) -> RolloutSpec {
        let cfg = self.cfg;
        cfg.agent.cap(&mut harness);
        RolloutSpec {
            harness: Arc::new(harness),
            model_cfg: cfg.model("code_agent"),
            tasks,
            backend: self.backend.clone(),
            k,
            concurrency: cfg.sandbox.concurrency,
            infra_retries: cfg.sandbox.infra_retries,
            verifier: cfg.verifier,
            default_agent_timeout_sec: cfg.agent.default_timeout_sec,
            out_dir: out_dir.to_path_buf(),
            run: self.ledger.dir.name(),
            prior,
            schedule: Default::default(),
            expected_sec: Default::default(),
            judge: cfg.judge_model(),
            min_free_disk: cfg.sandbox.min_free_disk,
        }
    }

    /// Exports `commit` into `checkout` (replacing what was there) and loads its harness.
    pub fn checkout(&self, commit: &str, checkout: &Path) -> anyhow::Result<ahe_harness::Harness> {
        if checkout.exists() {
            std::fs::remove_dir_all(checkout)?;
        }
        self.repo.export(commit, checkout)?;
        load_harness(checkout)
    }

    /// Runs `spec`, handing every progress event to `on_progress` on this task (the trials'
    /// own tasks need a `'static` callback: events cross a channel).
    pub async fn drive(
        &self,
        spec: RolloutSpec,
        cancel: CancellationToken,
        mut on_progress: impl FnMut(Progress) -> anyhow::Result<()>,
    ) -> anyhow::Result<Scores> {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Progress>();
        let cb: Arc<dyn Fn(Progress) + Send + Sync> = Arc::new(move |p| {
            let _ = tx.send(p);
        });
        let fut = ahe_runner::rollout::rollout_with(spec, &self.opts, cancel, cb);
        tokio::pin!(fut);
        let scores = loop {
            tokio::select! {
                r = &mut fut => break r?,
                Some(p) = rx.recv() => on_progress(p)?,
            }
        };
        while let Ok(p) = rx.try_recv() {
            on_progress(p)?;
        }
        Ok(scores)
    }

    /// Runs attempts `1..=k` of each task in `tasks` (those the journal has as done are kept)
    /// of harness `commit` as extra trial set `set` of iteration `it`; returns every finished
    /// trial of the set, by task, and what this call's trials cost.
    pub async fn run_set(
        &self,
        it: &IterationDir,
        set: &str,
        commit: &str,
        tasks: &[String],
        k: u32,
        cancel: CancellationToken,
    ) -> anyhow::Result<(SetResults, SetCost)> {
        let conc = self.concurrency();
        self.run_set_with(it, set, commit, tasks, k, conc, cancel)
            .await
    }

    /// [`Trials::run_set`] with at most `concurrency` trials of the set at once (several
    /// sets running side by side share the sandbox concurrency).
    #[allow(clippy::too_many_arguments)]
    pub async fn run_set_with(
        &self,
        it: &IterationDir,
        set: &str,
        commit: &str,
        tasks: &[String],
        k: u32,
        concurrency: usize,
        cancel: CancellationToken,
    ) -> anyhow::Result<(SetResults, SetCost)> {
        let t = it.number();
        let harness = self.checkout(commit, &it.extra_harness(set))?;
        let done = self.ledger.journal.extra_trials_done(t, set);
        let missing = tasks
            .iter()
            .flat_map(|x| (1..=k).map(move |a| (x.clone(), a)))
            .filter(|p| !done.contains(p))
            .count();
        let chosen: Vec<Task> = self
            .tasks
            .iter()
            .filter(|x| tasks.contains(&x.name))
            .cloned()
            .collect();
        let mut cost = SetCost::default();
        if missing > 0 && !chosen.is_empty() {
            let n = chosen.len();
            self.ledger.say(format!(
                "[iter {t}] {set}: {missing} trial(s) on {n} task(s)"
            ));
            let prior = journaled(&it.extra_eval(set).trials(), &done);
            let mut spec = self.spec(harness, chosen, k, &it.extra(set), prior);
            spec.concurrency = concurrency.max(1);
            let journal = self.ledger.journal;
            let scores = self
                .drive(spec, cancel, |p| match p {
                    Progress::TrialDone { result: r } => journal.append(Entry::ExtraTrialDone {
                        iter: t,
                        set: set.to_string(),
                        task: r.task,
                        attempt: r.attempt,
                        status: r.status.as_str().into(),
                    }),
                    _ => Ok(()),
                })
                .await?;
            cost = set_cost(&scores, missing);
        }
        let done = self.ledger.journal.extra_trials_done(t, set);
        Ok((finished(it, set, &done), cost))
    }
}

/// The trials of set `set` on disk that the journal has as done, by task, in attempt order.
fn finished(it: &IterationDir, set: &str, done: &BTreeSet<(String, u32)>) -> SetResults {
    let mut out = SetResults::new();
    for r in journaled(&it.extra_eval(set).trials(), done) {
        out.entry(r.task.clone()).or_default().push(r);
    }
    for v in out.values_mut() {
        v.sort_by_key(|r| r.attempt);
    }
    out
}

/// The trials under `trials_dir` that the journal has as done (`done`: task, attempt); a
/// trial on disk the journal does not name was cut short and runs again.
pub fn journaled(trials_dir: &Path, done: &BTreeSet<(String, u32)>) -> Vec<TrialResult> {
    ahe_rundir::clean::load_results(trials_dir)
        .unwrap_or_default()
        .into_iter()
        .filter(|r| done.contains(&(r.task.clone(), r.attempt)))
        .collect()
}

/// What `trials` new trials cost, from their rollout's scores.
fn set_cost(scores: &Scores, trials: usize) -> SetCost {
    let tk = &scores.tokens;
    SetCost {
        trials: trials as u32,
        cost_usd: scores.meta.model_cost_usd.unwrap_or(scores.cost_usd),
        usage: ahe_model::Usage {
            input_tokens: tk.input,
            cached_input_tokens: tk.cached_input,
            output_tokens: tk.output,
            cache_write_input_tokens: tk.cache_write_input,
            reasoning_tokens: tk.reasoning,
        },
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
