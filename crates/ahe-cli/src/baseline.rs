//! `ahe baseline`: the matched-budget comparison of an evolve run (the logic is
//! `ahe_runner::baseline`, which `[evolve] baseline = true` also runs as the run's last
//! phase): N seed trials per task for the run's spend, and the seed's pass@N.

use std::path::PathBuf;
use std::sync::Arc;

use ahe_rundir::RunDir;
use ahe_runner::config::RunConfig;
use ahe_runner::rollout::RolloutSpec;
use anyhow::{anyhow, bail, Context};
use clap::Args;

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

pub use ahe_rundir::final_eval::{Baseline, BASELINE_LABEL as LABEL};

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
        let spend = match b.basis.as_str() {
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

fn baseline(dir: &std::path::Path, a: &BaselineArgs) -> anyhow::Result<Baseline> {
    let rd = RunDir::new(dir);
    let cfg = RunConfig::load(&rd.config_path())
        .with_context(|| format!("{}: not a run directory", dir.display()))?;
    let repo = ahe_runner::repo::HarnessRepo::open(&rd.harness_repo())?;
    let p = ahe_runner::baseline::plan(&rd, &repo, a.max_trials)?;
    let out = rd.baseline();
    let checkout = tempfile_dir(&p.seed)?;
    repo.export(&p.seed, &checkout.0)?;
    let mut harness =
        ahe_harness::load(&checkout.0).map_err(|e| anyhow!("the seed harness: {e:?}"))?;
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
        .filter(|t| p.tasks.contains(&t.name))
        .collect();
    let backend = ahe_runner::rollout::select_backend_on(
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
        k: p.n,
        concurrency: a.concurrency.unwrap_or(cfg.sandbox.concurrency).max(1),
        infra_retries: cfg.sandbox.infra_retries,
        verifier: cfg.verifier,
        default_agent_timeout_sec: cfg.agent.default_timeout_sec,
        out_dir: out.path().to_path_buf(),
        run: format!("{}-baseline", rd.name()),
        prior: p.prior.clone(),
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
        let r = ahe_runner::rollout::rollout(spec, cancel, bar.callback()).await;
        bar.finish();
        r
    })?;
    ahe_runner::baseline::record(&rd, &p, &scores)
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
