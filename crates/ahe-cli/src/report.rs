//! `ahe report runs/NAME | EVAL_DIR`: writes `report.html`, `report.md` and the trial pages
//! of a run, or of an evaluation directory (`ahe eval --out`, `ahe import harbor --out`).

use std::path::PathBuf;

use ahe_report::{self as report, ReportOptions};
use clap::Args;

use crate::CliError;

/// Arguments of `ahe report`.
#[derive(Args)]
pub struct ReportArgs {
    /// Run directory (runs/NAME) or evaluation directory (EVAL_DIR).
    run: PathBuf,
    /// Skip the per-trial trace pages (trial links then open the trial directories).
    #[arg(long)]
    no_trial_pages: bool,
}

/// Runs `ahe report`.
pub fn run(a: ReportArgs) -> Result<(), CliError> {
    if !a.run.is_dir() {
        return Err(CliError::usage(anyhow::anyhow!(
            "{}: no such run directory",
            a.run.display()
        )));
    }
    let opts = ReportOptions {
        trial_pages: !a.no_trial_pages,
    };
    let g = if crate::show::is_eval_dir(&a.run) {
        report::generate_eval(&a.run, &opts).map_err(CliError::failed)
    } else {
        report::generate(&a.run, &opts).map_err(|e| {
            if ahe_rundir::RunDir::new(&a.run).looks_like_run() {
                CliError::failed(e)
            } else {
                CliError::usage(e)
            }
        })
    }?;
    if let Some(i) = &g.incomplete {
        eprintln!("note: the run is incomplete: {}", i.message);
    }
    for (p, e) in g.trial_page_errors.iter().take(5) {
        eprintln!("warning: trial page {}: {e}", p.display());
    }
    if g.trial_page_errors.len() > 5 {
        eprintln!(
            "warning: {} more trial pages failed",
            g.trial_page_errors.len() - 5
        );
    }
    eprintln!(
        "ahe report: loaded in {:.0} ms, rendered in {:.0} ms, {} trial pages written ({} current) in {:.0} ms",
        g.load_time.as_secs_f64() * 1e3,
        g.render_time.as_secs_f64() * 1e3,
        g.trial_pages,
        g.trial_pages_current,
        g.trials_time.as_secs_f64() * 1e3
    );
    println!("report: {}", g.html.display());
    println!("markdown: {}", g.markdown.display());
    Ok(())
}
