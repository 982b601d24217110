//! Running k trials of many tasks concurrently and writing the trial tree and `scores.json`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::scores::{self, Scores};
use crate::task::Task;
use crate::trial::{run_trial, TrialEnv, TrialResult, TrialStatus};

/// A progress event, for bars and logs.
#[derive(Debug, Clone)]
pub enum Progress {
    /// The evaluation starts with this many trials.
    Start {
        /// Trials to run.
        total: usize,
    },
    /// A trial finished.
    TrialDone {
        /// Its result.
        result: Box<TrialResult>,
    },
    /// A new stage of a longer job begins (e.g. a phase of an evolve iteration).
    Stage {
        /// What it is, e.g. `iter 2/4 rollout`.
        label: String,
        /// Dollars the job spent before this stage (all roles).
        spent_usd: f64,
    },
    /// A line for the researcher (a note, a new best...).
    Message {
        /// The text.
        text: String,
    },
}

/// Options of one evaluation.
#[derive(Clone)]
pub struct EvalOptions {
    /// Trials per task.
    pub k: u32,
    /// Trials running at once.
    pub concurrency: usize,
    /// Where `trials/` and `scores.json` go.
    pub out_dir: PathBuf,
    /// Stops starting new trials when cancelled (running ones are abandoned and torn down).
    pub cancel: CancellationToken,
    /// Trials already finished (e.g. before a crash): not run again, but scored.
    pub prior: Vec<TrialResult>,
}

/// Directory of one trial inside an evaluation's output dir.
pub fn trial_dir(out_dir: &Path, task: &str, attempt: u32) -> PathBuf {
    out_dir.join("trials").join(task).join(attempt.to_string())
}

/// Runs `k` attempts of every task; returns the scores (also written to `scores.json`).
/// Cancelled runs return an error after writing nothing but the finished trials.
pub async fn run_eval(
    env: TrialEnv,
    tasks: &[Task],
    opts: &EvalOptions,
    progress: Arc<dyn Fn(Progress) + Send + Sync>,
) -> anyhow::Result<Scores> {
    let t0 = Instant::now();
    std::fs::create_dir_all(&opts.out_dir)?;
    let sem = Arc::new(Semaphore::new(opts.concurrency.max(1)));
    let mut set = tokio::task::JoinSet::new();
    // Attempts outermost: each task's first trial starts before any second one.
    let done: std::collections::HashSet<(String, u32)> = opts
        .prior
        .iter()
        .map(|r| (r.task.clone(), r.attempt))
        .collect();
    let jobs: Vec<(Task, u32)> = (1..=opts.k)
        .flat_map(|a| tasks.iter().map(move |t| (t.clone(), a)))
        .filter(|(t, a)| !done.contains(&(t.name.clone(), *a)))
        .collect();
    progress(Progress::Start { total: jobs.len() });
    for (task, attempt) in jobs {
        let sem = sem.clone();
        let env = env.clone();
        let dir = trial_dir(&opts.out_dir, &task.name, attempt);
        let cancel = opts.cancel.clone();
        let progress = progress.clone();
        set.spawn(async move {
            let _permit = tokio::select! {
                p = sem.acquire_owned() => p.ok()?,
                _ = cancel.cancelled() => return None,
            };
            let r = tokio::select! {
                r = run_trial(&env, &task, attempt, &dir) => r,
                _ = cancel.cancelled() => return None,
            };
            progress(Progress::TrialDone {
                result: Box::new(r.clone()),
            });
            Some(r)
        });
    }
    let mut results: Vec<TrialResult> = opts
        .prior
        .iter()
        .filter(|r| tasks.iter().any(|t| t.name == r.task) && r.attempt <= opts.k)
        .cloned()
        .collect();
    while let Some(j) = set.join_next().await {
        if let Ok(Some(r)) = j {
            results.push(r);
        }
    }
    if opts.cancel.is_cancelled() {
        anyhow::bail!(
            "interrupted: {} of {} trials finished (kept under {})",
            results.len(),
            tasks.len() * opts.k as usize,
            opts.out_dir.join("trials").display()
        );
    }
    if let Some(fatal) = results
        .iter()
        .find(|r| r.agent_end == Some(crate::trial::AgentEnd::Fatal))
    {
        anyhow::bail!(
            "the model cannot be used: {}",
            fatal.error.as_deref().unwrap_or("permanent model error")
        );
    }
    let s = scores::compute(opts.k, &results, t0.elapsed().as_secs_f64());
    Ok(s)
}

/// Writes `scores.json` atomically.
pub fn write_scores(out_dir: &Path, s: &Scores) -> std::io::Result<()> {
    let tmp = out_dir.join("scores.json.tmp");
    std::fs::write(&tmp, serde_json::to_vec_pretty(s)?)?;
    std::fs::rename(tmp, out_dir.join("scores.json"))
}

/// A plain-text per-task table of scores.
pub fn table(s: &Scores) -> String {
    let w = s.tasks.keys().map(|k| k.len()).max().unwrap_or(4).max(4);
    let mut out = format!(
        "{:<w$}  {:>6}  {:<6}  {}\n",
        "task", "passed", "status", "trials"
    );
    for (name, t) in &s.tasks {
        let trials: Vec<&str> = t
            .trials
            .iter()
            .map(|x| match x.status {
                TrialStatus::Pass => "pass",
                TrialStatus::Fail => "fail",
                TrialStatus::AgentTimeout => "timeout",
                TrialStatus::InfraError => "infra",
                TrialStatus::VerifierError => "verr",
            })
            .collect();
        out.push_str(&format!(
            "{:<w$}  {:>6}  {:<6}  {}\n",
            name,
            format!("{}/{}", t.passed, t.k),
            serde_json::to_value(t.status)
                .unwrap()
                .as_str()
                .unwrap_or(""),
            trials.join(" ")
        ));
    }
    out.push_str(&format!(
        "pass@1 = {:.3}  (95% CI {:.3}–{:.3}, {} tasks × k={})\n",
        s.pass_at_1, s.pass_at_1_ci[0], s.pass_at_1_ci[1], s.n_tasks, s.k
    ));
    out
}
