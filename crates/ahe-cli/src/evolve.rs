//! `ahe evolve`: start or resume an evolve run.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use clap::Args;

use crate::CliError;

/// Arguments of `ahe evolve`.
#[derive(Args)]
pub struct EvolveArgs {
    /// Run config (configs/*.toml).
    #[arg(long, required_unless_present = "resume", conflicts_with = "resume")]
    config: Option<PathBuf>,
    /// Run name (directory under runs/); default: config name + time.
    #[arg(long)]
    name: Option<String>,
    /// Number of evolve iterations (overrides the config).
    #[arg(long)]
    iterations: Option<u32>,
    /// Resume an interrupted run: runs/NAME.
    #[arg(long)]
    resume: Option<PathBuf>,
    /// Where new runs go.
    #[arg(long, default_value = "runs")]
    runs_dir: PathBuf,
    /// When the docker backend pulls images: missing, always or never (overrides the
    /// config's `[sandbox] pull`; a resumed run keeps its own).
    #[arg(long, conflicts_with = "resume")]
    pull: Option<ahe_sandbox::PullPolicy>,
    /// Skip `ahe check` before a new run starts.
    #[arg(long)]
    no_check: bool,
}

/// Runs `ahe evolve`.
pub fn run(a: EvolveArgs) -> Result<(), CliError> {
    if let (Some(cfg), false) = (&a.config, a.no_check) {
        preflight_check(cfg, a.pull)?;
    }
    let bar = crate::progress::Bar::new(false);
    // Pulls go to the run's journal (known once the run dir exists) as well as the display.
    let journal = Arc::new(OnceLock::<PathBuf>::new());
    let progress = crate::pulls::recorder(bar.callback(), journal.clone());
    let iterations = a.iterations;
    let pull = a.pull;
    let run = match (&a.config, &a.resume) {
        (Some(cfg), None) => ahe_evolve::inputs::start::start_overridden(
            cfg,
            a.name.clone(),
            |c| {
                if let Some(n) = iterations {
                    c.iterations = n;
                }
                if let Some(p) = pull {
                    c.sandbox.pull = p;
                }
            },
            &a.runs_dir,
            progress,
        ),
        (None, Some(dir)) => ahe_evolve::inputs::start::resume(dir, progress),
        _ => unreachable!("clap enforces exactly one of --config and --resume"),
    }
    .map_err(CliError::usage)?;
    let _ = journal.set(run.dir.journal_path());
    let models: Vec<_> = run
        .cfg
        .active_roles()
        .iter()
        .map(|r| run.cfg.model(r))
        .collect();
    bar.set_cost_shown(crate::progress::CostShown::of(&models));
    eprintln!(
        "ahe evolve: {} ({} visible + {} held-out tasks, k={}, {} iterations) → {}",
        run.cfg.name.as_deref().unwrap_or(""),
        run.visible.len(),
        run.holdout.len(),
        run.cfg.k,
        run.cfg.iterations,
        run.dir.path().display()
    );
    let rt = tokio::runtime::Runtime::new().map_err(CliError::failed)?;
    let cancel = crate::cancel_on_interrupt(&rt, "stopping; resume with `ahe evolve --resume`")?;
    let res = rt.block_on(ahe_evolve::algorithm::execute(&run, cancel));
    bar.finish();
    res.map_err(|e| {
        CliError::failed(e.context(format!(
            "resume with: ahe evolve --resume {}",
            run.dir.path().display()
        )))
    })?;
    if let Some(b) = run.dir.best() {
        // As in best.json.
        println!(
            "best: {}",
            serde_json::to_string_pretty(&b).unwrap_or_default()
        );
    }
    println!("run: {}", run.dir.path().display());
    Ok(())
}

/// `ahe check` on the config before a new run: every problem listed, exit 2 when any.
/// A config that does not load is left to `start` (its error names the file and key).
fn preflight_check(cfg: &Path, pull: Option<ahe_sandbox::PullPolicy>) -> Result<(), CliError> {
    if ahe_runner::config::RunConfig::load(cfg).is_err() {
        return Ok(());
    }
    let rt = tokio::runtime::Runtime::new().map_err(CliError::failed)?;
    let report = rt.block_on(crate::check::check_config(cfg, pull, None));
    if report.ok {
        eprintln!(
            "ahe evolve: ahe check passed ({} checks, {:.1}s)",
            report.passed.len(),
            report.secs
        );
        return Ok(());
    }
    eprint!("{}", crate::check::text(&report, cfg));
    Err(CliError::usage(anyhow::anyhow!(
        "ahe check found {} problem(s) in {}; fix them, or pass --no-check to start anyway",
        report.problems.len(),
        cfg.display()
    )))
}
