//! One run of an attempt, as the trial protocol: [`run_once`] reads top to bottom as the
//! stages — create the sandbox, run the agent, verify (hand-over, snapshot, verifier, the
//! change set judged), say whether the run was lost, tear down — each a function of its own
//! whose doc line says what it may touch.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ahe_sandbox::storage::{Meter, Stop};
use ahe_sandbox::{Sandbox, SandboxSpec};

use super::{AgentContext, AgentEnd, AgentOutcome, TrialEnv, TrialResult, TrialStatus};
use crate::counterfactual::Plan;
use crate::guard::Guard;
use crate::tamper::{self, Fingerprint, OnSuspect, Suspect, SuspectReason};
use crate::task::{EnvironmentMode, Task};
use crate::verify::{self, Verified, VerifyError};

/// A sandbox's host and why it was lost.
pub(super) type Lost = (String, String);

/// A trial whose sandbox is up: what the stages after [`create`] share.
struct Live {
    /// The spec the sandbox was made from (a separate verifier or a counterfactual copy
    /// starts from it too).
    spec: SandboxSpec,
    sandbox: Box<dyn Sandbox>,
    /// The sandbox's disk use, watched from the host (`None`: no limit and no reserve, or
    /// this host cannot see its writable storage).
    meter: Option<Arc<Meter>>,
    /// Held while the trial runs: the host reserve may stop it.
    _registered: Option<crate::disk::Registration>,
    /// What tests/test.sh runs, and its fingerprint taken before the agent could touch it.
    programs: Vec<String>,
    before: Fingerprint,
    /// The snapshot the agent's changes are judged against (`None`: no change checks).
    guard: Option<Guard>,
}

/// Resolves when the storage meter stops the trial (never without a meter).
async fn stopped(meter: &Option<Arc<Meter>>) -> Stop {
    match meter {
        Some(m) => m.wait_stop().await,
        None => std::future::pending().await,
    }
}

/// One run of an attempt; also the host and reason when its sandbox was lost before the
/// verifier's reward was read (the result is then an infra error).
pub(super) async fn run_once(
    env: &TrialEnv,
    task: &Task,
    attempt: u32,
    dir: &Path,
) -> (TrialResult, Option<Lost>) {
    let t0 = Instant::now();
    let mut r = TrialResult::new(&task.name, attempt);
    let Some(mut live) = create(env, task, dir, &mut r).await else {
        r.timings.setup_ms = ms(t0);
        r.timings.total_ms = ms(t0);
        r.finished_at = crate::record::now();
        return (r, None);
    };
    r.timings.setup_ms = ms(t0);
    let outcome = run_agent(env, task, dir, &live, &mut r).await;
    match outcome.end {
        // Over the limit: the agent's failure, with the reason; no verifier.
        AgentEnd::StorageLimit => {
            r.status = TrialStatus::Fail;
            r.error = outcome.error;
        }
        AgentEnd::InfraError | AgentEnd::Fatal | AgentEnd::HostReserve => r.error = outcome.error,
        _ if live.sandbox.lost().is_some() => r.error = outcome.error,
        _ => verify_and_judge(env, task, dir, &mut live, &mut r).await,
    }
    let lost = lost_unless_scored(&live, &mut r);
    tear_down(live, &mut r, t0).await;
    (r, lost)
}

/// Stage 1, create: the trial dir, the sandbox, its storage meter, the fingerprint of the
/// verifier's programs and the change checks' snapshot. Touches only the new sandbox and `r`
/// (its error when nothing could be made: `None`).
async fn create(env: &TrialEnv, task: &Task, dir: &Path, r: &mut TrialResult) -> Option<Live> {
    if let Err(e) = std::fs::create_dir_all(dir) {
        r.error = Some(format!("cannot create trial dir {}: {e}", dir.display()));
        return None;
    }
    let e = &task.environment;
    let spec = SandboxSpec {
        task: task.name.clone(),
        trial_id: r.trial_id.clone(),
        run: env.run.clone(),
        context_dir: e.context_dir.clone(),
        docker_image: e.docker_image.clone(),
        cpus: e.cpus,
        memory_mb: e.memory_mb,
        allow_internet: e.allow_internet,
        env: Default::default(),
        build_timeout_sec: e.build_timeout_sec,
        storage_mb: e.storage_mb,
    };
    let sandbox = match env.backend.create(&spec).await {
        Ok(s) => s,
        Err(e) => {
            r.error = Some(e.to_string());
            return None;
        }
    };
    r.notes = sandbox.notes();
    r.host = sandbox.host();
    let meter = watch_storage(env, task, sandbox.as_ref(), r).await;
    let registered =
        (env.disk.as_ref().zip(meter.as_ref())).map(|(d, m)| d.register(&r.trial_id, m.clone()));
    let programs = verify::replaceable(task, sandbox.as_ref());
    let before = verify::fingerprint(sandbox.as_ref(), &programs).await;
    let guard = match Guard::start(task, sandbox.as_ref()).await {
        Ok(g) => Some(g),
        Err(why) => {
            r.notes.push(why);
            None
        }
    };
    Some(Live {
        spec,
        sandbox,
        meter,
        _registered: registered,
        programs,
        before,
        guard,
    })
}

/// The sandbox's disk use, watched from the host: the task's storage limit, and the
/// candidates the host reserve stops when the disk runs low. Adds a note to `r` when a limit
/// can be watched only per file.
async fn watch_storage(
    env: &TrialEnv,
    task: &Task,
    sandbox: &dyn Sandbox,
    r: &mut TrialResult,
) -> Option<Arc<Meter>> {
    let limit = task.environment.storage_mb.filter(|m| *m > 0);
    if limit.is_none() && env.disk.is_none() {
        return None;
    }
    let dirs = sandbox.storage_dirs().await;
    if dirs.is_empty() {
        if let Some(mb) = limit {
            r.notes.push(format!(
                "the storage limit ({mb} MiB) is watched only per file (RLIMIT_FSIZE): this host cannot see the sandbox's writable layer"
            ));
        }
        return None;
    }
    Some(Meter::start(dirs, limit))
}

/// Stage 2, the agent: runs it within its deadline, ended early when the sandbox is lost or
/// the storage meter stops it (the sandbox is then halted and removed). Touches the sandbox
/// (through the agent), the trial dir (its trace and log) and the agent's fields of `r`.
async fn run_agent(
    env: &TrialEnv,
    task: &Task,
    dir: &Path,
    live: &Live,
    r: &mut TrialResult,
) -> AgentOutcome {
    let t_agent = Instant::now();
    let timeout = task
        .agent_timeout_sec
        .map(Duration::from_secs_f64)
        .unwrap_or(env.default_agent_timeout);
    let ctx = AgentContext {
        task,
        sandbox: live.sandbox.as_ref(),
        trial_dir: dir,
        timeout,
    };
    // The agent enforces its own deadline; this outer limit only guards against a stuck agent.
    let agent = tokio::time::timeout(timeout + Duration::from_secs(30), env.agent.run(ctx));
    let outcome = tokio::select! {
        o = agent => o.unwrap_or_else(|_| {
            AgentOutcome::ended(AgentEnd::Timeout, Some("agent overran its deadline".into()))
        }),
        why = live.sandbox.wait_lost() => AgentOutcome::ended(AgentEnd::InfraError, Some(why)),
        stop = stopped(&live.meter) => stop_outcome(stop),
    };
    if matches!(outcome.end, AgentEnd::StorageLimit | AgentEnd::HostReserve) {
        // Nothing more runs in it: end every process now (the removal finishes at teardown).
        live.sandbox.halt();
        let _ = live.sandbox.destroy().await;
    }
    r.timings.agent_ms = ms(t_agent);
    r.turns = outcome.turns;
    r.usage = outcome.usage;
    r.cost_usd = outcome.cost_usd;
    r.agent_end = Some(outcome.end.clone());
    r.agent_timed_out = outcome.end == AgentEnd::Timeout;
    outcome
}

/// Stage 3, verify: the hand-over, the snapshot after it, the verifier (in this sandbox or a
/// separate one), stopped like the agent past the storage limit; then the change set is
/// judged ([`score`]). Touches the sandbox, the trial dir's `verifier/` and `r`.
async fn verify_and_judge(
    env: &TrialEnv,
    task: &Task,
    dir: &Path,
    live: &mut Live,
    r: &mut TrialResult,
) {
    let t_ver = Instant::now();
    let mode = env.verifier.environment_mode.unwrap_or(task.verifier_mode);
    let mut separate_notes = Vec::new();
    let (spec, sandbox, programs) = (&live.spec, &live.sandbox, &live.programs);
    let (before, guard) = (&live.before, &mut live.guard);
    let verified = async {
        if mode == EnvironmentMode::Separate {
            let b = env.backend.as_ref();
            let (sb, notes) = (sandbox.as_ref(), &mut separate_notes);
            crate::separate::verify(b, env.verifier, task, sb, spec, dir, notes).await
        } else {
            let g = guard.as_mut();
            verify::verify(
                task,
                sandbox.as_ref(),
                dir,
                &env.verifier,
                programs,
                before,
                g,
            )
            .await
        }
    };
    let verified = tokio::select! {
        v = verified => Ok(v),
        stop = stopped(&live.meter) => Err(stop),
    };
    r.notes.extend(separate_notes);
    let mut plan = None;
    if let Some(mut g) = live.guard.take() {
        plan = g.plan.take();
        r.timings.integrity_ms = g.spent_ms;
        r.change_set = Some(g.size.clone());
        r.notes.extend(g.notes);
    }
    match verified {
        Err(stop) => {
            live.sandbox.halt();
            let _ = live.sandbox.destroy().await;
            let o = stop_outcome(stop);
            if o.end == AgentEnd::StorageLimit {
                r.status = TrialStatus::Fail;
            }
            r.agent_end = Some(o.end);
            r.error = o.error;
        }
        Ok(v) => score(env, task, dir, live, v, plan, r).await,
    }
    r.timings.verifier_ms = ms(t_ver);
}

/// Stage 4, judge: the reward and status from the verifier's result, the trace's and the
/// checks' suspect reasons, a counterfactual run of the verifier for a suspect pass when the
/// checks planned one, and what a suspect pass becomes (`on_suspect`). Touches `r`, and a
/// copy of the sandbox for the counterfactual.
async fn score(
    env: &TrialEnv,
    task: &Task,
    dir: &Path,
    live: &Live,
    v: Verified,
    plan: Option<Result<Plan, String>>,
    r: &mut TrialResult,
) {
    if let Some(h) = &v.handover {
        // Harbor says it from its start's probe already.
        if !r.notes.iter().any(|n| n.starts_with("ptrace guard")) {
            r.notes.push(h.guard_note());
        }
    }
    r.handover = v.handover;
    r.timings.handover_ms = v.handover_ms;
    r.witness = v.witness;
    let mut reasons: Vec<SuspectReason> =
        tamper::scan_trace(&crate::TrialDir::new(dir).trace_path());
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
    if let (Some(plan), TrialStatus::Pass, false) = (plan, r.status, reasons.is_empty()) {
        r.timings.counterfactual_ms = crate::counterfactual::settle(
            env.backend.as_ref(),
            task,
            live.sandbox.as_ref(),
            &live.spec,
            plan,
            &env.verifier,
            dir,
            (&mut reasons, &mut r.notes),
        )
        .await;
    }
    if reasons.is_empty() {
        return;
    }
    if env.verifier.on_suspect == OnSuspect::Fail && r.status == TrialStatus::Pass {
        r.status = TrialStatus::Fail;
        r.error = Some(format!(
            "suspect (on_suspect = \"fail\"): {}",
            reasons[0].reason
        ));
    }
    r.suspect = Some(Suspect { reasons });
}

/// Stage 5, lost or not: nothing a lost sandbox did since its engine stopped answering says
/// anything about the work, so unless the verifier's reward was read the run is an infra
/// error, re-run elsewhere. Touches `r`.
fn lost_unless_scored(live: &Live, r: &mut TrialResult) -> Option<Lost> {
    let why = live.sandbox.lost()?;
    if r.reward.is_some() {
        return None;
    }
    r.status = TrialStatus::InfraError;
    r.error = Some(why.clone());
    Some((r.host.clone().unwrap_or_default(), why))
}

/// Stage 6, tear down: the meter's figures, the sandbox removed, the timings closed.
async fn tear_down(live: Live, r: &mut TrialResult, t0: Instant) {
    if let Some(m) = &live.meter {
        m.finish();
        r.disk = Some(m.stats());
    }
    let t_down = Instant::now();
    if let Err(e) = live.sandbox.destroy().await {
        tracing::warn!("{}: teardown failed: {e}", r.trial_id);
    }
    r.timings.teardown_ms = ms(t_down);
    r.timings.total_ms = ms(t0);
    r.finished_at = crate::record::now();
}

/// How a trial stopped from outside its agent ends.
fn stop_outcome(stop: Stop) -> AgentOutcome {
    match stop {
        Stop::OverLimit(why) => AgentOutcome::ended(AgentEnd::StorageLimit, Some(why)),
        Stop::HostReserve(why) => AgentOutcome::ended(AgentEnd::HostReserve, Some(why)),
    }
}

fn ms(t: Instant) -> u64 {
    t.elapsed().as_millis() as u64
}
