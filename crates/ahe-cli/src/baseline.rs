//! `ahe baseline`: the matched-budget comparison the field asks of harness evolution. From
//! an evolve run's total spend (every role, every iteration), the number N of seed-harness
//! trials per task the same money buys (tokens when the config names no prices); N trials of
//! the seed per task (the first iteration's k are reused; capped by `--max-trials`); and the
//! seed's pass@N by Chen et al.'s unbiased estimator with a bootstrap interval over tasks —
//! what sampling N times plus a perfect picker would reach — beside best's and the seed's
//! pass@1. Written to `runs/NAME/baseline/` (`baseline.json`, trials, scores); resumable.

use std::path::PathBuf;
use std::sync::Arc;

use ahe_bench::scores::{mean_with_ci, pass_at_n};
use ahe_bench::TrialStatus;
use ahe_evolve::{RolloutSpec, RunConfig, RunDir};
use anyhow::{anyhow, bail, Context};
use clap::Args;
use serde::Serialize;

use crate::CliError;

/// Default cap of seed trials per task.
pub const DEFAULT_MAX_TRIALS: u32 = 16;

/// Arguments of `ahe baseline`.
#[derive(Args)]
pub struct BaselineArgs {
    /// The evolve run (runs/NAME).
    #[arg(long, conflicts_with = "config")]
    run: Option<PathBuf>,
    /// The evolve run's config: its run is runs-dir/<name> (`name` in the config, or --name).
    #[arg(long)]
    config: Option<PathBuf>,
    /// The run's name, with --config (default: the config's `name`).
    #[arg(long, requires = "config")]
    name: Option<String>,
    /// Where the runs are, with --config.
    #[arg(long, default_value = "runs")]
    runs_dir: PathBuf,
    /// At most this many seed trials per task, whatever the budget buys.
    #[arg(long, default_value_t = DEFAULT_MAX_TRIALS)]
    max_trials: u32,
    /// Trials running at once (default: the run config's).
    #[arg(long, value_parser = crate::concurrency_parser())]
    concurrency: Option<usize>,
    /// Print baseline.json on stdout instead of the summary.
    #[arg(long)]
    json: bool,
}

/// `baseline.json`.
#[derive(Debug, Serialize)]
pub struct Baseline {
    /// `usd`, or `tokens` when the config names no prices.
    pub basis: &'static str,
    /// What the evolve run spent (all roles, all iterations), in the basis' unit.
    pub evolve_spend: f64,
    /// What one seed trial costs (the first iteration's rollout, its mean per trial).
    pub per_seed_trial: f64,
    /// Seed trials per task the spend buys (before the cap).
    pub affordable_per_task: u32,
    /// Seed trials per task run (N).
    pub n: u32,
    /// The cap (`--max-trials`).
    pub cap: u32,
    /// Tasks (visible and held-out of the first iteration).
    pub tasks: usize,
    /// The seed's pass@N and its 95% bootstrap interval over tasks.
    pub seed_pass_at_n: f64,
    /// Its interval.
    pub seed_pass_at_n_ci: [f64; 2],
    /// The seed's pass@1 over the same trials, and its interval.
    pub seed_pass_at_1: f64,
    /// Its interval.
    pub seed_pass_at_1_ci: [f64; 2],
    /// best's pass@1 (visible tasks), as the run recorded it.
    pub best_pass_at_1: Option<f64>,
    /// The iteration best comes from.
    pub best_iteration: Option<u32>,
    /// What pass@N means here.
    pub label: &'static str,
}

/// The label every display of pass@N carries.
pub const LABEL: &str =
    "the seed's pass@N: what sampling N times plus a perfect picker would reach (an upper bound, not a deployable harness)";

/// Runs `ahe baseline`.
pub fn run(a: BaselineArgs) -> Result<(), CliError> {
    let dir = match (&a.run, &a.config) {
        (Some(r), _) => r.clone(),
        (None, Some(c)) => {
            let cfg = RunConfig::load(c).map_err(CliError::usage)?;
            let name = a.name.clone().or(cfg.name.clone()).ok_or_else(|| {
                CliError::usage(anyhow!(
                    "{}: no `name`; pass --name NAME (or --run runs/NAME)",
                    c.display()
                ))
            })?;
            a.runs_dir.join(name)
        }
        (None, None) => {
            return Err(CliError::usage(anyhow!(
                "pass --run runs/NAME or --config FILE"
            )))
        }
    };
    let b = baseline(&dir, &a).map_err(CliError::failed)?;
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&b).map_err(CliError::failed)?
        );
    } else {
        let spend = match b.basis {
            "usd" => format!("${:.4}", b.evolve_spend),
            _ => format!("{:.0} tokens (no prices in the config)", b.evolve_spend),
        };
        println!(
            "matched budget: the run spent {spend} = {} seed trials per task (cap {}, ran {})",
            b.affordable_per_task, b.cap, b.n
        );
        println!(
            "seed pass@{}: {:.3} (95% CI {:.3}–{:.3}) — {LABEL}",
            b.n, b.seed_pass_at_n, b.seed_pass_at_n_ci[0], b.seed_pass_at_n_ci[1]
        );
        println!(
            "seed pass@1: {:.3} (95% CI {:.3}–{:.3}); best pass@1: {}",
            b.seed_pass_at_1,
            b.seed_pass_at_1_ci[0],
            b.seed_pass_at_1_ci[1],
            b.best_pass_at_1.map_or("–".into(), |p| format!(
                "{p:.3} (iteration {})",
                b.best_iteration.unwrap_or(0)
            ))
        );
        println!("baseline: {}", RunDir::new(&dir).baseline_path().display());
    }
    Ok(())
}

/// The spend of the run and the cost of one seed trial, in dollars or (no prices) tokens.
fn budget(rd: &RunDir, first: &ahe_bench::Scores) -> anyhow::Result<(&'static str, f64, f64)> {
    let last = rd.last_iteration_on_disk();
    let trials = first
        .tasks
        .values()
        .flat_map(|t| &t.trials)
        .filter(|t| t.status != TrialStatus::InfraError)
        .count()
        .max(1) as f64;
    let usd = rd.spent_usd(last);
    let seed_usd = first.meta.model_cost_usd.unwrap_or(0.0).max(first.cost_usd);
    if usd > 0.0 && seed_usd > 0.0 {
        return Ok(("usd", usd, seed_usd / trials));
    }
    let mut tokens = 0u64;
    for t in 1..=last {
        if let Ok(s) = rd.iteration(t).scores() {
            tokens += s
                .roles()
                .values()
                .map(|r| r.input_tokens + r.output_tokens)
                .sum::<u64>();
        }
    }
    let seed_tokens = (first.tokens.input + first.tokens.output) as f64;
    if tokens == 0 || seed_tokens == 0.0 {
        bail!("the run recorded neither dollars nor tokens: nothing to match a budget to");
    }
    Ok(("tokens", tokens as f64, seed_tokens / trials))
}

fn baseline(dir: &std::path::Path, a: &BaselineArgs) -> anyhow::Result<Baseline> {
    let rd = RunDir::new(dir);
    let cfg = RunConfig::load(&rd.config_path())
        .with_context(|| format!("{}: not a run directory", dir.display()))?;
    let first = rd.iteration(1).scores().with_context(|| {
        format!(
            "{}: the first iteration has no scores yet (run `ahe evolve` first)",
            dir.display()
        )
    })?;
    let (basis, spend, per_trial) = budget(&rd, &first.scores)?;
    let names: Vec<String> = first.scores.tasks.keys().cloned().collect();
    let affordable = ((spend / per_trial).floor() as u64 / names.len().max(1) as u64)
        .min(u32::MAX as u64) as u32;
    let k = first.scores.k;
    let n = affordable.clamp(k, a.max_trials.max(k));
    // The seed harness, as committed (iter-000), and the first iteration's trials of it.
    let repo = ahe_evolve::commit::HarnessRepo::open(&rd.harness_repo())?;
    let seed_commit = repo.resolve(&ahe_evolve::commit::iter_tag(0))?;
    let evaluated = rd.iteration(1).evaluated();
    let mut prior = Vec::new();
    if evaluated.as_deref() == Some(seed_commit.as_str()) {
        prior = ahe_evolve::clean::load_results(&rd.iteration(1).trials())?;
    }
    let out = rd.baseline();
    prior.extend(ahe_evolve::clean::load_results(&out.trials()).unwrap_or_default());
    prior.retain(|r| r.status != TrialStatus::InfraError && r.attempt <= n);
    let checkout = tempfile_dir(&seed_commit)?;
    repo.export(&seed_commit, &checkout.0)?;
    let mut harness =
        ahe_harness::load(&checkout.0).map_err(|p| anyhow!("the seed harness: {p:?}"))?;
    cfg.agent.cap(&mut harness);
    let (all, errors) = ahe_bench::load_benchmark(&cfg.benchmark.path)?;
    if !errors.is_empty() {
        bail!(
            "benchmark {} has invalid tasks",
            cfg.benchmark.path.display()
        );
    }
    let tasks: Vec<ahe_bench::Task> = all
        .into_iter()
        .filter(|t| names.contains(&t.name))
        .collect();
    let backend = ahe_evolve::rollout::select_backend_on(
        &cfg.sandbox.backend,
        cfg.sandbox.pull,
        &cfg.sandbox.hosts,
        cfg.sandbox.harbor.as_ref(),
    )?;
    let spec = RolloutSpec {
        harness: Arc::new(harness),
        model_cfg: cfg.model("code_agent"),
        tasks,
        backend,
        k: n,
        concurrency: a.concurrency.unwrap_or(cfg.sandbox.concurrency).max(1),
        infra_retries: cfg.sandbox.infra_retries,
        verifier: cfg.verifier,
        default_agent_timeout_sec: cfg.agent.default_timeout_sec,
        out_dir: out.path().to_path_buf(),
        run: format!("{}-baseline", rd.name()),
        prior,
        schedule: Default::default(),
        expected_sec: Default::default(),
        judge: None,
        min_free_disk: cfg.sandbox.min_free_disk,
    };
    let rt = tokio::runtime::Runtime::new()?;
    let cancel = crate::cancel_on_interrupt(&rt, "stopping the baseline's trials...")
        .map_err(|e| anyhow!("{e:?}"))?;
    let quiet = a.json;
    let scores = rt.block_on(async {
        let bar = crate::progress::Bar::new(quiet);
        bar.set_cost_shown(crate::progress::CostShown::of([&spec.model_cfg]));
        let r = ahe_evolve::rollout(spec, cancel, bar.callback()).await;
        bar.finish();
        r
    })?;
    let per_task: Vec<f64> = scores
        .tasks
        .values()
        .filter_map(|t| {
            let ran: Vec<_> = t
                .trials
                .iter()
                .filter(|x| x.status != TrialStatus::InfraError)
                .collect();
            let passed = ran.iter().filter(|x| x.status == TrialStatus::Pass).count() as u32;
            pass_at_n(ran.len() as u32, passed, n.min(ran.len() as u32))
        })
        .collect();
    let (p, ci) = mean_with_ci(&per_task);
    let best = rd.best();
    let b = Baseline {
        basis,
        evolve_spend: spend,
        per_seed_trial: per_trial,
        affordable_per_task: affordable,
        n,
        cap: a.max_trials,
        tasks: names.len(),
        seed_pass_at_n: p,
        seed_pass_at_n_ci: ci,
        seed_pass_at_1: scores.pass_at_1,
        seed_pass_at_1_ci: scores.pass_at_1_ci,
        best_pass_at_1: best.as_ref().map(|b| b.pass_at_1),
        best_iteration: best.as_ref().map(|b| b.iteration),
        label: LABEL,
    };
    std::fs::write(rd.baseline_path(), serde_json::to_string_pretty(&b)?)?;
    Ok(b)
}

/// A temporary directory removed on drop.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn tempfile_dir(commit: &str) -> anyhow::Result<TempDir> {
    let d = std::env::temp_dir().join(format!(
        "ahe-baseline-{}-{}",
        &commit[..12],
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&d);
    Ok(TempDir(d))
}
