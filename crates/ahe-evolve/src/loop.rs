//! The loop of Algorithm 1: for t = 1..N, rollout → clean → attribute (best) → debug →
//! evolve (rollback, edits, pre-flight) → commit; then a final evaluation of H_N. Each
//! task's debugger starts during the rollout, once the task's trials are done.
//! Every phase is journaled; a resumed run skips finished phases and trials.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::commit::iter_tag;
use crate::jail::WriteCaps;
use crate::journal::{now, Entry, Phase};
use crate::overlap::DebugOverlap;
use crate::run::{stop_on_permanent, Run};
use crate::run_dir::{Best, IterationDir};
use crate::{
    attribute, canary, chain, clean, confirm, counterfactual, evolve, history, preflight, rollback,
    rollout_phase,
};

/// Why the loop stopped.
enum Stop {
    /// Every iteration and the final evaluation ran.
    Completed,
    /// `budget_usd` was reached.
    Budget,
}

impl Run {
    /// Executes (or resumes) the whole loop.
    pub async fn execute(&self, cancel: CancellationToken) -> anyhow::Result<()> {
        if self.journal.ended() {
            eprintln!("{}: the run already finished", self.dir.path().display());
            return Ok(());
        }
        let reason = match self.iterate(&cancel).await? {
            Stop::Completed => "completed",
            Stop::Budget => "budget",
        };
        self.journal.append(Entry::RunEnd {
            ts: now(),
            reason: reason.into(),
        })
    }

    /// Algorithm 1: N evolve iterations, then the evaluation of H_N as iteration N+1.
    async fn iterate(&self, cancel: &CancellationToken) -> anyhow::Result<Stop> {
        let n = self.cfg.iterations;
        for t in 1..=n {
            let it = self.dir.iteration(t);
            let evaluated = self.canary_first(&it, cancel).await?;
            // A task's debugger starts as soon as its k trials are done (overlap.rs).
            let ahead = self.debugger_ahead(&it)?;
            self.evaluate(&it, &evaluated, ahead.as_ref(), cancel)
                .await?;
            let ahead = ahead.as_ref();
            if self.over_budget(t, "", "stopping after this iteration's bookkeeping")? {
                self.settle_debuggers(&it, ahead).await?;
                return Ok(Stop::Budget);
            }
            self.phase(t, Phase::Debug, || self.debug_phase(&it, ahead))
                .await?;
            if self.over_budget(t, " during the debug phase", "no evolve step")? {
                return Ok(Stop::Budget);
            }
            self.phase(t, Phase::Evolve, || self.evolve(&it, &evaluated, cancel))
                .await?;
            self.phase(t, Phase::Commit, || self.commit(&it, &evaluated))
                .await?;
            let msg = format!("iteration {t}'s harness is committed but not evaluated");
            if self.over_budget(t, " during the evolve phase", &msg)? {
                return Ok(Stop::Budget);
            }
        }
        let it = self.dir.iteration(n + 1);
        let evaluated = self.canary_first(&it, cancel).await?;
        self.evaluate(&it, &evaluated, None, cancel).await?;
        Ok(Stop::Completed)
    }

    /// The harness iteration `it` evaluates, after its canary (`[attribution] canary`, from
    /// iteration 2 on), which may revert a culprit first.
    async fn canary_first(
        &self,
        it: &IterationDir,
        cancel: &CancellationToken,
    ) -> anyhow::Result<String> {
        let t = it.number();
        self.evaluated_commit(it)?;
        if t > 1 && self.cfg.attribution.canary {
            self.phase(t, Phase::Canary, || {
                canary::canary(self, it, cancel.clone())
            })
            .await?;
        }
        self.evaluated_commit(it)
    }

    /// The harness iteration `it` evaluates: recorded once (the repository's head when the
    /// iteration starts), so that a resumed iteration evaluates the same commit.
    fn evaluated_commit(&self, it: &IterationDir) -> anyhow::Result<String> {
        it.create()?;
        match it.evaluated() {
            Some(c) => Ok(c),
            None => {
                let c = self.repo.head()?;
                it.write_evaluated(&c)?;
                Ok(c)
            }
        }
    }

    /// Rollout, Clean and Attribute of one iteration (all an evaluation needs); `ahead`
    /// starts each task's debugger as soon as its trials are done.
    async fn evaluate(
        &self,
        it: &IterationDir,
        evaluated: &str,
        ahead: Option<&DebugOverlap>,
        cancel: &CancellationToken,
    ) -> anyhow::Result<()> {
        let t = it.number();
        self.phase(t, Phase::Rollout, || {
            rollout_phase::rollout_iteration(self, it, evaluated, ahead, cancel.clone())
        })
        .await?;
        self.phase(t, Phase::Clean, || async {
            let s = clean::clean_all(&it.trials())?;
            for (p, e) in &s.failed {
                self.note(t, format!("could not clean {}: {e}", p.display()))?;
            }
            Ok(())
        })
        .await?;
        self.phase(t, Phase::Attribute, || self.attribute(it, evaluated))
            .await?;
        // Evidence beyond the rollout, each followed by the verdicts it changes.
        self.phase(t, Phase::Confirm, || async {
            confirm::confirm(self, it, evaluated, cancel.clone()).await?;
            self.judge(it)
        })
        .await?;
        self.phase(t, Phase::Counterfactual, || async {
            counterfactual::counterfactual(self, it, evaluated, cancel.clone()).await?;
            self.judge(it)
        })
        .await?;
        Ok(())
    }

    /// Notes and returns whether the budget is spent (`when`: in which phase; `then`: what
    /// the run does about it).
    fn over_budget(&self, t: u32, when: &str, then: &str) -> anyhow::Result<bool> {
        let Some((spent, limit)) = self.budget_spent(t) else {
            return Ok(false);
        };
        let msg = format!("budget reached{when}: ${spent:.4} of ${limit:.4}; {then}");
        self.note(t, msg)?;
        Ok(true)
    }

    /// Judges the previous iteration's changes on these scores and the evidence so far
    /// (`change_evaluation.json`, with the cumulative prediction quality).
    fn judge(&self, it: &IterationDir) -> anyhow::Result<()> {
        let t = it.number();
        let cur = it.scores()?;
        let prev_it = self.dir.iteration(t.saturating_sub(1));
        let (prev, manifest) = if t > 1 {
            (prev_it.scores()?.scores, prev_it.manifest().ok())
        } else {
            (ahe_bench::scores::compute(self.cfg.k, &[], 0.0), None)
        };
        let exercised = history::exercised(it, &self.visible);
        let mut ev = attribute::attribute(
            t,
            manifest.as_ref(),
            &prev,
            &cur.scores,
            &self.visible,
            &exercised,
            &it.evidence(),
        );
        if let Ok(p) = (t > 1).then(|| prev_it.change_evaluation()).transpose() {
            let before = p
                .map(|p| p.prediction_vs_truth_cumulative)
                .unwrap_or_default();
            ev.prediction_vs_truth_cumulative = before.plus(&ev.prediction_vs_truth);
        }
        it.write_change_evaluation(&ev)
    }

    /// Judges the previous iteration's changes on these scores; updates `best`.
    async fn attribute(&self, it: &IterationDir, evaluated: &str) -> anyhow::Result<()> {
        let t = it.number();
        self.judge(it)?;
        let vp = it.scores()?.visible_pass_at_1();
        if self.dir.best().is_none_or(|b| vp > b.pass_at_1) {
            self.repo.set_tag("best", evaluated)?;
            self.dir.write_best(&Best {
                iteration: t,
                commit: evaluated.to_string(),
                pass_at_1: vp,
            })?;
            self.say(format!("[iter {t}] new best: visible pass@1 = {vp:.3}"));
        }
        Ok(())
    }

    /// Automatic rollbacks, the Evolve agent's edits (manifest), and the pre-flight check.
    async fn evolve(
        &self,
        it: &IterationDir,
        evaluated: &str,
        cancel: &CancellationToken,
    ) -> anyhow::Result<()> {
        let t = it.number();
        // A resumed evolve phase starts again from the evaluated harness.
        self.repo.reset_worktree(evaluated)?;
        let ev = it.change_evaluation()?;
        let rollbacks = if self.cfg.evolve.rollback == "auto" && t > 1 {
            // The canary's culprits are not in the evaluated harness any more.
            let gone = it.evidence().canary_reverted();
            let mut ev = ev.clone();
            ev.changes.retain(|c| !gone.contains(&c.id));
            rollback::auto_rollback(&self.dir.iteration(t - 1), &self.repo, &ev, evaluated)?
        } else {
            rollback::Rollbacks::default()
        };
        for n in &rollbacks.notes {
            self.note(t, n.clone())?;
        }
        history::write_inputs(&self.dir, t, &self.visible)?;
        // The prompt names the evaluated harness by its tag (iter-NNN), not its commit id:
        // ids hash the commit time, and a replayed run must send byte-identical requests.
        let prompt = history::prompt_vars(&self.dir, t, &iter_tag(t - 1), &ev, &rollbacks.applied)?;
        let ec = &self.cfg.evolve;
        let model = ahe_model::build_client_with(&self.cfg.model("evolve"), &self.client_opts())?;
        let out = evolve::evolve(evolve::EvolveInputs {
            iteration: t,
            iter_dir: it,
            repo: &self.repo,
            evaluated,
            visible: &self.visible,
            rollbacks: &rollbacks.applied,
            prompt,
            model: model.clone(),
            max_turns: ec.evolve_max_turns,
            timeout: Duration::from_secs_f64(ec.evolve_timeout_sec),
            show_verifier_output: ec.show_verifier_output,
            caps: WriteCaps::of(ec),
            leak: crate::leak::LeakSettings::build(ec.leak_guard, &self.tasks, &self.holdout),
        })
        .await?;
        it.record_role_cost("evolve", &out.usage, out.cost_usd)?;
        for n in &out.notes {
            self.note(t, n.clone())?;
        }
        stop_on_permanent(Some(&model), "evolve")?;
        // Without budget the pre-flight trial would be refused and revert sound edits.
        if ec.preflight && !out.changed_files.is_empty() && self.budget_spent(t).is_none() {
            let start = rollbacks.start_tree(&self.repo, evaluated)?;
            preflight::preflight(self, it, &start, cancel.clone()).await?;
        }
        Ok(())
    }

    /// Commits the working tree (guarded) as a chain of one commit per change, the last
    /// tagged `iter-NNN`; writes the manifest with each change's commit, the diff and summary.
    async fn commit(&self, it: &IterationDir, evaluated: &str) -> anyhow::Result<()> {
        let t = it.number();
        // Files planted by other means than the jail's tools are caught here too.
        if !self.repo.has_tag(&iter_tag(t)) {
            for n in self
                .repo
                .guard(evaluated, &WriteCaps::of(&self.cfg.evolve))?
            {
                self.note(t, n)?;
            }
        }
        let done = chain::commit_iteration(&self.repo, it, evaluated)?;
        for n in done.notes {
            self.note(t, n)?;
        }
        let (m, id) = (&done.manifest, &done.head);
        let summary = history::summary_md(t, m, &self.journal, evaluated, id);
        it.write_commit_files(&self.repo.diff_patch(evaluated, id)?, &summary)
    }
}
