//! `ahe`: Agentic Harness Engineering — evolve the harness around a frozen model.

mod baseline;
mod bench;
mod check;
mod compare;
mod debug;
mod eval;
mod evolve;
mod export;
mod import;
mod judge_bench;
mod matrix;
mod progress;
mod pulls;
mod report;
mod show;
mod view;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Exit status: the run failed.
pub const EXIT_FAILED: u8 = 1;
/// Exit status: bad usage or input.
pub const EXIT_USAGE: u8 = 2;

/// An error together with the exit status it maps to.
#[derive(Debug)]
pub struct CliError {
    /// 1 = the run failed, 2 = bad usage or input.
    pub code: u8,
    /// What to print.
    pub error: anyhow::Error,
}

impl CliError {
    /// Bad usage or input (exit 2).
    pub fn usage(e: impl Into<anyhow::Error>) -> Self {
        CliError {
            code: EXIT_USAGE,
            error: e.into(),
        }
    }
    /// The run failed (exit 1).
    pub fn failed(e: impl Into<anyhow::Error>) -> Self {
        CliError {
            code: EXIT_FAILED,
            error: e.into(),
        }
    }
}

#[derive(Parser)]
#[command(
    name = "ahe",
    version,
    about = "Agentic Harness Engineering: evolve the harness around a frozen model"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Evaluate a harness on a benchmark: k trials per task, scores.json, a per-task table.
    Eval(eval::EvalArgs),
    /// Harnesses × benchmarks × models (and ablations): one evaluation per cell, one pool of
    /// trial slots, resumable; matrix.json, matrix.md, matrix.html.
    Matrix(matrix::MatrixArgs),
    /// The matched-budget comparison of an evolve run: as many seed trials per task as its
    /// spend buys, and the seed's pass@N beside best's pass@1.
    Baseline(baseline::BaselineArgs),
    /// Compare evaluation directories that exist (`ahe eval`, `ahe import harbor`): per-task
    /// differences and the paired delta of pass@1, the first directory as the baseline.
    Compare(compare::CompareArgs),
    /// Write ahe's trials in another tool's format (`harbor`: a Harbor job directory with
    /// TrialResult files and ATIF trajectories).
    #[command(subcommand)]
    Export(export::ExportCommand),
    /// Read another tool's trials into an ahe evaluation directory (`harbor`: a Harbor job).
    #[command(subcommand)]
    Import(import::ImportCommand),
    /// Evolve the harness: rollout, clean, attribute, debug, evolve, commit — N iterations.
    Evolve(evolve::EvolveArgs),
    /// Write report.html (self-contained), report.md and trial pages of a run directory or
    /// of an evaluation directory (`ahe eval --out`, `ahe import harbor --out`).
    Report(report::ReportArgs),
    /// The debug phase on its own over an evaluation directory: the debugger's per-task
    /// reports and the benchmark overview under EVAL_DIR/analysis/.
    Debug(debug::DebugArgs),
    /// Terminal tables of a run: summary, --iteration N, --task T, --trial A; or --json.
    Show(show::ShowArgs),
    /// A local, read-only web UI over run, evaluation and matrix directories (default
    /// runs/): the run list and each run's report page, live while the run goes.
    View(view::ViewArgs),
    /// Load and check a harness directory; print every problem.
    Validate {
        /// Harness directory.
        dir: PathBuf,
    },
    /// Check a run config before spending money: benchmark, harness, Docker engine, each
    /// task's image (local, pullable or buildable), disk, each role's model; exit 2 with
    /// every problem listed.
    Check(check::CheckArgs),
    /// Measure a trajectory judge on labelled trajectories (benchmarks/judge-labelled: the
    /// adversarial suite's hacks and controls): each verdict against its label, precision and
    /// recall of "gamed", cost.
    JudgeBench(judge_bench::JudgeBenchArgs),
    /// Check, list and fetch benchmarks (task format, oracle and nop runs).
    Bench {
        #[command(subcommand)]
        command: bench::BenchCommand,
    },
    /// Sandbox maintenance.
    Sandbox {
        #[command(subcommand)]
        command: SandboxCommand,
    },
}

#[derive(Subcommand)]
enum SandboxCommand {
    /// Remove the sandboxes of ahe processes that no longer run on this host: docker
    /// containers, and local trial dirs ($TMPDIR/ahe-local-*) with their cgroups.
    Reap {
        /// Remove EVERY ahe container (labelled `ahe.run`), also of running processes.
        /// Local sandboxes of running processes are never removed.
        #[arg(long)]
        all: bool,
        /// Reap every engine of this run config's `[sandbox] hosts` (default: the engine of
        /// DOCKER_HOST).
        #[arg(long)]
        config: Option<std::path::PathBuf>,
    },
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("AHE_LOG")
                .unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let res = match cli.command {
        Command::Eval(a) => eval::run(a),
        Command::Matrix(a) => matrix::run(a),
        Command::Baseline(a) => baseline::run(a),
        Command::Compare(a) => compare::run(a),
        Command::Export(c) => export::run(c),
        Command::Import(c) => import::run(c),
        Command::Evolve(a) => evolve::run(a),
        Command::Report(a) => report::run(a),
        Command::Debug(a) => debug::run(a),
        Command::Show(a) => show::run(a),
        Command::View(a) => view::run(a),
        Command::Validate { dir } => validate(&dir),
        Command::Check(a) => check::run(a),
        Command::JudgeBench(a) => judge_bench::run(a),
        Command::Bench { command } => bench::run(command),
        Command::Sandbox {
            command: SandboxCommand::Reap { all, config },
        } => reap(all, config.as_deref()),
    };
    match res {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // Not eprintln!: after a SIGHUP the terminal is gone and the write fails.
            use std::io::Write;
            let _ = writeln!(std::io::stderr(), "error: {:#}", e.error);
            ExitCode::from(e.code)
        }
    }
}

/// `ahe sandbox reap`: local sandboxes of dead processes first (they need no engine), then
/// Harbor environments of dead processes (see `ahe_sandbox::harbor`), then docker: connecting reaps dead processes' containers; `--all` removes the rest. With a
/// config naming `[sandbox] hosts`, every one of those engines.
fn reap(all: bool, config: Option<&std::path::Path>) -> Result<(), CliError> {
    let hosts = match config {
        Some(c) => {
            ahe_runner::config::RunConfig::load(c)
                .map_err(CliError::usage)?
                .sandbox
                .hosts
        }
        None => Vec::new(),
    };
    reap_local();
    reap_harbor(all)?;
    reap_docker(all, &hosts)
}

/// Removes the local sandboxes and cgroups of dead ahe processes, and says how many.
fn reap_local() {
    let local = ahe_sandbox::local::reap_dead();
    for (p, e) in &local.failed {
        eprintln!("warning: cannot remove {}: {e}", p.display());
    }
    println!(
        "ahe sandbox reap: removed {} local sandbox{} and {} cgroup{} of dead ahe processes ({} of running ones kept)",
        local.removed,
        if local.removed == 1 { "" } else { "es" },
        local.cgroups,
        if local.cgroups == 1 { "" } else { "s" },
        local.live
    );
}

/// Deletes the Harbor environments recorded by dead ahe processes (all with `all`), if any
/// were recorded; before docker: deleting them through Harbor also removes their compose
/// projects and images.
fn reap_harbor(all: bool) -> Result<(), CliError> {
    if !ahe_sandbox::harbor::state_dir().join("live").is_dir() {
        return Ok(());
    }
    let rt = tokio::runtime::Runtime::new().map_err(CliError::failed)?;
    let h = rt.block_on(ahe_sandbox::harbor::reap(all));
    for f in &h.failed {
        eprintln!("warning: harbor environment not deleted: {f}");
    }
    println!(
        "ahe sandbox reap: deleted {} Harbor environment{} ({} of running ahe processes kept)",
        h.removed,
        if h.removed == 1 { "" } else { "s" },
        h.live
    );
    Ok(())
}

/// Connects to the local docker engine (or each of `hosts`), which reaps dead processes'
/// containers, and with `all` removes every ahe container; an error names the engines not
/// reached.
fn reap_docker(all: bool, hosts: &[ahe_sandbox::docker::HostSpec]) -> Result<(), CliError> {
    use ahe_sandbox::docker::{self, DockerBackend};
    let engines: Vec<(String, ahe_sandbox::Result<DockerBackend>)> = if hosts.is_empty() {
        vec![(String::new(), DockerBackend::connect())]
    } else {
        hosts
            .iter()
            .map(|h| (format!(" at {}", h.label()), docker::pool::connect_host(h)))
            .collect()
    };
    let mut unreached = Vec::new();
    for (at, backend) in engines {
        let backend = match backend {
            Ok(b) => b,
            Err(e) => {
                eprintln!("warning: docker containers{at} not reaped: {e}");
                unreached.push(e.to_string());
                continue;
            }
        };
        let mut removed = backend.reaped();
        if all {
            let rt = tokio::runtime::Runtime::new().map_err(CliError::failed)?;
            removed += rt
                .block_on(docker::reap(backend.docker(), false))
                .map_err(CliError::failed)?;
        }
        println!(
            "ahe sandbox reap: removed {removed} container{}{at} ({})",
            if removed == 1 { "" } else { "s" },
            if all {
                "all ahe containers"
            } else {
                "those of dead ahe processes on this host"
            }
        );
    }
    match unreached.len() {
        0 => Ok(()),
        _ => Err(CliError::failed(anyhow::anyhow!(
            "docker containers not reaped: {}",
            unreached.join("; ")
        ))),
    }
}

/// Parser of `--concurrency`: a whole number of at least 1 (0 would run nothing, forever).
pub fn concurrency_parser() -> clap::builder::RangedU64ValueParser<usize> {
    clap::builder::RangedU64ValueParser::<usize>::new().range(1..)
}

/// A token cancelled on the first Ctrl-C (SIGINT), SIGTERM (`kill`, `timeout`, systemd,
/// `docker stop`) or SIGHUP (a closed terminal), after printing `interrupted (SIG): {what}`:
/// `ahe eval` and `ahe evolve` stop the same graceful way on each. The handlers are installed
/// before this returns, so a signal that comes early is caught rather than killing the
/// process; they live as long as `rt`.
pub fn cancel_on_interrupt(
    rt: &tokio::runtime::Runtime,
    what: &'static str,
) -> Result<tokio_util::sync::CancellationToken, CliError> {
    use tokio::signal::unix::{signal, SignalKind};
    let cancel = tokio_util::sync::CancellationToken::new();
    let c2 = cancel.clone();
    rt.block_on(async move {
        let mut int = signal(SignalKind::interrupt())?;
        let mut term = signal(SignalKind::terminate())?;
        let mut hup = signal(SignalKind::hangup())?;
        tokio::spawn(async move {
            use std::io::Write;
            for n in 0.. {
                let (by, signo) = tokio::select! {
                    _ = int.recv() => ("Ctrl-C", libc_signo::INT),
                    _ = term.recv() => ("SIGTERM", libc_signo::TERM),
                    _ = hup.recv() => ("SIGHUP", libc_signo::HUP),
                };
                // Writes to a hung-up terminal fail: never let that stop the cancellation.
                if n == 0 {
                    let _ = writeln!(std::io::stderr(), "\ninterrupted ({by}): {what}");
                    c2.cancel();
                    continue;
                }
                // A second signal while the graceful stop waits (e.g. for a model call of
                // the debug phase) exits at once, as `kill -9` would: the run stays resumable.
                let _ = writeln!(
                    std::io::stderr(),
                    "\ninterrupted again ({by}): exiting now; `ahe sandbox reap` removes sandboxes left behind"
                );
                std::process::exit(128 + signo);
            }
        });
        Ok::<_, std::io::Error>(())
    })
    .map_err(|e| CliError::failed(anyhow::Error::from(e).context("installing signal handlers")))?;
    Ok(cancel)
}

/// Signal numbers for the `128 + n` exit status of a forced stop (the same on every Linux).
mod libc_signo {
    /// SIGHUP.
    pub const HUP: i32 = 1;
    /// SIGINT.
    pub const INT: i32 = 2;
    /// SIGTERM.
    pub const TERM: i32 = 15;
}

fn validate(dir: &std::path::Path) -> Result<(), CliError> {
    match ahe_harness::load(dir) {
        Ok(h) => {
            for w in &h.warnings {
                println!("warning: {w}");
            }
            println!(
                "{}: valid harness ({} tools, {} middleware, {} skills, {} sub-agents, {} memory files)",
                dir.display(),
                h.agent.tools.len(),
                h.middleware.len(),
                h.skills.len(),
                h.subagents.len(),
                h.memory.len()
            );
            Ok(())
        }
        Err(problems) => {
            for p in &problems {
                println!("{}: {p}", dir.display());
            }
            Err(CliError::usage(anyhow::anyhow!(
                "{}: {} problem(s) in the harness",
                dir.display(),
                problems.len()
            )))
        }
    }
}
