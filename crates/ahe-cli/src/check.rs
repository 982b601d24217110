//! `ahe check --config FILE`: every problem of a run config at once, before money is spent —
//! the config, the benchmark (fetched if a SPEC), the harness, the Docker engine, each task's
//! image (local, pullable, or buildable), free disk for the pulls, each role's model (a
//! one-token request), and an estimate of trials and cost. Also run by `ahe evolve` before
//! iteration 1 (unless `--no-check`).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use ahe_runner::config::RunConfig;
use ahe_sandbox::PullPolicy;
use clap::Args;
use serde::Serialize;

use crate::CliError;

mod disk;
mod harbor;
mod models;
pub mod phases;
use disk::check_reserve;
use models::check_models;

/// How long one registry probe may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(6);

/// Disk an image not yet present is assumed to need (TB2 images are 0.2–3 GB).
const BYTES_PER_PULL: u64 = 2 << 30;

/// Arguments of `ahe check`.
#[derive(Args)]
pub struct CheckArgs {
    /// Run config (configs/*.toml).
    #[arg(long)]
    config: PathBuf,
    /// Image pull policy to check under (default: the config's `[sandbox] pull`).
    #[arg(long)]
    pull: Option<PullPolicy>,
    /// Print one JSON document on stdout instead of the list.
    #[arg(long)]
    json: bool,
    /// A run directory whose measured spend per trial and per iteration prices the
    /// estimate (instead of the config's ranges).
    #[arg(long, value_name = "RUN_DIR")]
    from_run: Option<PathBuf>,
}

/// One finding: what it is about and what was found.
#[derive(Debug, Clone, Serialize)]
pub struct Item {
    /// `config`, `benchmark`, `harness`, `docker`, `image`, `disk`, `model`.
    pub area: &'static str,
    /// The task, role, file... it is about.
    pub subject: String,
    /// What was found (for a problem: why, and what to do).
    pub message: String,
}

/// Trials and dollars one iteration would take.
#[derive(Debug, Clone, Serialize)]
pub struct Estimate {
    /// Tasks rolled out per iteration (visible + held-out).
    pub tasks: usize,
    /// Of those, held out.
    pub holdout: usize,
    /// Trials per iteration (tasks × k).
    pub trials_per_iteration: usize,
    /// Iterations.
    pub iterations: u32,
    /// Code-agent dollars per iteration, [one short turn per trial, every trial at its
    /// token limit]; `None` when the code agent's model sets no prices.
    pub cost_per_iteration_usd: Option<[f64; 2]>,
    /// Trajectory-judge dollars per iteration when `[models.judge]` is on: [no trial passes,
    /// every trial passes and its judge call reads JUDGE_INPUT_TOKENS]; `None` when the
    /// judge is off or its model sets no prices.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub judge_per_iteration_usd: Option<[f64; 2]>,
    /// `[evolve] budget_usd`: the run stops gracefully once this much is spent.
    pub budget_usd: Option<f64>,
    /// Fresh trials of the sequential final answer at most: best and the seed, `[evolve]
    /// final_trials` each per visible task (0 when off; one round of one trial each is the
    /// least when best is not the seed).
    pub final_trials: usize,
    /// Seed trials of the matched-budget baseline at most (`[evolve] baseline = true`: up to
    /// `baseline_trials` per task, the first iteration's k reused; 0 when off).
    pub baseline_trials: usize,
    /// Trials and dollars by phase (rollouts, attribution extras, final, baseline, judge,
    /// debugger, overview, evolve).
    pub phases: Vec<phases::PhaseEstimate>,
}

/// The input tokens one judge call reads at most in the estimate (a long passing trace;
/// the judge prompt caps what it shows of a trace).
pub const JUDGE_INPUT_TOKENS: f64 = 40_000.0;

/// The output tokens of one judge verdict in the estimate.
pub const JUDGE_OUTPUT_TOKENS: f64 = 1_000.0;

/// The whole result of a check.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// No problems.
    pub ok: bool,
    /// Everything that stops the run (all of them).
    pub problems: Vec<Item>,
    /// What was checked and is fine.
    pub passed: Vec<Item>,
    /// Trials and cost.
    pub estimate: Option<Estimate>,
    /// Wall time of the check.
    pub secs: f64,
}

#[derive(Default)]
struct Acc {
    problems: Vec<Item>,
    passed: Vec<Item>,
}

impl Acc {
    fn bad(&mut self, area: &'static str, subject: impl Into<String>, message: impl Into<String>) {
        self.problems.push(Item {
            area,
            subject: subject.into(),
            message: message.into(),
        });
    }
    fn good(&mut self, area: &'static str, subject: impl Into<String>, message: impl Into<String>) {
        self.passed.push(Item {
            area,
            subject: subject.into(),
            message: message.into(),
        });
    }
}

/// Runs `ahe check`.
pub fn run(a: CheckArgs) -> Result<(), CliError> {
    let rt = tokio::runtime::Runtime::new().map_err(CliError::failed)?;
    let report = rt.block_on(check_config(&a.config, a.pull, a.from_run.as_deref()));
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).map_err(CliError::failed)?
        );
    } else {
        print!("{}", text(&report, &a.config));
    }
    if report.ok {
        Ok(())
    } else {
        Err(CliError::usage(anyhow::anyhow!(
            "{}: {} problem(s); fix them (or pass --no-check to `ahe evolve` to start anyway)",
            a.config.display(),
            report.problems.len()
        )))
    }
}

/// The report as text: problems first, then what passed, then the estimate.
pub fn text(r: &Report, config: &Path) -> String {
    let mut s = String::new();
    for p in &r.problems {
        s.push_str(&format!(
            "PROBLEM {} {}: {}\n",
            p.area, p.subject, p.message
        ));
    }
    for p in &r.passed {
        s.push_str(&format!(
            "ok      {} {}: {}\n",
            p.area, p.subject, p.message
        ));
    }
    if let Some(e) = &r.estimate {
        s.push_str(&format!(
            "estimate: {} trials per iteration ({} tasks, {} held out) × {} iterations",
            e.trials_per_iteration, e.tasks, e.holdout, e.iterations
        ));
        match e.cost_per_iteration_usd {
            Some([lo, hi]) => s.push_str(&format!(
                "; code agent ${lo:.2}–${hi:.2} per iteration (${:.2}–${:.2} in all: one short turn per trial to every trial at its token limit; debugger and evolve agent extra)",
                lo * e.iterations as f64,
                hi * e.iterations as f64
            )),
            None => s.push_str("; no prices set, no cost estimate"),
        }
        if let Some([lo, hi]) = e.judge_per_iteration_usd {
            s.push_str(&format!(
                "; trajectory judge ${lo:.2}–${hi:.2} per iteration (no trial passes to every trial passes, ~{}k tokens a call)",
                JUDGE_INPUT_TOKENS as u64 / 1000
            ));
        }
        if e.final_trials > 0 {
            s.push_str(&format!(
                "; then up to {} trials of the final answer (best and seed in rounds until it decides; [evolve] final_trials caps it, 0 turns it off)",
                e.final_trials
            ));
        }
        if e.baseline_trials > 0 {
            s.push_str(&format!(
                "; and up to {} seed trials for the matched-budget baseline",
                e.baseline_trials
            ));
        }
        match e.budget_usd {
            Some(b) => s.push_str(&format!("; budget_usd = {b:.2} stops the run\n")),
            None => s.push_str("; no budget_usd set\n"),
        }
        s.push_str(&phases::text(&e.phases));
    }
    s.push_str(&format!(
        "ahe check {}: {} ({:.1}s)\n",
        config.display(),
        if r.ok {
            "all well".to_string()
        } else {
            format!("{} problem(s)", r.problems.len())
        },
        r.secs
    ));
    s
}

/// Checks a run config (`pull` overrides its `[sandbox] pull`; `from_run`: a run whose
/// measured spend prices the estimate).
pub async fn check_config(
    path: &Path,
    pull: Option<PullPolicy>,
    from_run: Option<&Path>,
) -> Report {
    let t0 = Instant::now();
    let mut acc = Acc::default();
    let estimate = match RunConfig::load(path) {
        Ok(mut cfg) => {
            if let Some(p) = pull {
                cfg.sandbox.pull = p;
            }
            acc.good("config", path.display().to_string(), "loads and validates");
            // The change checks read the sandbox's layer on this host (local, or docker on
            // this host's engine), else run inside the sandbox with a static busybox.
            let layer_here = (cfg.sandbox.hosts.is_empty()
                && matches!(cfg.sandbox.backend.as_str(), "local" | "docker" | "auto"))
                || ahe_bench::inside::busybox().is_ok();
            acc.good(
                "integrity",
                format!("backend {}", cfg.sandbox.backend),
                ahe_bench::coverage::summary(layer_here, cfg.judge_model().is_some()),
            );
            let measured = from_run.and_then(|d| match phases::measure(d) {
                Ok(m) => m,
                Err(e) => {
                    acc.bad(
                        "config",
                        d.display().to_string(),
                        format!("--from-run: {e:#}"),
                    );
                    None
                }
            });
            check_loaded(&cfg, &mut acc, measured.as_ref()).await
        }
        Err(e) => {
            acc.bad("config", path.display().to_string(), format!("{e:#}"));
            None
        }
    };
    Report {
        ok: acc.problems.is_empty(),
        problems: acc.problems,
        passed: acc.passed,
        estimate,
        secs: t0.elapsed().as_secs_f64(),
    }
}

async fn check_loaded(
    cfg: &RunConfig,
    acc: &mut Acc,
    measured: Option<&phases::Measured>,
) -> Option<Estimate> {
    let harness = match ahe_harness::load(&cfg.harness) {
        Ok(h) => {
            acc.good("harness", cfg.harness.display().to_string(), "validates");
            Some(h)
        }
        Err(problems) => {
            for p in problems {
                acc.bad(
                    "harness",
                    cfg.harness.display().to_string(),
                    format!("seed harness is invalid: {p}"),
                );
            }
            None
        }
    };
    let bench = cfg.benchmark.path.display().to_string();
    let tasks = match ahe_bench::load_benchmark(&cfg.benchmark.path) {
        Ok((tasks, errors)) => {
            for e in &errors {
                acc.bad("benchmark", bench.clone(), e.to_string());
            }
            match ahe_bench::select_tasks(tasks, &cfg.benchmark.include, &cfg.benchmark.exclude) {
                Ok(t) => {
                    acc.good(
                        "benchmark",
                        bench.clone(),
                        format!("{} tasks load", t.len()),
                    );
                    t
                }
                Err(e) => {
                    acc.bad("benchmark", bench.clone(), format!("{e:#}"));
                    Vec::new()
                }
            }
        }
        Err(e) => {
            acc.bad("benchmark", bench.clone(), e.to_string());
            Vec::new()
        }
    };
    // The model requests and the image probes run at the same time.
    let mut model_acc = Acc::default();
    let mut sandbox_acc = Acc::default();
    tokio::join!(
        check_models(cfg, &mut model_acc),
        check_sandbox(cfg, &tasks, &mut sandbox_acc)
    );
    for a in [sandbox_acc, model_acc] {
        acc.problems.extend(a.problems);
        acc.passed.extend(a.passed);
    }
    check_reserve(cfg, acc).await;
    estimate(cfg, &tasks, harness.as_ref(), acc, measured)
}

/// Trials and dollars of the run, per iteration and by phase (None without tasks).
fn estimate(
    cfg: &RunConfig,
    tasks: &[ahe_bench::Task],
    harness: Option<&ahe_harness::Harness>,
    acc: &mut Acc,
    measured: Option<&phases::Measured>,
) -> Option<Estimate> {
    if tasks.is_empty() {
        return None;
    }
    let (_, holdout) = ahe_runner::holdout::split_holdout(cfg, tasks)
        .map_err(|e| acc.bad("config", "holdout", format!("{e:#}")))
        .ok()?;
    let trials = tasks.len() * cfg.k as usize;
    let code = cfg.model("code_agent");
    let priced = code.price_input_per_mtok > 0.0 || code.price_output_per_mtok > 0.0;
    let cost = (priced && harness.is_some()).then(|| {
        let h = harness.expect("checked");
        let prompt_chars: usize = h.system_prompt.len()
            + tasks.iter().map(|t| t.instruction.len()).sum::<usize>() / tasks.len().max(1);
        let lo_in = (prompt_chars / 4) as f64;
        let per_m = |n: f64, p: f64| n / 1e6 * p;
        let lo = per_m(lo_in, code.price_input_per_mtok) + per_m(100.0, code.price_output_per_mtok);
        let hi_tokens = h.agent.limits.max_total_tokens as f64;
        let hi = per_m(
            hi_tokens,
            code.price_input_per_mtok.max(code.price_output_per_mtok),
        );
        [lo, hi]
    });
    // The judge reads each passing trial once: nothing when none passes, one call per trial
    // when all do.
    let call = cfg.judge_model().filter(|j| !j.prices_unknown()).map(|j| {
        JUDGE_INPUT_TOKENS / 1e6 * j.price_input_per_mtok
            + JUDGE_OUTPUT_TOKENS / 1e6 * j.price_output_per_mtok
    });
    let plan = phases::Plan {
        cfg,
        tasks: tasks.len(),
        holdout: holdout.len(),
        per_trial: cost,
        judge_call: call,
    };
    let phases = phases::estimate(&plan, measured);
    let final_trials = phases
        .iter()
        .find(|p| p.phase == "final")
        .map_or(0, |p| p.trials[1]);
    Some(Estimate {
        tasks: tasks.len(),
        holdout: holdout.len(),
        trials_per_iteration: trials,
        iterations: cfg.iterations,
        cost_per_iteration_usd: cost.map(|[lo, hi]| [lo * trials as f64, hi * trials as f64]),
        judge_per_iteration_usd: call.map(|c| [0.0, c * trials as f64]),
        budget_usd: cfg.evolve.budget_usd,
        final_trials,
        baseline_trials: match cfg.evolve.baseline {
            true => tasks.len() * cfg.evolve.baseline_trials.saturating_sub(cfg.k) as usize,
            false => 0,
        },
        phases,
    })
}

/// The Docker engine (each of `[sandbox] hosts`), each task's image there, free disk for the
/// pulls.
async fn check_sandbox(cfg: &RunConfig, tasks: &[ahe_bench::Task], acc: &mut Acc) {
    use ahe_sandbox::docker::{engine_address, DockerBackend};
    let name = cfg.sandbox.backend.as_str();
    if name == "local" {
        acc.good("docker", "sandbox", "backend local: no images needed");
        return;
    }
    if name == "harbor" {
        return harbor::check_harbor(cfg, acc).await;
    }
    if !cfg.sandbox.hosts.is_empty() {
        return check_hosts(cfg, tasks, acc).await;
    }
    let addr = engine_address();
    let backend = match tokio::task::spawn_blocking(|| {
        DockerBackend::available()
            .then(DockerBackend::connect)
            .transpose()
    })
    .await
    {
        Ok(Ok(Some(b))) => b,
        Ok(Ok(None)) if name == "auto" => {
            acc.good(
                "docker",
                "sandbox",
                format!("backend auto: no engine at {addr}, trials use the local sandbox"),
            );
            return;
        }
        Ok(Ok(None)) => {
            acc.bad("docker", "sandbox", format!("no Docker engine answers at {addr}; start one (scripts/start-dockerd.sh) or set [sandbox] backend = \"local\""));
            return;
        }
        Ok(Err(e)) => {
            acc.bad("docker", "sandbox", e.to_string());
            return;
        }
        Err(e) => {
            acc.bad("docker", "sandbox", e.to_string());
            return;
        }
    };
    acc.good("docker", "sandbox", format!("engine answers at {addr}"));
    let driver = backend.storage_driver();
    acc.good(
        "docker",
        format!("storage driver {}", driver.describe()),
        if backend.native_size() {
            "the engine caps each container at 1.5x its task's storage limit; the host watches the limit itself"
        } else {
            "no per-container size in the engine (only overlay2 on xfs with pquota, btrfs, zfs have one); storage limits are watched from the host"
        },
    );
    check_engine(cfg, tasks, &backend, None, true, acc).await;
}

/// Every engine of `[sandbox] hosts` (all at once): it answers, and each task's image can
/// be had there; free disk for the pulls of the local (unix socket) ones.
async fn check_hosts(cfg: &RunConfig, tasks: &[ahe_bench::Task], acc: &mut Acc) {
    let hosts = cfg.sandbox.hosts.clone();
    let connected = tokio::task::spawn_blocking(move || {
        std::thread::scope(|s| {
            let handles: Vec<_> = hosts
                .iter()
                .map(|h| s.spawn(|| ahe_sandbox::docker::pool::connect_host(h)))
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join().unwrap_or_else(|_| {
                        Err(ahe_sandbox::SandboxError::Backend("panicked".into()))
                    })
                })
                .collect::<Vec<_>>()
        })
    })
    .await
    .unwrap_or_default();
    let mut checks = Vec::new();
    for (i, (h, c)) in cfg.sandbox.hosts.iter().zip(connected).enumerate() {
        let subject = format!("host {}", h.label());
        match c {
            Ok(b) => {
                acc.good(
                    "docker",
                    subject.clone(),
                    format!("engine answers at {} (capacity {})", h.url, h.capacity),
                );
                checks.push((subject, h.url.starts_with("unix://"), b));
            }
            Err(e) => acc.bad(
                "docker",
                subject,
                format!(
                    "{e}; fix sandbox.hosts[{i}] or start that engine (the run would go on \
                     without it, on the other hosts)"
                ),
            ),
        }
    }
    let runs = checks.iter().map(|(subject, local, b)| async move {
        let mut a = Acc::default();
        check_engine(cfg, tasks, b, Some(subject.as_str()), *local, &mut a).await;
        a
    });
    for a in futures_util::future::join_all(runs).await {
        acc.problems.extend(a.problems);
        acc.passed.extend(a.passed);
    }
}

/// Each task's image on one engine (`on`: its host, when there are several), and free disk
/// for the pulls when the engine's root dir is on this machine (`local_disk`).
async fn check_engine(
    cfg: &RunConfig,
    tasks: &[ahe_bench::Task],
    backend: &ahe_sandbox::docker::DockerBackend,
    on: Option<&str>,
    local_disk: bool,
    acc: &mut Acc,
) {
    let at = |s: String| match on {
        Some(h) => format!("{s} on {h}"),
        None => s,
    };
    let docker = backend.docker();
    let policy = cfg.sandbox.pull;
    let findings = ahe_bench::images::check_images(docker, policy, tasks, PROBE_TIMEOUT).await;
    let mut pulls = std::collections::BTreeSet::new();
    let (mut local, mut pull, mut build) = (0, 0, 0);
    for f in &findings {
        match (&f.problem, &f.how) {
            (Some(p), _) => acc.bad("image", at(f.task.clone()), p.clone()),
            (None, Some(how)) if how.starts_with("image ") => local += 1,
            (None, Some(how)) if how.starts_with("pull ") => pull += 1,
            _ => build += 1,
        }
        pulls.extend(f.pulls.iter().cloned());
    }
    let fine = findings.iter().filter(|f| f.problem.is_none()).count();
    if fine > 0 {
        acc.good(
            "image",
            at(format!("{fine} tasks")),
            format!(
                "{local} local, {pull} to pull, {build} to build (pull = \"{}\")",
                policy.as_str()
            ),
        );
    }
    if pulls.is_empty() || !local_disk {
        return;
    }
    let root = docker
        .info()
        .await
        .ok()
        .and_then(|i| i.docker_root_dir)
        .unwrap_or_else(|| "/var/lib/docker".into());
    let need = pulls.len() as u64 * BYTES_PER_PULL;
    let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
    match ahe_sandbox::docker::free_bytes(Path::new(&root)) {
        Some(free) if free < need => acc.bad(
            "disk",
            root,
            format!(
                "{:.1} GiB free, but {} images are to be pulled (~{:.0} GiB at ~2 GiB each); free space or prune (`docker image prune`)",
                gib(free),
                pulls.len(),
                gib(need)
            ),
        ),
        Some(free) => acc.good(
            "disk",
            root,
            format!("{:.1} GiB free for {} pulls (~{:.0} GiB)", gib(free), pulls.len(), gib(need)),
        ),
        None => acc.good("disk", root, "free space unknown (cannot stat the engine's root dir)"),
    }
}
