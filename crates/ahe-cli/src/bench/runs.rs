//! The oracle/nop runs of `ahe bench check`: the backend, the tasks (time limits capped), the
//! trial directory, and a progress line per run.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use ahe_bench::check::FormatCheck;
use ahe_bench::oracle::{self, RunCheck, RunKind, RunOptions};
use ahe_bench::Task;

use super::{run_cell, CheckArgs};
use crate::CliError;

/// What the oracle/nop runs of `bench check` gave: each task's runs, the sandbox backend
/// they ran on, and the directory of their trial logs (all empty when none ran).
#[derive(Default)]
pub(super) struct CheckRuns {
    pub(super) runs: BTreeMap<String, Vec<RunCheck>>,
    pub(super) sandbox: Option<&'static str>,
    pub(super) out_dir: Option<PathBuf>,
}

/// Runs `kinds` (oracle, nop) of every task whose format loads, on the backend `--sandbox`
/// and `--config` choose, with a line per finished run on stderr unless `--json`.
pub(super) fn run_tasks(
    a: &CheckArgs,
    checks: &[FormatCheck],
    kinds: &[RunKind],
) -> Result<CheckRuns, CliError> {
    let cfg = (a.config.as_deref())
        .map(ahe_runner::config::RunConfig::load)
        .transpose()
        .map_err(CliError::usage)?;
    let hosts = cfg.as_ref().map(|c| c.sandbox.hosts.clone());
    let harbor = cfg.as_ref().and_then(|c| c.sandbox.harbor.as_ref());
    let backend = ahe_runner::rollout::select_backend_on(
        &a.sandbox,
        a.pull,
        &hosts.unwrap_or_default(),
        harbor,
    )
    .map_err(CliError::usage)?;
    let sandbox = Some(backend.name());
    // Image pulls (docker) as plain lines: the oracle/nop runs have no progress bar.
    if !a.json {
        backend.set_pull_sink(Some(Arc::new(|e| {
            if let Some(l) = crate::progress::pull_line(&e) {
                eprintln!("{l}");
            }
        })));
    }
    let runnable = runnable_tasks(checks, a.timeout_cap);
    let dir = trial_dir(a)?;
    if !a.json {
        eprintln!(
            "ahe bench check: running {} of {} tasks ({}) on the {} sandbox, {} at once",
            runnable.len(),
            checks.len(),
            kinds
                .iter()
                .map(|k| k.as_str())
                .collect::<Vec<_>>()
                .join(" + "),
            backend.name(),
            a.concurrency.max(1)
        );
    }
    let total = runnable.len() * kinds.len();
    let opts = RunOptions {
        backend,
        kinds: kinds.to_vec(),
        concurrency: a.concurrency.max(1),
        out_dir: dir.clone(),
        default_agent_timeout: Duration::from_secs(1800),
        infra_retries: 1,
        verifier: cfg.as_ref().map(|c| c.verifier).unwrap_or_default(),
        run: format!("bench-check-{}", std::process::id()),
    };
    let rt = tokio::runtime::Runtime::new().map_err(CliError::failed)?;
    let runs = rt.block_on(oracle::run_checks(
        &runnable,
        &opts,
        progress_lines(a.json, total),
    ));
    Ok(CheckRuns {
        runs,
        sandbox,
        out_dir: Some(dir),
    })
}

/// The tasks whose format loads, each time limit (agent, verifier, image build) capped at
/// `--timeout-cap` when it is positive.
fn runnable_tasks(checks: &[FormatCheck], cap: Option<f64>) -> Vec<Task> {
    let mut runnable: Vec<Task> = checks.iter().filter_map(|c| c.task.clone()).collect();
    if let Some(cap) = cap.filter(|c| *c > 0.0) {
        for t in &mut runnable {
            t.agent_timeout_sec = Some(t.agent_timeout_sec.unwrap_or(cap).min(cap));
            t.verifier_timeout_sec = t.verifier_timeout_sec.min(cap);
            let b = &mut t.environment.build_timeout_sec;
            *b = Some(b.unwrap_or(cap).min(cap));
        }
    }
    runnable
}

/// The trial logs' directory, made: `--out`, else a fresh one in the temp dir.
fn trial_dir(a: &CheckArgs) -> Result<PathBuf, CliError> {
    let dir = a.out.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!(
            "ahe-bench-check-{}-{}",
            std::process::id(),
            chrono::Local::now().format("%H%M%S")
        ))
    });
    std::fs::create_dir_all(&dir)
        .map_err(|e| CliError::usage(anyhow::anyhow!("--out {}: {e}", dir.display())))?;
    Ok(dir)
}

/// A progress callback printing `[n/total] task kind: cell (secs)` per finished run (nothing
/// when `quiet`).
fn progress_lines(quiet: bool, total: usize) -> oracle::RunProgress {
    let done = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    Arc::new(move |task: &str, c: &RunCheck| {
        let n = done.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
        if !quiet {
            eprintln!(
                "[{n}/{total}] {task} {}: {} ({:.1}s)",
                c.kind.as_str(),
                run_cell(Some(c)),
                c.duration_ms as f64 / 1000.0
            );
        }
    })
}
