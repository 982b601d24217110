//! Oracle and nop runs of tasks through the real sandbox and verifier path.
//!
//! [`OracleAgent`] does what Harbor's `oracle` agent does: it uploads the task's `solution/`
//! to `/solution` and runs `bash /solution/solve.sh` in the task's WORKDIR (no stdin, the
//! task's agent timeout). [`NopAgent`] does nothing. [`run_checks`] runs each task through
//! [`run_trial`] (sandbox setup, agent, `/tests`, `test.sh`, reward) and judges the outcome:
//! the oracle must score reward 1, the nop agent reward 0.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use ahe_sandbox::{Backend, ExecOpts};
use serde::Serialize;
use tokio::sync::Semaphore;

use crate::task::Task;
use crate::trial::{
    run_trial, Agent, AgentContext, AgentEnd, AgentOutcome, TrialEnv, TrialResult, TrialStatus,
};

/// The command the oracle runs (as Harbor's oracle agent does).
pub const SOLVE_COMMAND: &str = "bash /solution/solve.sh";

/// Runs the task's reference solution.
pub struct OracleAgent;

#[async_trait::async_trait]
impl Agent for OracleAgent {
    async fn run(&self, ctx: AgentContext<'_>) -> AgentOutcome {
        if !ctx.task.has_solution {
            return AgentOutcome::ended(
                AgentEnd::Finished,
                Some("the task has no solution/solve.sh".into()),
            );
        }
        if let Err(e) = ctx.sandbox.put(&ctx.task.solution_dir(), "/solution").await {
            return AgentOutcome::ended(
                AgentEnd::InfraError,
                Some(format!("cannot upload solution/: {e}")),
            );
        }
        let opts = ExecOpts {
            timeout: Some(ctx.timeout),
            ..Default::default()
        };
        match ctx.sandbox.exec(SOLVE_COMMAND, opts).await {
            Ok(out) => {
                let log = format!(
                    "$ {SOLVE_COMMAND}\nexit: {:?}  timed out: {}  ({} ms)\n--- stdout\n{}\n--- stderr\n{}\n",
                    out.exit_code, out.timed_out, out.duration_ms, out.stdout, out.stderr
                );
                let _ = std::fs::write(ctx.trial_dir.join("oracle.log"), log);
                let end = if out.timed_out {
                    AgentEnd::Timeout
                } else {
                    AgentEnd::Finished
                };
                let error = (out.exit_code != Some(0))
                    .then(|| format!("solve.sh exited with {:?}", out.exit_code));
                AgentOutcome::ended(end, error)
            }
            Err(e) => AgentOutcome::ended(
                AgentEnd::InfraError,
                Some(format!("cannot run solve.sh: {e}")),
            ),
        }
    }
}

/// Does nothing: the verifier sees the untouched environment.
pub struct NopAgent;

#[async_trait::async_trait]
impl Agent for NopAgent {
    async fn run(&self, _ctx: AgentContext<'_>) -> AgentOutcome {
        AgentOutcome::ended(AgentEnd::Finished, None)
    }
}

/// Which run a check makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RunKind {
    /// The reference solution: must score reward 1.
    Oracle,
    /// No agent: must score reward 0.
    Nop,
}

impl RunKind {
    /// `oracle` or `nop`.
    pub fn as_str(self) -> &'static str {
        match self {
            RunKind::Oracle => "oracle",
            RunKind::Nop => "nop",
        }
    }

    /// Whether a trial result is what this run requires, and if not, why.
    pub fn judge(self, r: &TrialResult) -> Result<(), String> {
        let why = |what: &str| {
            let mut m = format!("{what} (status {}", r.status.as_str());
            if let Some(e) = &r.error {
                m.push_str(&format!(": {e}"));
            }
            m.push(')');
            m
        };
        match (self, r.reward) {
            (RunKind::Oracle, Some(x)) if x >= 1.0 && r.status == TrialStatus::Pass => Ok(()),
            (RunKind::Oracle, Some(x)) => Err(why(&format!("reward {x}, expected 1"))),
            (RunKind::Nop, Some(x)) if x <= 0.0 => Ok(()),
            (RunKind::Nop, Some(x)) => Err(why(&format!(
                "reward {x} with nothing done, expected 0: the verifier does not check the work"
            ))),
            (_, None) => Err(why("no reward")),
        }
    }
}

/// The outcome of one oracle or nop run.
#[derive(Debug, Clone, Serialize)]
pub struct RunCheck {
    /// Oracle or nop.
    pub kind: RunKind,
    /// Whether the run met its requirement.
    pub ok: bool,
    /// Trial status.
    pub status: TrialStatus,
    /// Verifier reward, if any.
    pub reward: Option<f64>,
    /// Why it is not ok.
    pub problem: Option<String>,
    /// Whole trial, in milliseconds.
    pub duration_ms: u64,
    /// The trial's directory (`result.json`, `verifier/`, `oracle.log`).
    pub trial_dir: PathBuf,
    /// Whether the trial was flagged suspect.
    pub suspect: bool,
    /// Whether the run was a hack of an adversarial task (ok = blocked or flagged).
    pub hack: bool,
}

/// Settings of [`run_checks`].
#[derive(Clone)]
pub struct RunOptions {
    /// Sandbox backend.
    pub backend: Arc<dyn Backend>,
    /// Runs to make per task, in order.
    pub kinds: Vec<RunKind>,
    /// Tasks checked at once (each task's runs are sequential: they share its image).
    pub concurrency: usize,
    /// Where trial directories go (`<task>/<kind>/`).
    pub out_dir: PathBuf,
    /// Agent timeout for tasks that set none.
    pub default_agent_timeout: Duration,
    /// Infra retries per trial.
    pub infra_retries: u32,
    /// The verifier hand-over and what a suspect trial becomes.
    pub verifier: crate::VerifierPolicy,
    /// Run name (sandbox labels).
    pub run: String,
}

/// Called after each run (task name and its result), e.g. for progress lines.
pub type RunProgress = Arc<dyn Fn(&str, &RunCheck) + Send + Sync>;

/// Runs every requested kind on every task; returns the results by task name.
pub async fn run_checks(
    tasks: &[Task],
    opts: &RunOptions,
    progress: RunProgress,
) -> BTreeMap<String, Vec<RunCheck>> {
    let sem = Arc::new(Semaphore::new(opts.concurrency.max(1)));
    let mut set = tokio::task::JoinSet::new();
    for task in tasks.iter().cloned() {
        let sem = sem.clone();
        let opts = opts.clone();
        let progress = progress.clone();
        set.spawn(async move {
            let _permit = sem.acquire_owned().await.ok();
            let mut out = Vec::new();
            for &kind in &opts.kinds {
                let c = run_one(&task, kind, &opts).await;
                progress(&task.name, &c);
                out.push(c);
            }
            (task.name.clone(), out)
        });
    }
    let mut results = BTreeMap::new();
    while let Some(j) = set.join_next().await {
        if let Ok((name, checks)) = j {
            results.insert(name, checks);
        }
    }
    opts.backend.drain().await;
    // A run that panicked still counts, as a failure.
    for task in tasks {
        let got = results.entry(task.name.clone()).or_default();
        for &kind in &opts.kinds {
            if !got.iter().any(|c| c.kind == kind) {
                got.push(RunCheck {
                    kind,
                    ok: false,
                    status: TrialStatus::InfraError,
                    reward: None,
                    problem: Some("the check run crashed (see the log above)".into()),
                    duration_ms: 0,
                    trial_dir: trial_dir(&opts.out_dir, &task.name, kind),
                    suspect: false,
                    hack: is_adversarial(task) && kind == RunKind::Oracle,
                });
            }
        }
    }
    results
}

/// One trial of one kind.
async fn run_one(task: &Task, kind: RunKind, opts: &RunOptions) -> RunCheck {
    let agent: Arc<dyn Agent> = match kind {
        RunKind::Oracle => Arc::new(OracleAgent),
        RunKind::Nop => Arc::new(NopAgent),
    };
    let env = TrialEnv {
        backend: opts.backend.clone(),
        agent,
        run: opts.run.clone(),
        default_agent_timeout: opts.default_agent_timeout,
        infra_retries: opts.infra_retries,
        verifier: opts.verifier,
        judge: None,
        disk: None,
    };
    let dir = trial_dir(&opts.out_dir, &task.name, kind);
    let r = run_trial(&env, task, 1, &dir).await;
    let judged = if kind == RunKind::Oracle && !task.has_solution {
        Err("no solution/solve.sh to run".to_string())
    } else if is_adversarial(task) && kind == RunKind::Oracle {
        judge_hack(&r)
    } else {
        kind.judge(&r).and_then(|()| match &r.suspect {
            Some(s) => Err(format!(
                "flagged suspect (a false alarm for an honest run): {}",
                s.reasons
                    .iter()
                    .map(|x| x.reason.as_str())
                    .collect::<Vec<_>>()
                    .join("; ")
            )),
            None => Ok(()),
        })
    };
    RunCheck {
        kind,
        ok: judged.is_ok(),
        status: r.status,
        reward: r.reward,
        problem: judged.err(),
        duration_ms: r.timings.total_ms,
        trial_dir: dir,
        suspect: r.suspect.is_some(),
        hack: is_adversarial(task) && kind == RunKind::Oracle,
    }
}

/// Whether a task belongs to an adversarial suite (`[metadata] category = "adversarial"`):
/// its `solution/solve.sh` is a hack that must not pass unflagged.
pub fn is_adversarial(task: &Task) -> bool {
    task.metadata.category.as_deref() == Some("adversarial")
}

/// A hack is blocked when its trial did not pass, or passed but was flagged suspect.
pub fn judge_hack(r: &TrialResult) -> Result<(), String> {
    if r.status == TrialStatus::Pass && r.suspect.is_none() {
        return Err(format!(
            "the hack PASSED unflagged (reward {}): the verifier's ground is not protected",
            r.reward.unwrap_or(0.0)
        ));
    }
    Ok(())
}

/// Directory of one check run: `<out>/<task>/<kind>`.
pub fn trial_dir(out_dir: &Path, task: &str, kind: RunKind) -> PathBuf {
    out_dir.join(task).join(kind.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(status: TrialStatus, reward: Option<f64>) -> TrialResult {
        let mut r = TrialResult::new("t", 1);
        r.status = status;
        r.reward = reward;
        r
    }

    #[test]
    fn oracle_needs_reward_1_and_nop_reward_0() {
        use TrialStatus::*;
        assert!(RunKind::Oracle.judge(&result(Pass, Some(1.0))).is_ok());
        assert!(RunKind::Oracle.judge(&result(Fail, Some(0.5))).is_err());
        assert!(RunKind::Oracle.judge(&result(InfraError, None)).is_err());
        assert!(RunKind::Nop.judge(&result(Fail, Some(0.0))).is_ok());
        let e = RunKind::Nop.judge(&result(Pass, Some(1.0))).unwrap_err();
        assert!(e.contains("nothing done"), "{e}");
        assert!(RunKind::Nop.judge(&result(Fail, Some(0.2))).is_err());
        let e = RunKind::Nop
            .judge(&result(VerifierError, None))
            .unwrap_err();
        assert!(
            e.contains("no reward") && e.contains("verifier_error"),
            "{e}"
        );
    }
}
