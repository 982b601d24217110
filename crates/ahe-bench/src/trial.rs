//! One trial: its attempts (infra retries, re-runs of lost hosts and reserve stops) around
//! [`stages::run_once`], the trial protocol as named stages, and `result.json`.

mod stages;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use ahe_sandbox::{Backend, Sandbox};

pub use crate::record::{AgentEnd, AgentOutcome, ChangeSet, Timings, TrialResult, TrialStatus};

use crate::task::Task;
use crate::verify::VerifierPolicy;

/// Everything an agent gets for one trial.
pub struct AgentContext<'a> {
    /// The task.
    pub task: &'a Task,
    /// The trial's sandbox.
    pub sandbox: &'a dyn Sandbox,
    /// Host directory for `trace.jsonl` and `agent.log`.
    pub trial_dir: &'a Path,
    /// Wall-time budget of the agent.
    pub timeout: Duration,
}

/// Something that works on a task inside a sandbox (the harness runtime, or a test double).
#[async_trait::async_trait]
pub trait Agent: Send + Sync {
    /// Runs until the agent stops; must respect `ctx.timeout` itself.
    async fn run(&self, ctx: AgentContext<'_>) -> AgentOutcome;
}

/// Static facts a trial needs besides the task.
#[derive(Clone)]
pub struct TrialEnv {
    /// Sandbox backend.
    pub backend: Arc<dyn Backend>,
    /// The agent.
    pub agent: Arc<dyn Agent>,
    /// Run name (sandbox labels).
    pub run: String,
    /// Agent timeout when the task sets none.
    pub default_agent_timeout: Duration,
    /// How many times an infra error is retried.
    pub infra_retries: u32,
    /// The verifier hand-over and what a suspect trial becomes.
    pub verifier: VerifierPolicy,
    /// The optional trajectory judge of passing trials (`[models.judge]`).
    pub judge: Option<Arc<dyn crate::judge::TrialJudge>>,
    /// The host reserve (`[sandbox] min_free_disk`); `None`: off.
    pub disk: Option<Arc<crate::disk::DiskReserve>>,
}

/// How often one attempt is re-run because the docker host it ran on stopped answering
/// (apart from `infra_retries`: a lost engine says nothing about the harness).
pub const MAX_HOST_LOSSES: usize = 5;

/// Runs one attempt of a task (with infra retries, and re-runs of attempts whose docker host
/// was lost) and writes `result.json` into `dir`.
pub async fn run_trial(env: &TrialEnv, task: &Task, attempt: u32, dir: &Path) -> TrialResult {
    let mut retries = 0;
    let mut lost: Vec<(String, String)> = Vec::new();
    let mut reserve_stops: Vec<String> = Vec::new();
    loop {
        // No trial starts while the host is below its disk reserve.
        if let Some(d) = &env.disk {
            d.wait_room().await;
        }
        let _ = std::fs::remove_dir_all(dir);
        let (mut r, lost_now) = stages::run_once(env, task, attempt, dir).await;
        r.infra_retries = retries;
        r.lost_hosts = lost.iter().map(|(h, _)| h.clone()).collect();
        let earlier = lost
            .iter()
            .map(|(_, why)| format!("an earlier run of this attempt was lost and re-run: {why}"))
            .chain(
                reserve_stops.iter().map(|why| {
                    format!("an earlier run of this attempt was stopped and re-run: {why}")
                }),
            )
            .collect::<Vec<_>>();
        r.notes.splice(0..0, earlier);
        // A trial stopped for the host reserve says nothing about the work: re-run it once
        // space returns (not an infra retry), a few times at most.
        if r.agent_end == Some(AgentEnd::HostReserve) {
            if reserve_stops.len() < crate::disk::MAX_STOPS as usize {
                tracing::warn!("{}: {}", r.trial_id, r.error.as_deref().unwrap_or("?"));
                reserve_stops.push(r.error.clone().unwrap_or_default());
                continue;
            }
            if let Some(e) = &mut r.error {
                e.push_str(&format!(
                    " (stopped {} times for the reserve: not re-run again)",
                    crate::disk::MAX_STOPS + 1
                ));
            }
            write_result(dir, &r);
            return r;
        }
        if let Some((host, why)) = lost_now {
            if lost.len() < MAX_HOST_LOSSES {
                tracing::warn!("{}: lost ({why}); re-running it", r.trial_id);
                lost.push((host, why));
                continue;
            }
            r.lost_hosts.push(host);
        }
        let fatal = r.agent_end == Some(AgentEnd::Fatal);
        if r.status != TrialStatus::InfraError || retries >= env.infra_retries || fatal {
            if let (Some(j), TrialStatus::Pass) = (&env.judge, r.status) {
                j.judge(task, dir, &mut r).await;
            }
            write_result(dir, &r);
            return r;
        }
        retries += 1;
        tracing::warn!(
            "{}: infra error ({}); retrying ({retries}/{})",
            r.trial_id,
            r.error.as_deref().unwrap_or("?"),
            env.infra_retries
        );
    }
}

/// Writes `result.json` (atomically: temp file then rename).
pub fn write_result(dir: &Path, r: &TrialResult) {
    crate::layout::TrialDir::new(dir).write_result(r)
}
