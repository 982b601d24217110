//! One trial: sandbox setup, agent, verifier, reward, status, `result.json`.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ahe_sandbox::{Backend, Sandbox, SandboxSpec};

pub use crate::record::{AgentEnd, AgentOutcome, ChangeSet, Timings, TrialResult, TrialStatus};

use crate::guard::Guard;
use crate::tamper::{self, OnSuspect, Suspect};
use crate::task::{EnvironmentMode, Task};
use crate::verify::{self, VerifierPolicy, VerifyError};

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
        let (mut r, lost_now) = run_once(env, task, attempt, dir).await;
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

/// A sandbox's host and why it was lost.
type Lost = (String, String);

/// One run of an attempt; also the host and reason when its sandbox was lost before the
/// verifier's reward was read (the result is then an infra error).
async fn run_once(
    env: &TrialEnv,
    task: &Task,
    attempt: u32,
    dir: &Path,
) -> (TrialResult, Option<Lost>) {
    let t0 = Instant::now();
    let mut r = TrialResult::new(&task.name, attempt);
    if let Err(e) = std::fs::create_dir_all(dir) {
        r.error = Some(format!("cannot create trial dir {}: {e}", dir.display()));
        return (r, None);
    }
    let spec = SandboxSpec {
        task: task.name.clone(),
        trial_id: r.trial_id.clone(),
        run: env.run.clone(),
        context_dir: task.environment.context_dir.clone(),
        docker_image: task.environment.docker_image.clone(),
        cpus: task.environment.cpus,
        memory_mb: task.environment.memory_mb,
        allow_internet: task.environment.allow_internet,
        env: Default::default(),
        build_timeout_sec: task.environment.build_timeout_sec,
        storage_mb: task.environment.storage_mb,
    };
    let sandbox = match env.backend.create(&spec).await {
        Ok(s) => s,
        Err(e) => {
            r.error = Some(e.to_string());
            r.timings.setup_ms = ms(t0);
            r.timings.total_ms = ms(t0);
            r.finished_at = crate::record::now();
            return (r, None);
        }
    };
    r.notes = sandbox.notes();
    r.host = sandbox.host();
    // The sandbox's disk use, watched from the host: the task's storage limit, and the
    // candidates the host reserve stops when the disk runs low.
    let limit = task.environment.storage_mb.filter(|m| *m > 0);
    let meter = if limit.is_some() || env.disk.is_some() {
        let dirs = sandbox.storage_dirs().await;
        if dirs.is_empty() {
            if let Some(mb) = limit {
                r.notes.push(format!(
                    "the storage limit ({mb} MiB) is watched only per file (RLIMIT_FSIZE): this host cannot see the sandbox's writable layer"
                ));
            }
            None
        } else {
            Some(ahe_sandbox::storage::Meter::start(dirs, limit))
        }
    } else {
        None
    };
    let _registered = env
        .disk
        .as_ref()
        .zip(meter.as_ref())
        .map(|(d, m)| d.register(&r.trial_id, m.clone()));
    let stopped = || async {
        match &meter {
            Some(m) => m.wait_stop().await,
            None => std::future::pending().await,
        }
    };
    // What tests/test.sh runs, fingerprinted before the agent can touch it.
    let programs = verify::replaceable(task, sandbox.as_ref());
    let before = verify::fingerprint(sandbox.as_ref(), &programs).await;
    // What the agent changes is judged against this snapshot of the sandbox's file system.
    let mut guard = match Guard::start(task, sandbox.as_ref()).await {
        Ok(g) => Some(g),
        Err(why) => {
            r.notes.push(why);
            None
        }
    };
    r.timings.setup_ms = ms(t0);

    let t_agent = Instant::now();
    let timeout = task
        .agent_timeout_sec
        .map(Duration::from_secs_f64)
        .unwrap_or(env.default_agent_timeout);
    let ctx = AgentContext {
        task,
        sandbox: sandbox.as_ref(),
        trial_dir: dir,
        timeout,
    };
    // The agent enforces its own deadline; this outer limit only guards against a stuck agent.
    // A sandbox lost meanwhile (its engine stopped answering) ends the agent at once.
    let agent = tokio::time::timeout(timeout + Duration::from_secs(30), env.agent.run(ctx));
    let outcome = tokio::select! {
        o = agent => match o {
            Ok(o) => o,
            Err(_) => {
                AgentOutcome::ended(AgentEnd::Timeout, Some("agent overran its deadline".into()))
            }
        },
        why = sandbox.wait_lost() => AgentOutcome::ended(AgentEnd::InfraError, Some(why)),
        stop = stopped() => stop_outcome(stop),
    };
    if matches!(outcome.end, AgentEnd::StorageLimit | AgentEnd::HostReserve) {
        // Nothing more runs in it: end every process now (the removal finishes below).
        sandbox.halt();
        let _ = sandbox.destroy().await;
    }
    r.timings.agent_ms = ms(t_agent);
    r.turns = outcome.turns;
    r.usage = outcome.usage;
    r.cost_usd = outcome.cost_usd;
    r.agent_end = Some(outcome.end.clone());
    r.agent_timed_out = outcome.end == AgentEnd::Timeout;

    if matches!(outcome.end, AgentEnd::StorageLimit) {
        // Over the limit: the agent's failure, with the reason; no verifier.
        r.status = TrialStatus::Fail;
        r.error = outcome.error;
    } else if matches!(
        outcome.end,
        AgentEnd::InfraError | AgentEnd::Fatal | AgentEnd::HostReserve
    ) || sandbox.lost().is_some()
    {
        r.error = outcome.error;
    } else {
        let t_ver = Instant::now();
        let mode = env.verifier.environment_mode.unwrap_or(task.verifier_mode);
        let mut separate_notes = Vec::new();
        let verified = async {
            if mode == EnvironmentMode::Separate {
                crate::separate::verify(
                    env.backend.as_ref(),
                    env.verifier,
                    task,
                    sandbox.as_ref(),
                    &spec,
                    dir,
                    &mut separate_notes,
                )
                .await
            } else {
                verify::verify(
                    task,
                    sandbox.as_ref(),
                    dir,
                    &env.verifier,
                    &programs,
                    &before,
                    guard.as_mut(),
                )
                .await
            }
        };
        // The verifier's writes count too: past the limit it is stopped like the agent.
        let verified = tokio::select! {
            v = verified => Ok(v),
            stop = stopped() => Err(stop),
        };
        r.notes.extend(separate_notes);
        let mut plan = None;
        if let Some(mut g) = guard.take() {
            plan = g.plan.take();
            r.timings.integrity_ms = g.spent_ms;
            r.change_set = Some(g.size.clone());
            r.notes.extend(g.notes);
        }
        match verified {
            Err(stop) => {
                sandbox.halt();
                let _ = sandbox.destroy().await;
                let o = stop_outcome(stop);
                if o.end == AgentEnd::StorageLimit {
                    r.status = TrialStatus::Fail;
                }
                r.agent_end = Some(o.end);
                r.error = o.error;
            }
            Ok(v) => {
                r.handover = v.handover;
                r.timings.handover_ms = v.handover_ms;
                r.witness = v.witness;
                let mut reasons = tamper::scan_trace(&crate::TrialDir::new(dir).trace_path());
                reasons.extend(v.suspect);
                match v.reward {
                    Ok(reward) => {
                        r.reward = Some(reward);
                        r.status = if reward >= 1.0 {
                            TrialStatus::Pass
                        } else if r.agent_timed_out {
                            TrialStatus::AgentTimeout
                        } else {
                            TrialStatus::Fail
                        };
                    }
                    Err(VerifyError::Infra(e)) => r.error = Some(e),
                    Err(VerifyError::Reward(e)) => {
                        r.status = TrialStatus::VerifierError;
                        r.error = Some(e);
                    }
                }
                if let (Some(plan), TrialStatus::Pass, false) = (plan, r.status, reasons.is_empty())
                {
                    r.timings.counterfactual_ms = crate::counterfactual::settle(
                        env.backend.as_ref(),
                        task,
                        sandbox.as_ref(),
                        &spec,
                        plan,
                        &env.verifier,
                        dir,
                        (&mut reasons, &mut r.notes),
                    )
                    .await;
                }
                if !reasons.is_empty() {
                    if env.verifier.on_suspect == OnSuspect::Fail && r.status == TrialStatus::Pass {
                        r.status = TrialStatus::Fail;
                        r.error = Some(format!(
                            "suspect (on_suspect = \"fail\"): {}",
                            reasons[0].reason
                        ));
                    }
                    r.suspect = Some(Suspect { reasons });
                }
            }
        }
        r.timings.verifier_ms = ms(t_ver);
    }
    // Nothing a lost sandbox did since its engine stopped answering says anything about the
    // work: unless the verifier's reward was read, the run is an infra error, re-run elsewhere.
    let lost = match (sandbox.lost(), r.reward) {
        (Some(why), None) => {
            r.status = TrialStatus::InfraError;
            r.error = Some(why.clone());
            Some((r.host.clone().unwrap_or_default(), why))
        }
        _ => None,
    };
    if let Some(m) = &meter {
        m.finish();
        r.disk = Some(m.stats());
    }
    let t_down = Instant::now();
    if let Err(e) = sandbox.destroy().await {
        tracing::warn!("{}: teardown failed: {e}", r.trial_id);
    }
    r.timings.teardown_ms = ms(t_down);
    r.timings.total_ms = ms(t0);
    r.finished_at = crate::record::now();
    (r, lost)
}

/// How a trial stopped from outside its agent ends.
fn stop_outcome(stop: ahe_sandbox::storage::Stop) -> AgentOutcome {
    use ahe_sandbox::storage::Stop;
    match stop {
        Stop::OverLimit(why) => AgentOutcome::ended(AgentEnd::StorageLimit, Some(why)),
        Stop::HostReserve(why) => AgentOutcome::ended(AgentEnd::HostReserve, Some(why)),
    }
}

fn ms(t: Instant) -> u64 {
    t.elapsed().as_millis() as u64
}
