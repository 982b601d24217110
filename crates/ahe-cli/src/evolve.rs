//! `ahe evolve`: start or resume an evolve run.

use std::path::PathBuf;

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
}

/// Runs `ahe evolve`.
pub fn run(a: EvolveArgs) -> Result<(), CliError> {
    let bar = crate::progress::Bar::new(false);
    let run = match (&a.config, &a.resume) {
        (Some(cfg), None) => ahe_evolve::start::start(
            cfg,
            a.name.clone(),
            a.iterations,
            &a.runs_dir,
            bar.callback(),
        ),
        (None, Some(dir)) => ahe_evolve::start::resume(dir, bar.callback()),
        _ => unreachable!("clap enforces exactly one of --config and --resume"),
    }
    .map_err(CliError::usage)?;
    bar.set_cost_unknown(
        ahe_evolve::config::ROLES
            .iter()
            .all(|r| run.cfg.model(r).prices_unknown()),
    );
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
    let res = rt.block_on(run.execute(cancel));
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
