//! The read model of a run: everything `ahe report` and `ahe show` say, loaded from the run
//! directory alone (docs/run-directory.md). Works on a finished, running or interrupted run: missing
//! files make an iteration "incomplete", and the journal says which phase did not finish.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use ahe_bench::scores::TaskScore;
use ahe_bench::{Scores, TaskStatus};
use anyhow::Context;
use rayon::prelude::*;
use serde::Serialize;

mod load;

use ahe_rundir::attribution::{ChangeEvaluation, ChangeVerdict, Verdict};
use ahe_rundir::clean::{self, CleanTrace};
use ahe_rundir::journal::{Entry, Journal, Phase};
use ahe_rundir::manifest::Manifest;
use ahe_rundir::run_dir::{Best, IterationDir, IterationRecord, RunDir};

/// Phases of an evolve iteration, in the order reports list them (counterfactual runs
/// before confirm since harm-first attribution; the listing keeps the older order).
pub const EVOLVE_PHASES: [Phase; 8] = [
    Phase::Rollout,
    Phase::Clean,
    Phase::Attribute,
    Phase::Confirm,
    Phase::Counterfactual,
    Phase::Debug,
    Phase::Evolve,
    Phase::Commit,
];

/// Phases of the final evaluation (iteration N+1).
pub const FINAL_PHASES: [Phase; 6] = [
    Phase::Rollout,
    Phase::Clean,
    Phase::Attribute,
    Phase::Confirm,
    Phase::Counterfactual,
    Phase::Final,
];

/// The model roles, in display order (`judge`: the optional trajectory judge; `overview`:
/// the benchmark overview's calls; `screen`: the trials that screen `[evolve] variants`).
pub const ROLES: [&str; 6] = [
    "code_agent",
    "debugger",
    "overview",
    "evolve",
    "screen",
    "judge",
];

/// Roles shown only when some iteration has them.
const OPTIONAL_ROLES: [&str; 3] = ["overview", "screen", "judge"];

/// snake_case name of a phase.
pub fn phase_name(p: Phase) -> &'static str {
    p.name()
}

pub use ahe_rundir::attribution::verdict_name;

/// Every verdict, best first.
pub const VERDICTS: [Verdict; 6] = [
    Verdict::Effective,
    Verdict::PartiallyEffective,
    Verdict::Ineffective,
    Verdict::Unjudged,
    Verdict::Mixed,
    Verdict::Harmful,
];

/// Facts from `run.toml` (read leniently: a field that is missing stays empty).
#[derive(Debug, Clone, Default, Serialize)]
pub struct RunInfo {
    /// Trials per task.
    pub k: u32,
    /// Planned evolve iterations N (the final evaluation is N+1).
    pub iterations: u32,
    /// Benchmark directory.
    pub benchmark: String,
    /// Sandbox backend.
    pub sandbox: String,
    /// Rollback policy (`agent` or `auto`).
    pub rollback: String,
    /// Budget in USD, if any.
    pub budget_usd: Option<f64>,
    /// No role's model names a price: dollars are unknown, not $0.
    pub cost_unknown: bool,
    /// Every role runs the embedded local model: no API cost at all.
    pub local_only: bool,
    /// The config names a trajectory judge (`[models.judge]`).
    pub judge: bool,
}

/// Said once for a run whose every role runs the embedded local model.
pub const LOCAL_COST: &str = "local model: no API cost";

/// Said instead of a dollar figure when the config names no prices.
pub const COST_UNKNOWN: &str = "cost unknown (no prices in the config)";

/// Where a run stopped short.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Incomplete {
    /// The first iteration that is not complete.
    pub iteration: u32,
    /// The phase that did not finish (or has missing outputs), if one did.
    pub phase: Option<String>,
    /// What is missing, in words.
    pub message: String,
}

/// Wall time of one phase of one iteration, from the journal.
#[derive(Debug, Clone, Serialize)]
pub struct PhaseTime {
    /// Phase name.
    pub phase: String,
    /// A `phase_start` was journaled.
    pub started: bool,
    /// A `phase_end` was journaled.
    pub finished: bool,
    /// Wall time of the finished phase.
    pub secs: Option<f64>,
}

/// Tokens and dollars of one role in one iteration (`scores.json` `meta.roles`).
#[derive(Debug, Clone, Default, Serialize)]
pub struct RoleUsage {
    /// Prompt tokens.
    pub input_tokens: u64,
    /// Completion tokens.
    pub output_tokens: u64,
    /// Dollars.
    pub cost_usd: f64,
}

/// One trial directory of an iteration.
#[derive(Debug, Clone, Serialize)]
pub struct TrialRef {
    /// Task name.
    pub task: String,
    /// 1-based attempt.
    pub attempt: u32,
    /// Whether `trace.clean.json` exists.
    pub cleaned: bool,
}

/// Which analysis and evolve files an iteration has (paths relative to the run dir).
#[derive(Debug, Clone, Default, Serialize)]
pub struct IterationFiles {
    /// `analysis/overview.md`.
    pub overview: Option<String>,
    /// `evolve/diff.patch`.
    pub diff: Option<String>,
    /// `evolve/summary.md`.
    pub summary: Option<String>,
    /// `analysis/detail/<task>.md`, by task.
    pub details: BTreeMap<String, String>,
}

/// Everything known about one iteration.
#[derive(Debug, Clone, Serialize)]
pub struct IterationReport {
    /// Iteration number (1-based).
    pub iteration: u32,
    /// The final evaluation (N+1): no debug, evolve or commit.
    pub is_final: bool,
    /// Commit of the evaluated harness (`evaluated.txt`).
    pub evaluated_commit: Option<String>,
    /// Phases in order with their wall times.
    pub phases: Vec<PhaseTime>,
    /// Every expected phase finished with its outputs on disk (or the run stopped here).
    pub complete: bool,
    /// Why not complete (None when complete).
    pub incomplete: Option<Incomplete>,
    /// Trial statuses from the journal, by task then attempt (known before `scores.json`).
    pub journal_trials: BTreeMap<String, BTreeMap<u32, String>>,
    /// `scores.json`.
    pub scores: Option<Scores>,
    /// The loop's record in `scores.json` (visible/held-out pass@1, roles...).
    #[serde(skip)]
    pub record: IterationRecord,
    /// `change_evaluation.json`: the previous iteration's changes judged on these scores.
    pub evaluation: Option<ChangeEvaluation>,
    /// `evolve/manifest.json`: the changes this iteration made.
    pub manifest: Option<Manifest>,
    /// Journal notes (reverted edits, rollbacks, budget...).
    pub notes: Vec<String>,
    /// Tokens and dollars per role.
    pub roles: BTreeMap<String, RoleUsage>,
    /// Attribution's extra trials (confirmation, counterfactual, canary) and their cost.
    #[serde(skip)]
    pub extra: ahe_rundir::evidence::SetCost,
    /// Analysis and evolve files present.
    pub files: IterationFiles,
    /// Trial directories, sorted by task then attempt.
    pub trials: Vec<TrialRef>,
    /// `evolve/variants.json`: the evolve step's variants and their screen (`[evolve]
    /// variants > 1`); None with one variant.
    pub variants: Option<ahe_rundir::variants::VariantsRecord>,
}

/// A task's k-trial result in one iteration (for the heatmap).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Cell {
    /// Trials passed.
    pub passed: u32,
    /// Trials run (or finished so far).
    pub k: u32,
    /// `pass`, `fail`, `infra`, or `running` (from the journal, scores not written yet).
    pub status: String,
}

impl IterationReport {
    /// Visible pass@1 and its interval (the headline; all tasks when nothing is held out).
    pub fn visible(&self) -> Option<(f64, [f64; 2])> {
        let s = self.scores.as_ref()?;
        let r = &self.record;
        Some((
            r.visible_pass_at_1.unwrap_or(s.pass_at_1),
            r.visible_pass_at_1_ci.unwrap_or(s.pass_at_1_ci),
        ))
    }

    /// Held-out pass@1 and its interval, when the run holds tasks out.
    pub fn holdout(&self) -> Option<(f64, [f64; 2])> {
        self.scores.as_ref()?;
        let p = self.record.holdout_pass_at_1?;
        Some((p, self.record.holdout_pass_at_1_ci.unwrap_or([p, p])))
    }

    /// A warning line when trials were flagged suspect (they touched the verifier's ground).
    pub fn suspect_line(&self) -> Option<String> {
        let s = self.scores.as_ref().filter(|s| s.suspect_trials > 0)?;
        // Since scores carry `pass_at_1_raw`, pass@1 counts suspect passes as failures; older
        // scores counted them (their clean figure is `pass_at_1_excluding_suspect`).
        let (clean, raw) = if s.pass_at_1_raw >= s.pass_at_1 && s.pass_at_1_raw > 0.0 {
            (Some(s.pass_at_1), s.pass_at_1_raw)
        } else {
            (s.pass_at_1_excluding_suspect, s.pass_at_1)
        };
        Some(format!(
            "SUSPECT: {} trial(s) touched the verifier's ground; pass@1 counts them as failures: \
             {} (with their passes: {})",
            s.suspect_trials,
            clean.map_or("n/a".into(), crate::numbers::f3),
            crate::numbers::f3(raw)
        ))
    }

    /// Count of each verdict among the changes judged in this iteration.
    pub fn verdict_counts(&self) -> BTreeMap<&'static str, usize> {
        let mut m = BTreeMap::new();
        for c in self.evaluation.iter().flat_map(|e| &e.changes) {
            *m.entry(verdict_name(c.verdict)).or_default() += 1;
        }
        m
    }

    /// Dollars of every role.
    pub fn cost_usd(&self) -> f64 {
        self.roles.values().map(|r| r.cost_usd).sum()
    }

    /// Sum of the finished phases' wall times.
    pub fn wall_sec(&self) -> f64 {
        self.phases.iter().filter_map(|p| p.secs).sum()
    }

    /// The task's result: from `scores.json`, else from the journal's finished trials.
    pub fn cell(&self, task: &str) -> Option<Cell> {
        if let Some(t) = self.scores.as_ref().and_then(|s| s.tasks.get(task)) {
            return Some(Cell {
                passed: t.passed,
                k: t.k,
                status: status_name(t.status).into(),
            });
        }
        let j = self.journal_trials.get(task)?;
        Some(Cell {
            passed: j.values().filter(|s| *s == "pass").count() as u32,
            k: j.len() as u32,
            status: "running".into(),
        })
    }

    /// The task's scores, if scored.
    pub fn task(&self, task: &str) -> Option<&TaskScore> {
        self.scores.as_ref()?.tasks.get(task)
    }

    /// How the task moved since the previous iteration (`fixed`, `regressed`, `improved`,
    /// `worsened`, `infra`), per `change_evaluation.json`.
    pub fn task_move(&self, task: &str) -> Option<&'static str> {
        let e = self.evaluation.as_ref()?;
        let has = |v: &[ahe_rundir::attribution::TaskMove]| v.iter().any(|m| m.task == task);
        [
            (&e.fixed, "fixed"),
            (&e.regressed, "regressed"),
            (&e.improved, "improved"),
            (&e.worsened, "worsened"),
            (&e.infra_changes, "infra"),
        ]
        .into_iter()
        .find(|(v, _)| has(v))
        .map(|(_, n)| n)
    }

    /// Directory of a trial, relative to the run dir.
    pub fn trial_rel(&self, task: &str, attempt: u32) -> String {
        let it = IterationDir::at(Path::new(&format!("{:03}", self.iteration)));
        it.rel(it.trial(task, attempt).path())
    }

    /// `scores.json`, relative to the run dir.
    pub fn scores_rel(&self) -> String {
        let it = IterationDir::at(Path::new(&format!("{:03}", self.iteration)));
        it.rel(&it.eval().scores_path())
    }
}

/// snake_case name of a task status.
pub fn status_name(s: TaskStatus) -> &'static str {
    match s {
        TaskStatus::Pass => "pass",
        TaskStatus::Fail => "fail",
        TaskStatus::Infra => "infra",
    }
}

/// A whole run, read from its directory.
#[derive(Debug, Clone, Serialize)]
pub struct RunReport {
    /// The run directory.
    pub dir: PathBuf,
    /// Run name (the directory's name).
    pub name: String,
    /// Facts from `run.toml`.
    pub info: RunInfo,
    /// Model of the code agent (from `scores.json` meta, else empty).
    pub model: String,
    /// `best.json`.
    pub best: Option<Best>,
    /// `final.json`: best, seed and runner-up on fresh trials.
    pub final_eval: Option<ahe_rundir::final_eval::FinalEval>,
    /// `baseline/baseline.json`: the matched-budget comparison.
    pub baseline: Option<ahe_rundir::final_eval::Baseline>,
    /// Why the run ended (`completed`, `budget`...); None while running or interrupted.
    pub ended: Option<String>,
    /// The first iteration that is not complete, if any.
    pub incomplete: Option<Incomplete>,
    /// Iterations 1.. that exist on disk or in the journal.
    pub iterations: Vec<IterationReport>,
    /// Every task seen, sorted.
    pub tasks: Vec<String>,
    /// Held-out tasks.
    pub holdout: BTreeSet<String>,
}

impl RunReport {
    /// The roles the report shows: the three agent roles, and the trajectory judge when it
    /// ran in some iteration.
    pub fn roles(&self) -> Vec<&'static str> {
        ROLES
            .into_iter()
            .filter(|r| {
                !OPTIONAL_ROLES.contains(r)
                    || self.iterations.iter().any(|i| i.roles.contains_key(*r))
            })
            .collect()
    }

    /// A dollar cell: `$0.1234`, or `unknown` when the config names no prices.
    pub fn usd(&self, v: f64) -> String {
        if self.info.cost_unknown {
            "unknown".into()
        } else {
            crate::numbers::usd(v)
        }
    }

    /// The run's total cost, or [`COST_UNKNOWN`].
    pub fn cost_text(&self) -> String {
        if self.info.local_only {
            LOCAL_COST.into()
        } else if self.info.cost_unknown {
            COST_UNKNOWN.into()
        } else {
            crate::numbers::usd(self.cost_usd())
        }
    }

    /// Loads a run directory (iterations in parallel). Fails only when `dir` is not a run
    /// (neither `journal.jsonl` nor `run.toml` nor `iterations/`).
    pub fn load(dir: &Path) -> anyhow::Result<RunReport> {
        let rd = RunDir::new(dir);
        let journal_path = rd.journal_path();
        if !rd.looks_like_run() {
            anyhow::bail!(
                "{}: not a run directory (no journal.jsonl, run.toml or iterations/)",
                dir.display()
            );
        }
        let entries = Journal::read(&journal_path);
        let info = load::read_info(&rd.config_path());
        let ended = entries.iter().rev().find_map(|e| match e {
            Entry::RunEnd { reason, .. } => Some(reason.clone()),
            _ => None,
        });
        let mut max_iter = 0u32;
        for e in &entries {
            if let Entry::PhaseStart { iter, .. }
            | Entry::PhaseEnd { iter, .. }
            | Entry::TrialDone { iter, .. }
            | Entry::Note { iter, .. } = e
            {
                max_iter = max_iter.max(*iter);
            }
        }
        max_iter = max_iter.max(rd.last_iteration_on_disk());
        let n = info.iterations;
        let mut iterations: Vec<IterationReport> = (1..=max_iter)
            .into_par_iter()
            .map(|t| load::load_iteration(&rd.iteration(t), n, &entries, ended.is_some()))
            .collect();
        iterations.sort_by_key(|i| i.iteration);
        let mut incomplete = iterations.iter().find_map(|i| i.incomplete.clone());
        if incomplete.is_none() && ended.is_none() {
            // Every phase so far finished, but the run did not end: the next one is pending.
            let next = match iterations.last() {
                None => 1,
                Some(l) if l.is_final => l.iteration,
                Some(l) => l.iteration + 1,
            };
            incomplete = Some(Incomplete {
                iteration: next,
                phase: None,
                message: format!(
                    "the run has not ended (still running, or interrupted): iteration {next} has not started or not finished"
                ),
            });
        }
        let mut tasks: BTreeSet<String> = BTreeSet::new();
        let mut holdout: BTreeSet<String> = BTreeSet::new();
        let mut model = String::new();
        for it in &iterations {
            if let Some(s) = &it.scores {
                tasks.extend(s.tasks.keys().cloned());
                holdout.extend(it.record.holdout_tasks.iter().flatten().cloned());
                if let Some(m) = &s.meta.model {
                    model = m.clone();
                }
            }
            tasks.extend(it.journal_trials.keys().cloned());
        }
        Ok(RunReport {
            dir: dir.to_path_buf(),
            name: rd.name(),
            info,
            model,
            best: rd.best(),
            final_eval: rd.final_eval(),
            baseline: rd.baseline_record(),
            ended,
            incomplete,
            iterations,
            tasks: tasks.into_iter().collect(),
            holdout,
        })
    }

    /// What the run's trials were checked with (`ahe_bench::coverage::report_line`): `None`
    /// when no trial recorded it (nothing verified yet, or a run of an older ahe).
    pub fn integrity_line(&self) -> Option<String> {
        let (mut trials, mut unchecked) = (0usize, 0usize);
        for it in &self.iterations {
            for t in it.scores.iter().flat_map(|s| s.tasks.values()) {
                for tr in &t.trials {
                    if let Some(c) = tr.checked {
                        trials += 1;
                        unchecked += usize::from(!c);
                    }
                }
            }
        }
        (trials > 0).then(|| ahe_bench::coverage::report_line(trials, unchecked, self.info.judge))
    }

    /// The closing evidence: why best is best, its re-evaluation, the baseline.
    pub fn closing(&self) -> Vec<String> {
        crate::closing::lines(
            self.best.as_ref(),
            self.final_eval.as_ref(),
            self.baseline.as_ref(),
        )
    }

    /// The iteration with number `t`.
    pub fn iteration(&self, t: u32) -> Option<&IterationReport> {
        self.iterations.iter().find(|i| i.iteration == t)
    }

    /// The verdict given (in iteration t+1) to change `id` made in iteration `t`.
    pub fn outcome(&self, t: u32, id: &str) -> Option<&ChangeVerdict> {
        self.iteration(t + 1)?
            .evaluation
            .as_ref()?
            .changes
            .iter()
            .find(|c| c.id == id)
    }

    /// Visible tasks (every task that is not held out).
    pub fn visible_tasks(&self) -> Vec<&String> {
        self.tasks
            .iter()
            .filter(|t| !self.holdout.contains(*t))
            .collect()
    }

    /// Dollars of every role over every iteration.
    pub fn cost_usd(&self) -> f64 {
        self.iterations.iter().map(|i| i.cost_usd()).sum()
    }

    /// Sum of every finished phase's wall time.
    pub fn wall_sec(&self) -> f64 {
        self.iterations.iter().map(|i| i.wall_sec()).sum()
    }

    /// Whether `t` is the best iteration.
    pub fn is_best(&self, t: u32) -> bool {
        self.best.as_ref().is_some_and(|b| b.iteration == t)
    }

    /// Status of the run in one word: `complete`, `stopped` (ended early, e.g. on budget)
    /// or `incomplete`.
    pub fn status(&self) -> &'static str {
        match (&self.ended, &self.incomplete) {
            (_, Some(_)) => "incomplete",
            (Some(r), None) if r != "completed" => "stopped",
            _ => "complete",
        }
    }

    /// Reads one trial's clean trace (`trace.clean.json`, or cleaned on the fly from
    /// `trace.jsonl` + `result.json` when the Clean phase has not run yet).
    pub fn trial(&self, t: u32, task: &str, attempt: u32) -> anyhow::Result<CleanTrace> {
        let trial = RunDir::new(&self.dir).iteration(t).trial(task, attempt);
        let d = trial.path();
        if !d.is_dir() {
            anyhow::bail!(
                "no trial {task} #{attempt} in iteration {t} ({} does not exist)",
                d.display()
            );
        }
        clean::read_clean(d)
            .or_else(|_| clean::clean_trial(d))
            .with_context(|| format!("trial {task} #{attempt} of iteration {t}"))
    }
}
