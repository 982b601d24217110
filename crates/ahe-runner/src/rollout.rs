//! Rollout: run a harness with a model on benchmark tasks (k trials each, in sandboxes).

use std::path::PathBuf;
use std::sync::Arc;

use ahe_bench::{
    Agent, AgentContext, AgentEnd, AgentOutcome, EvalOptions, Progress, Scores, Task, TrialEnv,
};
use ahe_harness::{End, Harness, Runtime, TraceWriter};
use ahe_model::{ClientOptions, ModelClient, ModelConfig};
use ahe_sandbox::Backend;
use tokio_util::sync::CancellationToken;

/// The harness runtime as a benchmark agent.
pub struct HarnessAgent {
    runtime: Runtime,
    /// Upload the task's `solution/` to `/solution` first (mock models only: offline demos and tests).
    upload_solution: bool,
}

impl HarnessAgent {
    /// Binds a harness to a model; `model_cfg` tells whether the mock oracle needs the solution.
    pub fn new(
        harness: Arc<Harness>,
        model: ModelClient,
        model_cfg: &ModelConfig,
    ) -> anyhow::Result<Self> {
        Ok(HarnessAgent {
            runtime: Runtime::new(harness, model)?,
            upload_solution: model_cfg.provider == "mock",
        })
    }
}

#[async_trait::async_trait]
impl Agent for HarnessAgent {
    async fn run(&self, ctx: AgentContext<'_>) -> AgentOutcome {
        if self.upload_solution && ctx.task.has_solution {
            if let Err(e) = ctx.sandbox.put(&ctx.task.solution_dir(), "/solution").await {
                return AgentOutcome::ended(
                    AgentEnd::InfraError,
                    Some(format!("cannot upload solution: {e}")),
                );
            }
        }
        let (trace_file, log_file) = ahe_bench::layout::trace_files(ctx.trial_dir);
        let trace = match TraceWriter::open(&trace_file, &log_file) {
            Ok(t) => t,
            Err(e) => {
                return AgentOutcome::ended(
                    AgentEnd::InfraError,
                    Some(format!("cannot open trace: {e}")),
                )
            }
        };
        let out = self
            .runtime
            .run(&ctx.task.instruction, ctx.sandbox, &trace, ctx.timeout)
            .await;
        AgentOutcome {
            end: match out.end {
                End::Finished | End::StoppedByTool => AgentEnd::Finished,
                End::Timeout => AgentEnd::Timeout,
                End::TurnLimit => AgentEnd::TurnLimit,
                End::TokenLimit => AgentEnd::TokenLimit,
                End::ContextExceeded => AgentEnd::ContextExceeded,
                End::ModelError => AgentEnd::InfraError,
                End::Fatal => AgentEnd::Fatal,
            },
            turns: out.turns,
            usage: out.usage,
            cost_usd: out.cost_usd,
            error: out.error,
        }
    }
}

/// Picks the sandbox backend by name (`auto`, `local`, `docker`) and says which it chose.
///
/// `docker` fails when no engine answers; `auto` takes docker when an engine answers a ping
/// (≈2 s at most), else local, and prints its choice on stderr (one line).
pub fn select_backend(name: &str) -> anyhow::Result<Arc<dyn Backend>> {
    select_backend_with(name, ahe_sandbox::PullPolicy::default())
}

/// [`select_backend`] with the image pull policy of the docker backend.
pub fn select_backend_with(
    name: &str,
    pull: ahe_sandbox::PullPolicy,
) -> anyhow::Result<Arc<dyn Backend>> {
    select_backend_on(name, pull, &[], None)
}

/// [`select_backend_with`] over the engines of `[sandbox] hosts` when `hosts` is not empty:
/// `docker` and `auto` then mean those engines (no fallback to local), `local` ignores them.
/// `harbor` runs each trial in a Harbor environment as `harbor` (`[sandbox.harbor]`; its
/// defaults when `None`) says.
pub fn select_backend_on(
    name: &str,
    pull: ahe_sandbox::PullPolicy,
    hosts: &[ahe_sandbox::docker::HostSpec],
    harbor: Option<&ahe_sandbox::harbor::HarborConfig>,
) -> anyhow::Result<Arc<dyn Backend>> {
    use ahe_sandbox::docker::{engine_address, DockerBackend, PoolBackend};
    use ahe_sandbox::local::LocalBackend;
    if !hosts.is_empty() && matches!(name, "docker" | "auto") {
        let pool = PoolBackend::connect(hosts)?.with_pull(pull);
        let each: Vec<String> = ahe_sandbox::Backend::hosts(&pool)
            .iter()
            .map(|h| {
                let state = if h.up {
                    ""
                } else {
                    ", down: probed again later"
                };
                format!("{} ×{}{state}", h.name, h.capacity)
            })
            .collect();
        eprintln!(
            "ahe: sandbox: docker on {} hosts ({})",
            hosts.len(),
            each.join(", ")
        );
        return Ok(Arc::new(pool));
    }
    match name {
        "harbor" => {
            let cfg = harbor.cloned().unwrap_or_default();
            let b = ahe_sandbox::harbor::HarborBackend::connect(cfg.clone())?.with_pull(pull);
            eprintln!(
                "ahe: sandbox: Harbor {} environment {:?}",
                b.harbor_version(),
                cfg.environment
            );
            Ok(Arc::new(b))
        }
        "local" => Ok(Arc::new(LocalBackend::detect())),
        "docker" => Ok(Arc::new(DockerBackend::connect()?.with_pull(pull))),
        "auto" => {
            let addr = engine_address();
            if DockerBackend::available() {
                match DockerBackend::connect() {
                    Ok(b) => {
                        eprintln!("ahe: sandbox auto: using docker (engine at {addr})");
                        return Ok(Arc::new(b.with_pull(pull)));
                    }
                    Err(e) => eprintln!("ahe: sandbox auto: using local ({e})"),
                }
            } else {
                eprintln!("ahe: sandbox auto: using local (no Docker engine answers at {addr})");
            }
            Ok(Arc::new(LocalBackend::detect()))
        }
        other => anyhow::bail!("--sandbox {other:?}: use auto, docker, local or harbor"),
    }
}

/// Everything one rollout needs.
pub struct RolloutSpec {
    /// Harness to run.
    pub harness: Arc<Harness>,
    /// Code-agent model settings.
    pub model_cfg: ModelConfig,
    /// Tasks.
    pub tasks: Vec<Task>,
    /// Sandbox backend.
    pub backend: Arc<dyn Backend>,
    /// Trials per task.
    pub k: u32,
    /// Trials at once.
    pub concurrency: usize,
    /// Infra retries per trial.
    pub infra_retries: u32,
    /// The verifier hand-over and what a suspect trial becomes (`[verifier]`).
    pub verifier: ahe_bench::VerifierPolicy,
    /// Agent timeout for tasks without one.
    pub default_agent_timeout_sec: f64,
    /// Output dir (`trials/`, `scores.json`).
    pub out_dir: PathBuf,
    /// Run name (sandbox labels).
    pub run: String,
    /// Trials already finished (resume): scored, not re-run.
    pub prior: Vec<ahe_bench::TrialResult>,
    /// The order trials start in (longest expected first by default).
    pub schedule: ahe_bench::Schedule,
    /// Expected seconds of a trial per task (see [`expected_durations`]).
    pub expected_sec: std::collections::BTreeMap<String, f64>,
    /// The trajectory judge's model (`[models.judge]`): every passing trial is judged
    /// before it is scored. None: no judge.
    pub judge: Option<ModelConfig>,
    /// The host reserve in bytes (`[sandbox] min_free_disk`; 0: off).
    pub min_free_disk: u64,
}

/// Expected trial seconds per task from an earlier evaluation's scores: the mean duration
/// of the task's trials that ran (infra errors say nothing about the work).
pub fn expected_durations(scores: &Scores) -> std::collections::BTreeMap<String, f64> {
    scores
        .tasks
        .iter()
        .filter_map(|(name, t)| {
            let ran: Vec<f64> = t
                .trials
                .iter()
                .filter(|x| x.status != ahe_bench::TrialStatus::InfraError)
                .map(|x| x.duration_sec)
                .collect();
            (!ran.is_empty()).then(|| (name.clone(), ran.iter().sum::<f64>() / ran.len() as f64))
        })
        .collect()
}

/// Runs the rollout, writes `scores.json` (with model fault counts), returns the scores.
/// A model cache without `cache_dir` lives in `<out_dir>/model-cache/`; no budget.
pub async fn rollout(
    spec: RolloutSpec,
    cancel: CancellationToken,
    progress: Arc<dyn Fn(Progress) + Send + Sync>,
) -> anyhow::Result<Scores> {
    let out = ahe_bench::EvalDir::new(&spec.out_dir);
    let opts = ClientOptions {
        default_cache_dir: Some(out.model_cache()),
        budget: None,
    };
    let scores = rollout_with(spec, &opts, cancel, progress).await?;
    out.write_scores(&scores)?;
    Ok(scores)
}

/// [`rollout`] with a run's client options (its `model-cache/` and shared budget); the
/// caller writes `scores.json`.
pub async fn rollout_with(
    spec: RolloutSpec,
    opts: &ClientOptions,
    cancel: CancellationToken,
    progress: Arc<dyn Fn(Progress) + Send + Sync>,
) -> anyhow::Result<Scores> {
    let client = ahe_model::build_client_with(&spec.model_cfg, opts)?;
    let agent = HarnessAgent::new(spec.harness.clone(), client.clone(), &spec.model_cfg)?;
    let judge = match &spec.judge {
        Some(cfg) => Some(Arc::new(crate::trial_judge::ModelJudge::new(
            ahe_model::build_client_with(cfg, opts)?,
            spec.verifier.on_suspect,
        ))),
        None => None,
    };
    let mut prior = spec.prior.clone();
    if let Some(j) = &judge {
        judge_prior(j, &spec, &mut prior).await;
    }
    let env = TrialEnv {
        backend: spec.backend.clone(),
        agent: Arc::new(agent),
        run: spec.run.clone(),
        default_agent_timeout: std::time::Duration::from_secs_f64(spec.default_agent_timeout_sec),
        infra_retries: spec.infra_retries,
        verifier: spec.verifier,
        judge: judge.clone().map(|j| j as Arc<dyn ahe_bench::TrialJudge>),
        disk: ahe_bench::DiskReserve::new(spec.min_free_disk),
    };
    let opts = EvalOptions {
        k: spec.k,
        concurrency: spec.concurrency,
        out_dir: spec.out_dir.clone(),
        cancel,
        prior,
        schedule: spec.schedule,
        expected_sec: spec.expected_sec.clone(),
    };
    let mut scores = ahe_bench::run_eval(env, &spec.tasks, &opts, progress).await?;
    let stats = client.stats();
    let meta = &mut scores.meta;
    meta.model = Some(client.describe());
    meta.harness = Some(spec.harness.dir.display().to_string());
    meta.sandbox = Some(spec.backend.name().into());
    meta.model_calls = Some(stats.calls);
    meta.model_retries = Some(stats.retries);
    meta.model_faults = Some(stats.faults.clone());
    meta.model_failed_calls = Some(stats.failed_calls);
    // Every call paid for, including those of attempts re-run after an infra error
    // (the trial totals above only count each trial's final attempt).
    meta.model_cost_usd = Some(stats.total_cost_usd());
    if let Some(j) = &judge {
        let trials: Vec<(String, u32)> = scores
            .tasks
            .iter()
            .flat_map(|(name, t)| t.trials.iter().map(move |x| (name.clone(), x.attempt)))
            .collect();
        let eval = ahe_bench::EvalDir::new(&spec.out_dir);
        let (summary, cost) = crate::trial_judge::summarize(&eval, &trials, j);
        let roles = serde_json::json!({ "judge": cost });
        meta.extra.insert("roles".into(), roles);
        meta.extra
            .insert("judge".into(), serde_json::to_value(summary)?);
    }
    Ok(scores)
}

/// Judges the passing trials of a resumed rollout that have no verdict yet (killed before
/// the judge answered, or refused by the budget), and writes their results again.
async fn judge_prior(
    judge: &crate::trial_judge::ModelJudge,
    spec: &RolloutSpec,
    prior: &mut [ahe_bench::TrialResult],
) {
    use ahe_bench::TrialJudge;
    let eval = ahe_bench::EvalDir::new(&spec.out_dir);
    for r in prior
        .iter_mut()
        .filter(|r| r.status == ahe_bench::TrialStatus::Pass)
    {
        let Some(task) = spec.tasks.iter().find(|t| t.name == r.task) else {
            continue;
        };
        let dir = eval.trial(&r.task, r.attempt);
        judge.judge(task, dir.path(), r).await;
        dir.write_result(r);
    }
}
