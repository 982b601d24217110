//! The loop of Algorithm 1: for t = 1..N (plus a final evaluation of H_N),
//! rollout → clean → attribute (rollback, best) → debug → evolve → commit.
//! Every phase is journaled; `resume` skips finished phases and trials.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ahe_bench::{Progress, Scores, Task};
use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::attribute::{self, ChangeEvaluation};
use crate::commit::{iter_tag, HarnessRepo};
use crate::jail::WriteCaps;
use crate::journal::{now, Entry, Journal, Phase};
use crate::manifest::Manifest;
use crate::{clean, debug, evolve, history, read_json, write_json, RunConfig};

/// `best.json`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Best {
    /// Iteration whose evaluation was best.
    pub iteration: u32,
    /// Commit of the evaluated harness.
    pub commit: String,
    /// Its visible pass@1.
    pub pass_at_1: f64,
}

/// A run being executed: config, tasks, journal, harness repository, sandbox backend.
pub struct Run {
    /// `runs/<name>/`.
    pub dir: PathBuf,
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
    pub lock: crate::start::RunLock,
}

/// Directory of iteration `t`.
pub fn iter_dir(run: &Path, t: u32) -> PathBuf {
    run.join("iterations").join(format!("{t:03}"))
}

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
pub fn run_budget(cfg: &RunConfig, dir: &Path) -> Option<Arc<ahe_model::Budget>> {
    let limit = cfg.evolve.budget_usd?;
    let spent = history::spent_usd(dir, cfg.iterations + 1);
    Some(Arc::new(ahe_model::Budget::with_spent(limit, spent)))
}

impl Run {
    /// Client options of every model client of this run: the run's `model-cache/` and budget.
    pub fn client_opts(&self) -> ahe_model::ClientOptions {
        ahe_model::ClientOptions {
            default_cache_dir: Some(self.dir.join("model-cache")),
            budget: self.budget.clone(),
        }
    }

    /// Whether the budget is spent (by the files on disk up to iteration `t`, or by the
    /// shared per-call counter); returns the amount spent and the limit.
    fn budget_spent(&self, t: u32) -> Option<(f64, f64)> {
        let limit = self.cfg.evolve.budget_usd?;
        let counted = self.budget.as_ref().map_or(0.0, |b| b.spent_usd());
        let spent = history::spent_usd(&self.dir, t).max(counted);
        (spent >= limit).then_some((spent, limit))
    }

    fn note(&self, t: u32, msg: impl Into<String>) -> anyhow::Result<()> {
        let message = msg.into();
        (self.progress)(Progress::Message {
            text: format!("[iter {t}] note: {message}"),
        });
        self.journal.append(Entry::Note { iter: t, message })
    }

    /// Runs `f` as phase `p` of iteration `t` unless the journal says it finished.
    async fn phase<F, Fut>(&self, t: u32, p: Phase, f: F) -> anyhow::Result<bool>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = anyhow::Result<()>>,
    {
        if self.journal.phase_done(t, p) {
            return Ok(false);
        }
        (self.progress)(Progress::Stage {
            label: format!(
                "iter {t}/{}{} {}",
                self.cfg.iterations + 1,
                if t > self.cfg.iterations {
                    " final"
                } else {
                    ""
                },
                crate::report::model::phase_name(p)
            ),
            spent_usd: history::spent_usd(&self.dir, t),
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

    /// Executes (or resumes) the whole loop.
    pub async fn execute(&self, cancel: CancellationToken) -> anyhow::Result<()> {
        if self.journal.ended() {
            eprintln!("{}: the run already finished", self.dir.display());
            return Ok(());
        }
        let n = self.cfg.iterations;
        let mut reason = "completed";
        for t in 1..=n + 1 {
            let dir = iter_dir(&self.dir, t);
            std::fs::create_dir_all(&dir)?;
            let evaluated = match std::fs::read_to_string(dir.join("evaluated.txt")) {
                Ok(c) => c.trim().to_string(),
                Err(_) => {
                    let c = self.repo.head()?;
                    std::fs::write(dir.join("evaluated.txt"), format!("{c}\n"))?;
                    c
                }
            };
            self.phase(t, Phase::Rollout, || {
                self.rollout(t, &dir, &evaluated, cancel.clone())
            })
            .await?;
            self.phase(t, Phase::Clean, || async {
                let s = clean::clean_all(&dir.join("trials"))?;
                for (p, e) in &s.failed {
                    self.note(t, format!("could not clean {}: {e}", p.display()))?;
                }
                Ok(())
            })
            .await?;
            self.phase(t, Phase::Attribute, || self.attribute(t, &dir, &evaluated))
                .await?;
            if t == n + 1 {
                break;
            }
            if let Some((spent, b)) = self.budget_spent(t) {
                self.note(t, format!("budget reached: ${spent:.4} of ${b:.4}; stopping after this iteration's bookkeeping"))?;
                reason = "budget";
                break;
            }
            self.phase(t, Phase::Debug, || self.debug(t, &dir)).await?;
            if let Some((spent, b)) = self.budget_spent(t) {
                self.note(t, format!("budget reached during the debug phase: ${spent:.4} of ${b:.4}; no evolve step"))?;
                reason = "budget";
                break;
            }
            self.phase(t, Phase::Evolve, || {
                self.evolve(t, &dir, &evaluated, cancel.clone())
            })
            .await?;
            self.phase(t, Phase::Commit, || self.commit(t, &dir, &evaluated))
                .await?;
            if let Some((spent, b)) = self.budget_spent(t) {
                self.note(t, format!("budget reached during the evolve phase: ${spent:.4} of ${b:.4}; iteration {t}'s harness is committed but not evaluated"))?;
                reason = "budget";
                break;
            }
        }
        self.journal.append(Entry::RunEnd {
            ts: now(),
            reason: reason.into(),
        })?;
        Ok(())
    }

    async fn rollout(
        &self,
        t: u32,
        dir: &Path,
        evaluated: &str,
        cancel: CancellationToken,
    ) -> anyhow::Result<()> {
        // Evaluate a checkout of the commit, never the working tree: evaluated == committed.
        let checkout = dir.join("harness");
        if checkout.exists() {
            std::fs::remove_dir_all(&checkout)?;
        }
        self.repo.export(evaluated, &checkout)?;
        let mut harness = ahe_harness::load(&checkout).map_err(|p| {
            anyhow::anyhow!(
                "the evaluated harness does not validate: {}",
                p.iter()
                    .map(|x| x.to_string())
                    .collect::<Vec<_>>()
                    .join("; ")
            )
        })?;
        let done = self.journal.trials_done(t);
        let prior: Vec<ahe_bench::TrialResult> = clean::load_results(&dir.join("trials"))
            .unwrap_or_default()
            .into_iter()
            .filter(|r| done.contains(&(r.task.clone(), r.attempt)))
            .collect();
        let journal_progress = {
            let progress = self.progress.clone();
            let journal = &self.journal;
            move |p: Progress| {
                if let Progress::TrialDone { result } = &p {
                    let _ = journal.append(Entry::TrialDone {
                        iter: t,
                        task: result.task.clone(),
                        attempt: result.attempt,
                        status: result.status.as_str().into(),
                    });
                }
                progress(p);
            }
        };
        // The callback must be 'static for the trial tasks: bridge through a channel.
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Progress>();
        let cb: Arc<dyn Fn(Progress) + Send + Sync> = Arc::new(move |p| {
            let _ = tx.send(p);
        });
        self.cfg.agent.cap(&mut harness);
        let spec = crate::RolloutSpec {
            harness: Arc::new(harness),
            model_cfg: self.cfg.model("code_agent"),
            tasks: self.tasks.clone(),
            backend: self.backend.clone(),
            k: self.cfg.k,
            concurrency: self.cfg.sandbox.concurrency,
            infra_retries: self.cfg.sandbox.infra_retries,
            verifier: self.cfg.verifier,
            default_agent_timeout_sec: self.cfg.agent.default_timeout_sec,
            out_dir: dir.to_path_buf(),
            run: self
                .dir
                .file_name()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default(),
            prior,
        };
        let opts = self.client_opts();
        let fut = crate::rollout_with(spec, &opts, cancel, cb);
        tokio::pin!(fut);
        let mut scores = loop {
            tokio::select! {
                r = &mut fut => break r?,
                Some(p) = rx.recv() => journal_progress(p),
            }
        };
        while let Ok(p) = rx.try_recv() {
            journal_progress(p);
        }
        let subset = |set: &BTreeSet<String>| -> (f64, [f64; 2]) {
            let rates: Vec<f64> = scores
                .tasks
                .iter()
                .filter(|(k, _)| set.contains(*k))
                .map(|(_, v)| v.pass_at_1)
                .collect();
            ahe_bench::scores::mean_with_ci(&rates)
        };
        let (vp, vci) = subset(&self.visible);
        let (hp, hci) = subset(&self.holdout);
        let m = &mut scores.meta;
        m.insert("iteration".into(), t.into());
        m.insert("evaluated_commit".into(), evaluated.into());
        m.insert("visible_pass_at_1".into(), vp.into());
        m.insert("visible_pass_at_1_ci".into(), serde_json::json!(vci));
        if !self.holdout.is_empty() {
            m.insert("holdout_pass_at_1".into(), hp.into());
            m.insert("holdout_pass_at_1_ci".into(), serde_json::json!(hci));
            m.insert("holdout_tasks".into(), serde_json::json!(self.holdout));
        }
        ahe_bench::eval::write_scores(dir, &scores)?;
        Ok(())
    }

    async fn attribute(&self, t: u32, dir: &Path, evaluated: &str) -> anyhow::Result<()> {
        let cur: Scores = read_json(&dir.join("scores.json"))?;
        let prev_dir = iter_dir(&self.dir, t.saturating_sub(1));
        let (prev, manifest): (Scores, Option<Manifest>) = if t > 1 {
            (
                read_json(&prev_dir.join("scores.json"))?,
                read_json(&prev_dir.join("evolve/manifest.json")).ok(),
            )
        } else {
            (ahe_bench::scores::compute(self.cfg.k, &[], 0.0), None)
        };
        let exercised = history::exercised(&dir.join("trials"), &self.visible);
        let ev = attribute::attribute(t, manifest.as_ref(), &prev, &cur, &self.visible, &exercised);
        attribute::write(dir, &ev)?;
        let vp = cur
            .meta
            .get("visible_pass_at_1")
            .and_then(|v| v.as_f64())
            .unwrap_or(cur.pass_at_1);
        let best_path = self.dir.join("best.json");
        let best: Option<Best> = read_json(&best_path).ok();
        if best.as_ref().is_none_or(|b| vp > b.pass_at_1) {
            let b = Best {
                iteration: t,
                commit: evaluated.to_string(),
                pass_at_1: vp,
            };
            self.repo.set_tag("best", evaluated)?;
            write_json(&best_path, &b)?;
            (self.progress)(Progress::Message {
                text: format!("[iter {t}] new best: visible pass@1 = {vp:.3}"),
            });
        }
        Ok(())
    }

    async fn debug(&self, t: u32, dir: &Path) -> anyhow::Result<()> {
        let scores: Scores = read_json(&dir.join("scores.json"))?;
        let ec = &self.cfg.evolve;
        let settings = debug::DebugSettings {
            model: Some(ahe_model::build_client_with(
                &self.cfg.model("debugger"),
                &self.client_opts(),
            )?),
            concurrency: ec.debugger_concurrency,
            timeout: Duration::from_secs_f64(ec.debugger_timeout_sec),
            max_turns: ec.debugger_max_turns,
            show_verifier_output: ec.show_verifier_output,
        };
        let client = settings.model.clone();
        let visible: Vec<String> = self.visible.iter().cloned().collect();
        let r = debug::debug(dir, t, &visible, &scores, &settings).await?;
        history::record_role_cost(dir, "debugger", &r.usage, r.cost_usd)?;
        stop_on_permanent(client.as_ref(), "debugger")?;
        for task in &r.llm_failures {
            self.note(
                t,
                format!(
                    "debugger: no LLM analysis for {task}; the deterministic report stands alone"
                ),
            )?;
        }
        Ok(())
    }

    async fn evolve(
        &self,
        t: u32,
        dir: &Path,
        evaluated: &str,
        cancel: CancellationToken,
    ) -> anyhow::Result<()> {
        // A resumed evolve phase starts again from the evaluated harness.
        self.repo.reset_worktree(evaluated)?;
        let ev: ChangeEvaluation = read_json(&dir.join("change_evaluation.json"))?;
        let rollbacks = if self.cfg.evolve.rollback == "auto" && t > 1 {
            history::auto_rollback(&self.dir, t, &self.repo, &ev)?
        } else {
            Vec::new()
        };
        for c in &rollbacks {
            self.note(
                t,
                format!("auto-rollback: {} ({})", c.id, c.files.join(", ")),
            )?;
        }
        history::write_inputs(&self.dir, t, &self.visible)?;
        // The prompt names the evaluated harness by its tag (iter-NNN), not its commit id:
        // ids hash the commit time, and a replayed run must send byte-identical requests.
        let label = iter_tag(t - 1);
        let prompt = history::prompt_vars(&self.dir, t, &label, &ev, &rollbacks, &self.visible)?;
        let ec = &self.cfg.evolve;
        let model = ahe_model::build_client_with(&self.cfg.model("evolve"), &self.client_opts())?;
        let out = evolve::evolve(evolve::EvolveInputs {
            iteration: t,
            iter_dir: dir,
            repo: &self.repo,
            evaluated,
            visible: &self.visible,
            rollbacks: rollbacks.clone(),
            prompt,
            model: model.clone(),
            max_turns: ec.evolve_max_turns,
            timeout: Duration::from_secs_f64(ec.evolve_timeout_sec),
            show_verifier_output: ec.show_verifier_output,
            caps: WriteCaps::of(ec),
            leak: crate::leak::LeakSettings::build(ec.leak_guard, &self.tasks, &self.holdout),
        })
        .await?;
        history::record_role_cost(dir, "evolve", &out.usage, out.cost_usd)?;
        for n in &out.notes {
            self.note(t, n.clone())?;
        }
        stop_on_permanent(Some(&model), "evolve")?;
        // Without budget the pre-flight trial would be refused and revert sound edits.
        if ec.preflight && !out.changed_files.is_empty() && self.budget_spent(t).is_none() {
            self.preflight(t, dir, evaluated, &rollbacks, cancel)
                .await?;
        }
        Ok(())
    }

    /// One smoke trial of the new harness; an infra error reverts the agent's edits.
    async fn preflight(
        &self,
        t: u32,
        dir: &Path,
        evaluated: &str,
        rollbacks: &[crate::Change],
        cancel: CancellationToken,
    ) -> anyhow::Result<()> {
        let Some(task) = self.tasks.iter().find(|x| self.visible.contains(&x.name)) else {
            return Ok(());
        };
        let mut harness = match ahe_harness::load(self.repo.dir()) {
            Ok(h) => h,
            Err(_) => return Ok(()),
        };
        let out = dir.join("evolve/preflight");
        let _ = std::fs::remove_dir_all(&out);
        self.cfg.agent.cap(&mut harness);
        let spec = crate::RolloutSpec {
            harness: Arc::new(harness),
            model_cfg: self.cfg.model("code_agent"),
            tasks: vec![task.clone()],
            backend: self.backend.clone(),
            k: 1,
            concurrency: 1,
            infra_retries: 0,
            verifier: self.cfg.verifier,
            default_agent_timeout_sec: self.cfg.agent.default_timeout_sec,
            out_dir: out,
            run: self
                .dir
                .file_name()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default(),
            prior: vec![],
        };
        let s = crate::rollout_with(spec, &self.client_opts(), cancel, Arc::new(|_| {})).await?;
        if s.statuses.get("infra_error").copied().unwrap_or(0) > 0 {
            self.note(
                t,
                format!(
                    "pre-flight trial of {} hit an infra error: the evolve edits are reverted",
                    task.name
                ),
            )?;
            self.repo.reset_worktree(evaluated)?;
            let mut m: Manifest = read_json(&dir.join("evolve/manifest.json"))?;
            let prev = iter_dir(&self.dir, t - 1);
            let base = std::fs::read_to_string(prev.join("evaluated.txt")).unwrap_or_default();
            for c in rollbacks {
                self.repo.restore_files(base.trim(), &c.files)?;
            }
            m.changes
                .retain(|c| c.kind == crate::manifest::ChangeKind::Rollback);
            write_json(&dir.join("evolve/manifest.json"), &m)?;
        }
        Ok(())
    }

    async fn commit(&self, t: u32, dir: &Path, evaluated: &str) -> anyhow::Result<()> {
        let m: Manifest = read_json(&dir.join("evolve/manifest.json"))?;
        let summary: Vec<String> = m
            .changes
            .iter()
            .map(|c| format!("{}: {}", c.id, c.description))
            .collect();
        let msg = format!(
            "{}: {} change(s)\n\n{}",
            iter_tag(t),
            m.changes.len(),
            if summary.is_empty() {
                "no changes".to_string()
            } else {
                summary.join("\n")
            }
        );
        // Files planted by other means than the jail's tools are caught here too.
        if !self.repo.has_tag(&iter_tag(t)) {
            for n in self
                .repo
                .guard(evaluated, &WriteCaps::of(&self.cfg.evolve))?
            {
                self.note(t, n)?;
            }
        }
        let id = self.repo.commit_all(&msg, &iter_tag(t))?;
        std::fs::write(
            dir.join("evolve/diff.patch"),
            self.repo.diff_patch(evaluated, &id)?,
        )?;
        std::fs::write(
            dir.join("evolve/summary.md"),
            history::summary_md(t, &m, &self.journal, evaluated, &id),
        )?;
        Ok(())
    }
}

/// A permanent model error (bad key, unknown model, replay miss) stops the run: the
/// debugger and evolve agents would otherwise carry on without their model.
fn stop_on_permanent(client: Option<&ahe_model::ModelClient>, role: &str) -> anyhow::Result<()> {
    match client.map(|c| c.stats()) {
        Some(s) => match s.permanent_error() {
            Some(e) => bail!("the {role} model cannot be used: {e}"),
            None => Ok(()),
        },
        None => Ok(()),
    }
}

/// Per-task exercised-files map type used by attribution.
pub type Exercised = BTreeMap<String, BTreeSet<String>>;
