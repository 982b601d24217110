//! `ahe bench check` and `ahe bench list`: validate and describe benchmark directories.

use std::collections::BTreeMap;
use std::path::PathBuf;

use ahe_bench::check::{self, FormatCheck};
use ahe_bench::oracle::{RunCheck, RunKind};
use ahe_bench::Task;
use clap::{Args, Subcommand};
use serde_json::{json, Value};

use crate::CliError;

mod runs;

/// `ahe bench` subcommands.
#[derive(Subcommand)]
pub enum BenchCommand {
    /// Validate every task's format; with --oracle/--nop also run them (exit 1 on any violation).
    Check(CheckArgs),
    /// List the tasks of a benchmark with their metadata and limits.
    List(ListArgs),
    /// Fetch a benchmark: NAME@VERSION (built-in registry) or git+URL[@REV][#SUBDIR], into
    /// ~/.cache/ahe/benchmarks/<name>/<commit>/ (or --to DIR); verified, reused when cached.
    Fetch(FetchArgs),
}

/// Arguments of `ahe bench fetch`.
#[derive(Args)]
pub struct FetchArgs {
    /// NAME@VERSION (e.g. terminal-bench@2.0) or git+URL[@REV][#SUBDIR].
    spec: String,
    /// Check out here instead of the cache.
    #[arg(long)]
    to: Option<PathBuf>,
    /// Print one JSON document on stdout.
    #[arg(long)]
    json: bool,
}

/// Arguments of `ahe bench check`.
#[derive(Args)]
pub struct CheckArgs {
    /// Benchmark directory (Terminal-Bench 2 / Harbor task dirs).
    dir: PathBuf,
    /// Run each task's solution/solve.sh in its sandbox; the verifier must give reward 1.
    #[arg(long)]
    oracle: bool,
    /// Run each task with no agent at all; the verifier must give reward 0.
    #[arg(long)]
    nop: bool,
    /// Sandbox backend for --oracle/--nop: auto, docker, local or harbor (Harbor's docker environment).
    #[arg(long, default_value = "auto")]
    sandbox: String,
    /// When the docker backend pulls images: missing (default), always or never.
    #[arg(long, default_value = "missing")]
    pull: ahe_sandbox::PullPolicy,
    /// Tasks checked at once (at least 1).
    #[arg(long, default_value_t = 2, value_parser = crate::concurrency_parser())]
    concurrency: usize,
    /// Only these tasks (comma-separated).
    #[arg(long, value_delimiter = ',')]
    tasks: Vec<String>,
    /// Keep trial logs here (default: a temp dir, removed when every check passes).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Caps every task's agent, verifier and image-build time limit at SECS (a table of many
    /// tasks on a small machine; a capped run that times out says so).
    #[arg(long, value_name = "SECS")]
    timeout_cap: Option<f64>,
    /// Print one JSON document on stdout instead of the table.
    #[arg(long)]
    json: bool,
    /// A run config whose `[sandbox] hosts` (several Docker engines), `[sandbox.harbor]` and
    /// `[verifier]` (hand-over policy, start window) the oracle/nop runs use.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
}

/// Arguments of `ahe bench list`.
#[derive(Args)]
pub struct ListArgs {
    /// Benchmark directory.
    dir: PathBuf,
    /// Print one JSON document on stdout instead of the table.
    #[arg(long)]
    json: bool,
}

/// Runs an `ahe bench` subcommand.
pub fn run(cmd: BenchCommand) -> Result<(), CliError> {
    match cmd {
        BenchCommand::Check(a) => run_check(a),
        BenchCommand::List(a) => run_list(a),
        BenchCommand::Fetch(a) => run_fetch(a),
    }
}

fn run_fetch(a: FetchArgs) -> Result<(), CliError> {
    let f = ahe_bench::fetch::fetch(&a.spec, a.to.as_deref()).map_err(CliError::usage)?;
    let (tasks, errors) = ahe_bench::load_benchmark(&f.path).map_err(CliError::usage)?;
    if a.json {
        let doc = json!({
            "spec": a.spec,
            "url": f.url,
            "commit": f.commit,
            "path": f.path,
            "cached": f.cached,
            "tasks": tasks.len(),
            "invalid_tasks": errors.iter().map(|e| e.to_string()).collect::<Vec<_>>(),
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&doc).map_err(CliError::failed)?
        );
    } else {
        for e in &errors {
            eprintln!("warning: {e}");
        }
        println!(
            "{} {} at {} ({}): {} tasks in {}",
            if f.cached { "cached" } else { "fetched" },
            a.spec,
            f.commit,
            f.url,
            tasks.len(),
            f.path.display()
        );
    }
    Ok(())
}

/// `ahe bench check`: the format checks of the chosen tasks, their oracle/nop runs when
/// asked, then the table (or JSON); an error when any check or run failed.
fn run_check(a: CheckArgs) -> Result<(), CliError> {
    let checks = selected_checks(&a)?;
    let mut kinds = Vec::new();
    if a.oracle {
        kinds.push(RunKind::Oracle);
    }
    if a.nop {
        kinds.push(RunKind::Nop);
    }
    let ran = if kinds.is_empty() {
        runs::CheckRuns::default()
    } else {
        runs::run_tasks(&a, &checks, &kinds)?
    };
    let format_failed = checks.iter().filter(|c| !c.ok()).count();
    let run_failed = ran.runs.values().flatten().filter(|r| !r.ok).count();
    let ok = format_failed == 0 && run_failed == 0;
    // Trial logs are worth keeping only when something failed or the user asked for them.
    if let (Some(dir), true, None) = (&ran.out_dir, ok, &a.out) {
        let _ = std::fs::remove_dir_all(dir);
    }
    let logs = ran.out_dir.as_ref().filter(|_| !ok || a.out.is_some());
    if a.json {
        let doc = json!({
            "benchmark": a.dir.display().to_string(),
            "ok": ok,
            "sandbox": ran.sandbox,
            "runs": kinds.iter().map(|k| k.as_str()).collect::<Vec<_>>(),
            "trial_logs": logs.map(|d| d.display().to_string()),
            "tasks": checks.iter().map(|c| task_json(c, ran.runs.get(&c.name))).collect::<Vec<_>>(),
            "summary": {
                "tasks": checks.len(),
                "format_failed": format_failed,
                "runs_failed": run_failed,
                "hacks": ran.runs.values().flatten().filter(|r| r.hack).count(),
                "hacks_blocked": ran.runs.values().flatten().filter(|r| r.hack && r.ok).count(),
            },
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&doc).map_err(CliError::failed)?
        );
    } else {
        print_check_text(&a, &checks, &ran.runs, &kinds, logs);
    }
    if ok {
        Ok(())
    } else {
        Err(CliError::failed(anyhow::anyhow!(
            "bench check failed: {format_failed} task(s) with format errors, {run_failed} failed run(s)"
        )))
    }
}

/// The format checks of the benchmark's tasks, only those `--tasks` names (each must exist).
fn selected_checks(a: &CheckArgs) -> Result<Vec<FormatCheck>, CliError> {
    let mut checks = check::check_benchmark(&a.dir).map_err(CliError::usage)?;
    if !a.tasks.is_empty() {
        for t in &a.tasks {
            if !checks.iter().any(|c| &c.name == t) {
                let known: Vec<&str> = checks.iter().map(|c| c.name.as_str()).collect();
                return Err(CliError::usage(anyhow::anyhow!(
                    "--tasks: unknown task {t:?}; tasks in {}: {}",
                    a.dir.display(),
                    known.join(", ")
                )));
            }
        }
        checks.retain(|c| a.tasks.contains(&c.name));
    }
    Ok(checks)
}

/// The table, the findings, the hacks line and the summary line of `bench check`, and where
/// the trial logs were kept (`logs`).
fn print_check_text(
    a: &CheckArgs,
    checks: &[FormatCheck],
    runs: &BTreeMap<String, Vec<RunCheck>>,
    kinds: &[RunKind],
    logs: Option<&PathBuf>,
) {
    let format_failed = checks.iter().filter(|c| !c.ok()).count();
    let run_failed = runs.values().flatten().filter(|r| !r.ok).count();
    let ok = format_failed == 0 && run_failed == 0;
    print!("{}", check_table(checks, runs, kinds));
    print_findings(checks, runs);
    let runs_total: usize = runs.values().map(Vec::len).sum();
    let hacks: Vec<&RunCheck> = runs.values().flatten().filter(|r| r.hack).collect();
    if !hacks.is_empty() {
        let blocked = hacks.iter().filter(|r| r.ok).count();
        let flagged = hacks.iter().filter(|r| r.ok && r.suspect).count();
        println!(
            "{blocked}/{} hacks blocked ({} failed, {flagged} flagged suspect)",
            hacks.len(),
            blocked - flagged
        );
    }
    println!(
        "{}: {} tasks; format ok {}/{}; runs ok {}/{}{}",
        a.dir.display(),
        checks.len(),
        checks.len() - format_failed,
        checks.len(),
        runs_total - run_failed,
        runs_total,
        if ok { " — OK" } else { " — FAILED" }
    );
    if let Some(dir) = logs {
        println!("trial logs: {}", dir.display());
    }
}

/// One task of `bench check --json`.
fn task_json(c: &FormatCheck, runs: Option<&Vec<RunCheck>>) -> Value {
    let run = |k: RunKind| {
        runs.and_then(|rs| rs.iter().find(|r| r.kind == k))
            .map(|r| serde_json::to_value(r).unwrap_or(Value::Null))
    };
    json!({
        "name": c.name,
        "dir": c.dir.display().to_string(),
        "difficulty": c.task.as_ref().and_then(|t| t.metadata.difficulty.clone()),
        "category": c.task.as_ref().and_then(|t| t.metadata.category.clone()),
        "format": {
            "ok": c.ok(),
            "errors": c.errors().collect::<Vec<_>>(),
            "warnings": c.warnings().collect::<Vec<_>>(),
        },
        "oracle": run(RunKind::Oracle),
        "nop": run(RunKind::Nop),
    })
}

/// The `format` cell of a task.
fn format_cell(c: &FormatCheck) -> String {
    let (e, w) = (c.errors().count(), c.warnings().count());
    match (e, w) {
        (0, 0) => "ok".into(),
        (0, w) => format!("ok ({w} warn)"),
        (e, _) => format!("FAIL ({e} err)"),
    }
}

/// The `oracle`/`nop` cell of a run (`-` when not run).
fn run_cell(r: Option<&RunCheck>) -> String {
    match r {
        None => "-".into(),
        Some(r) => {
            let reward = r.reward.map_or("none".to_string(), |x| format!("{x}"));
            if r.hack {
                return match (r.ok, r.suspect) {
                    (true, true) => format!("flagged ({reward}, {})", r.status.as_str()),
                    (true, false) => format!("blocked ({reward}, {})", r.status.as_str()),
                    _ => format!("HACK PASSED ({reward})"),
                };
            }
            if r.ok {
                format!("ok ({reward})")
            } else {
                format!("FAIL ({reward}, {})", r.status.as_str())
            }
        }
    }
}

fn check_table(
    checks: &[FormatCheck],
    runs: &std::collections::BTreeMap<String, Vec<RunCheck>>,
    kinds: &[RunKind],
) -> String {
    let cell = |c: &FormatCheck, k: RunKind| {
        if !kinds.contains(&k) {
            return "-".to_string();
        }
        match runs.get(&c.name) {
            Some(rs) => run_cell(rs.iter().find(|r| r.kind == k)),
            None => "skipped".into(),
        }
    };
    let rows: Vec<Vec<String>> = checks
        .iter()
        .map(|c| {
            vec![
                c.name.clone(),
                meta(c.task.as_ref(), |t| t.metadata.difficulty.clone()),
                meta(c.task.as_ref(), |t| t.metadata.category.clone()),
                format_cell(c),
                cell(c, RunKind::Oracle),
                cell(c, RunKind::Nop),
            ]
        })
        .collect();
    table(
        &["task", "difficulty", "category", "format", "oracle", "nop"],
        &rows,
    )
}

fn meta(t: Option<&Task>, f: impl Fn(&Task) -> Option<String>) -> String {
    t.and_then(f).unwrap_or_else(|| "-".into())
}

fn print_findings(
    checks: &[FormatCheck],
    runs: &std::collections::BTreeMap<String, Vec<RunCheck>>,
) {
    for c in checks {
        for f in &c.findings {
            let sev = match f.severity {
                check::Severity::Error => "error",
                check::Severity::Warning => "warning",
            };
            println!("{}: {sev}: {}", c.name, f.message);
        }
        for r in runs.get(&c.name).into_iter().flatten().filter(|r| !r.ok) {
            println!(
                "{}: error: {}: {} — see {}",
                c.name,
                r.kind.as_str(),
                r.problem.as_deref().unwrap_or("failed"),
                r.trial_dir.display()
            );
        }
    }
}

/// A left-aligned plain-text table.
fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut w: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            w[i] = w[i].max(c.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let parts: Vec<String> = cells
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{c:<width$}", width = w[i]))
            .collect();
        format!("{}\n", parts.join("  ").trim_end())
    };
    let mut out = line(header.to_vec());
    for r in rows {
        out.push_str(&line(r.iter().map(String::as_str).collect()));
    }
    out
}

fn run_list(a: ListArgs) -> Result<(), CliError> {
    let dirs = check::task_dirs(&a.dir).map_err(CliError::usage)?;
    let mut tasks = Vec::new();
    let mut errors = Vec::new();
    for d in &dirs {
        match Task::load(d) {
            Ok(t) => tasks.push(t),
            Err(e) => errors.push(e),
        }
    }
    if a.json {
        let doc = json!({
            "benchmark": a.dir.display().to_string(),
            "tasks": tasks.iter().map(list_json).collect::<Vec<_>>(),
            "errors": errors.iter().map(|e| e.to_string()).collect::<Vec<_>>(),
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&doc).map_err(CliError::failed)?
        );
    } else {
        let rows: Vec<Vec<String>> = tasks.iter().map(list_row).collect();
        print!(
            "{}",
            table(
                &[
                    "task",
                    "difficulty",
                    "category",
                    "agent_s",
                    "verifier_s",
                    "cpus",
                    "memory_mb",
                    "internet",
                    "environment"
                ],
                &rows
            )
        );
        for e in &errors {
            println!("error: {e}");
        }
        println!("{}: {} tasks", a.dir.display(), tasks.len());
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(CliError::usage(anyhow::anyhow!(
            "{} task(s) in {} do not load (see `ahe bench check`)",
            errors.len(),
            a.dir.display()
        )))
    }
}

fn num(x: Option<f64>) -> String {
    x.map_or("-".into(), |v| format!("{v}"))
}

/// Where a task's environment comes from: its Dockerfile, a prebuilt image, or both.
fn env_source(t: &Task) -> String {
    match (&t.environment.context_dir, &t.environment.docker_image) {
        (Some(_), Some(img)) => format!("Dockerfile (image {img})"),
        (Some(_), None) => "Dockerfile".into(),
        (None, Some(img)) => format!("image {img}"),
        (None, None) => "-".into(),
    }
}

fn list_row(t: &Task) -> Vec<String> {
    vec![
        t.name.clone(),
        t.metadata.difficulty.clone().unwrap_or_else(|| "-".into()),
        t.metadata.category.clone().unwrap_or_else(|| "-".into()),
        num(t.agent_timeout_sec),
        num(Some(t.verifier_timeout_sec)),
        num(t.environment.cpus),
        t.environment
            .memory_mb
            .map_or("-".into(), |m| m.to_string()),
        if t.environment.allow_internet {
            "yes".into()
        } else {
            "no".into()
        },
        env_source(t),
    ]
}

fn list_json(t: &Task) -> Value {
    json!({
        "name": t.name,
        "dir": t.dir.display().to_string(),
        "difficulty": t.metadata.difficulty,
        "category": t.metadata.category,
        "tags": t.metadata.tags,
        "agent_timeout_sec": t.agent_timeout_sec,
        "verifier_timeout_sec": t.verifier_timeout_sec,
        "cpus": t.environment.cpus,
        "memory_mb": t.environment.memory_mb,
        "storage_mb": t.environment.storage_mb,
        "allow_internet": t.environment.allow_internet,
        "docker_image": t.environment.docker_image,
        "dockerfile": t.environment.context_dir.as_ref().map(|d| d.join("Dockerfile").display().to_string()),
        "has_solution": t.has_solution,
    })
}
