//! `ahe eval`: run a harness on a benchmark and print per-task results.

use std::path::PathBuf;
use std::sync::Arc;

use ahe_model::ModelConfig;
use ahe_runner::config::RunConfig;
use ahe_runner::rollout::RolloutSpec;
use clap::Args;
use tokio_util::sync::CancellationToken;

use crate::CliError;

/// Arguments of `ahe eval`.
#[derive(Args)]
pub struct EvalArgs {
    /// Harness directory to evaluate, or runs/NAME@REF (REF: best, iter-NNN or a commit id).
    /// Repeat it to compare harnesses on the same tasks (the first is the baseline).
    #[arg(long, required = true)]
    harness: Vec<PathBuf>,
    /// Also evaluate this harness (runs/NAME@REF or a directory) as the baseline to compare
    /// every --harness against.
    #[arg(long)]
    against: Option<PathBuf>,
    /// Benchmark directory (Terminal-Bench 2 / Harbor task dirs), or a fetch SPEC
    /// (NAME@VERSION or git+URL[@REV][#SUBDIR], fetched on first use).
    #[arg(long)]
    benchmark: PathBuf,
    /// Trials per task.
    #[arg(short = 'k', long = "k")]
    k: Option<u32>,
    /// Trials running at once (at least 1).
    #[arg(long, value_parser = crate::concurrency_parser())]
    concurrency: Option<usize>,
    /// Only these tasks (comma-separated).
    #[arg(long, value_delimiter = ',')]
    tasks: Vec<String>,
    /// Model spec: mock:oracle, mock:nop, mock:script=FILE, openai:MODEL, anthropic:MODEL, local[:PATH].
    #[arg(long)]
    model: Option<String>,
    /// Sandbox backend: auto, docker, local or harbor (`[sandbox.harbor]` of --config).
    #[arg(long)]
    sandbox: Option<String>,
    /// When the docker backend pulls images: missing (default), always or never.
    #[arg(long)]
    pull: Option<ahe_sandbox::PullPolicy>,
    /// Output directory (default runs/eval-<timestamp>). An existing non-empty one is
    /// refused (old and new trials would mix) unless --force.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Reuse a non-empty --out: its old trials/ and scores.json (and those of each
    /// compared harness's DIR/<label>/) are deleted first; other files are left alone.
    #[arg(long)]
    force: bool,
    /// Run config to take the code-agent model, sandbox and k from (flags override it).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Print one JSON document on stdout instead of the table (the scores; a comparison
    /// document when several harnesses are evaluated).
    #[arg(long)]
    json: bool,
}

/// Runs `ahe eval`.
pub fn run(a: EvalArgs) -> Result<(), CliError> {
    let cfg = a
        .config
        .as_deref()
        .map(RunConfig::load)
        .transpose()
        .map_err(CliError::usage)?;
    let model_cfg = model_config(&a, cfg.as_ref())?;
    // Every harness is resolved and validated before anything runs.
    let mut harness_args: Vec<PathBuf> = a.against.iter().cloned().collect();
    harness_args.extend(a.harness.iter().cloned());
    let mut harnesses = Vec::new();
    let mut exports = Exports(Vec::new());
    for h in &harness_args {
        let (mut harness, replay) = load_harness(h, &mut exports)?;
        // `[agent] max_turns` of the config caps the turns as it does in `ahe evolve`.
        if let Some(c) = &cfg {
            c.agent.cap(&mut harness);
        }
        harnesses.push((harness, replay));
    }
    let tasks = selected_tasks(&a, cfg.as_ref())?;
    let backend = backend(&a, cfg.as_ref())?;
    let k = a.k.or(cfg.as_ref().map(|c| c.k)).unwrap_or(1);
    if k == 0 {
        return Err(CliError::usage(anyhow::anyhow!("-k: must be at least 1")));
    }
    let concurrency = a
        .concurrency
        .or(cfg.as_ref().map(|c| c.sandbox.concurrency))
        .unwrap_or(4)
        .max(1);
    let labels = crate::compare::labels(&harness_args);
    let out_dir = out_dir(&a, &labels, harnesses.len() > 1)?;
    let rt = tokio::runtime::Runtime::new().map_err(CliError::failed)?;
    let common = Common {
        model_cfg,
        tasks,
        backend,
        k,
        concurrency,
        infra_retries: cfg.as_ref().map(|c| c.sandbox.infra_retries).unwrap_or(1),
        verifier: cfg.as_ref().map(|c| c.verifier).unwrap_or_default(),
        default_agent_timeout_sec: cfg
            .as_ref()
            .map(|c| c.agent.default_timeout_sec)
            .unwrap_or(1800.0),
        // The trajectory judge runs when the config names one (`[models.judge]`).
        judge: cfg.as_ref().and_then(|c| c.judge_model()),
        min_free_disk: cfg.as_ref().map_or(ahe_bench::disk::DEFAULT_MIN_FREE, |c| {
            c.sandbox.min_free_disk
        }),
        quiet: a.json,
        cancel: crate::cancel_on_interrupt(&rt, "stopping trials and tearing down sandboxes...")?,
        rt,
    };
    if harnesses.len() == 1 {
        let (h, replay) = harnesses.remove(0);
        return evaluate_one(&common, &harness_args[0], (h, replay), &out_dir, a.json);
    }
    let harnesses: Vec<(&PathBuf, &String, Loaded)> = harness_args
        .iter()
        .zip(&labels)
        .zip(harnesses)
        .map(|((h, label), loaded)| (h, label, loaded))
        .collect();
    compare(&common, harnesses, &out_dir, a.json)
}

/// The output directory (`--out`, else `runs/eval-<time>`), refused when not empty unless
/// `--force` clears it (and, for a comparison, each harness's `<out>/<label>/`).
fn out_dir(a: &EvalArgs, labels: &[String], comparison: bool) -> Result<PathBuf, CliError> {
    let out_dir = a.out.clone().unwrap_or_else(|| {
        PathBuf::from("runs").join(format!(
            "eval-{}",
            chrono::Local::now().format("%Y%m%d-%H%M%S")
        ))
    });
    // A comparison writes into <out>/<label>/; --force clears those and <out> itself.
    let mut subdirs = vec![""];
    if comparison {
        subdirs.extend(labels.iter().map(String::as_str));
    }
    prepare_out(&out_dir, &subdirs, a.force)?;
    Ok(out_dir)
}

/// The model of the code agent: `--model`, else the config's `code_agent` role; validated.
fn model_config(a: &EvalArgs, cfg: Option<&RunConfig>) -> Result<ModelConfig, CliError> {
    let model_cfg = match (&a.model, cfg) {
        (Some(spec), _) => {
            ModelConfig::from_spec(spec).map_err(|e| CliError::usage(e.context("--model")))?
        }
        (None, Some(c)) => c.model("code_agent"),
        (None, None) => {
            return Err(CliError::usage(anyhow::anyhow!(
                "no model: pass --model SPEC ({}) or --config FILE",
                ahe_model::config::SPEC_FORMS
            )))
        }
    };
    model_cfg
        .validate()
        .map_err(|e| CliError::usage(e.context("model")))?;
    Ok(model_cfg)
}

/// The benchmark's tasks (every one must load) that `--tasks` (else the config's `include`)
/// names, minus the config's `exclude`.
fn selected_tasks(a: &EvalArgs, cfg: Option<&RunConfig>) -> Result<Vec<ahe_bench::Task>, CliError> {
    let (tasks, errors) = ahe_bench::load_benchmark(&a.benchmark).map_err(CliError::usage)?;
    if !errors.is_empty() {
        let list: Vec<String> = errors.iter().map(|e| format!("  {e}")).collect();
        return Err(CliError::usage(anyhow::anyhow!(
            "benchmark {} has invalid tasks:\n{}",
            a.benchmark.display(),
            list.join("\n")
        )));
    }
    let include = if a.tasks.is_empty() {
        cfg.map(|c| c.benchmark.include.clone()).unwrap_or_default()
    } else {
        a.tasks.clone()
    };
    let exclude = cfg.map(|c| c.benchmark.exclude.clone()).unwrap_or_default();
    ahe_bench::select_tasks(tasks, &include, &exclude).map_err(CliError::usage)
}

/// The sandbox backend: `--sandbox` and `--pull`, else the config's `[sandbox]` (its hosts and
/// Harbor settings too), else `auto` pulling missing images.
fn backend(
    a: &EvalArgs,
    cfg: Option<&RunConfig>,
) -> Result<Arc<dyn ahe_sandbox::Backend>, CliError> {
    let sandbox_name = a
        .sandbox
        .clone()
        .or_else(|| cfg.map(|c| c.sandbox.backend.clone()))
        .unwrap_or_else(|| "auto".into());
    let pull = a.pull.or(cfg.map(|c| c.sandbox.pull)).unwrap_or_default();
    let hosts = cfg.map(|c| c.sandbox.hosts.clone()).unwrap_or_default();
    let harbor = cfg.and_then(|c| c.sandbox.harbor.as_ref());
    ahe_runner::rollout::select_backend_on(&sandbox_name, pull, &hosts, harbor)
        .map_err(CliError::usage)
}

/// Evaluates the one harness into `out_dir` and prints its scores (a table, or JSON).
fn evaluate_one(
    common: &Common,
    arg: &std::path::Path,
    (h, replay): Loaded,
    out_dir: &std::path::Path,
    json: bool,
) -> Result<(), CliError> {
    let scores = evaluate(common, arg, h, replay, out_dir)?;
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&scores).map_err(CliError::failed)?
        );
    } else {
        print!("{}", ahe_bench::eval::table(&scores));
        println!(
            "scores: {}",
            ahe_bench::EvalDir::new(out_dir).scores_path().display()
        );
    }
    Ok(())
}

/// A comparison: every harness (argument, label, loaded) on the same tasks, k and model, each
/// into `<out>/<label>/`; prints the comparison (text, or its JSON document).
fn compare(
    common: &Common,
    harnesses: Vec<(&PathBuf, &String, Loaded)>,
    out_dir: &std::path::Path,
    json: bool,
) -> Result<(), CliError> {
    let mut evaluated = Vec::new();
    for (h, label, (harness, replay)) in harnesses {
        let dir = out_dir.join(label);
        let scores = evaluate(common, h, harness, replay, &dir)?;
        evaluated.push(crate::compare::Evaluated {
            label: label.clone(),
            harness: h.display().to_string(),
            out: dir,
            scores,
        });
    }
    let doc = crate::compare::document(&evaluated, common.k, &common.model_cfg.describe());
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&doc).map_err(CliError::failed)?
        );
    } else {
        print!("{}", crate::compare::text(&doc));
    }
    Ok(())
}

/// Refuses an existing non-empty output dir (old and new trials would mix silently); with
/// `force`, deletes the old `trials/` and `scores.json` of `out/<sub>` for every `sub` first.
fn prepare_out(out: &std::path::Path, subdirs: &[&str], force: bool) -> Result<(), CliError> {
    let non_empty = std::fs::read_dir(out).is_ok_and(|mut d| d.next().is_some());
    if !non_empty {
        return Ok(());
    }
    if !force {
        return Err(CliError::usage(anyhow::anyhow!(
            "--out {}: the directory exists and is not empty (its old trials would mix with the new ones); \
             pick a new directory, or pass --force to delete its old trials/ and scores.json first",
            out.display()
        )));
    }
    for sub in subdirs {
        let dir = out.join(sub);
        let trials = ahe_bench::EvalDir::new(&dir).trials();
        match std::fs::remove_dir_all(&trials) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(CliError::failed(
                    anyhow::Error::from(e)
                        .context(format!("--force: removing {}", trials.display())),
                ))
            }
            _ => {}
        }
        let eval = ahe_bench::EvalDir::new(&dir);
        if let Err(e) = eval.remove_scores() {
            return Err(CliError::failed(anyhow::Error::from(e).context(format!(
                "--force: removing {}",
                eval.scores_path().display()
            ))));
        }
    }
    Ok(())
}

/// What every evaluation of one `ahe eval` call shares.
struct Common {
    model_cfg: ModelConfig,
    tasks: Vec<ahe_bench::Task>,
    backend: Arc<dyn ahe_sandbox::Backend>,
    k: u32,
    concurrency: usize,
    infra_retries: u32,
    verifier: ahe_bench::VerifierPolicy,
    default_agent_timeout_sec: f64,
    /// The trajectory judge's model, when the config names one.
    judge: Option<ModelConfig>,
    /// The host reserve in bytes (`[sandbox] min_free_disk`, default 4 GiB).
    min_free_disk: u64,
    quiet: bool,
    /// The runtime every evaluation runs on.
    rt: tokio::runtime::Runtime,
    /// Cancelled by Ctrl-C, SIGTERM or SIGHUP: stops the current evaluation and the rest.
    cancel: CancellationToken,
}

/// The temp dirs `runs/NAME@REF` harnesses were exported to, removed when `ahe eval` ends
/// (the runtime reads harness files until the last trial).
#[derive(Default)]
pub(crate) struct Exports(pub(crate) Vec<PathBuf>);

impl Drop for Exports {
    fn drop(&mut self) {
        for d in &self.0 {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

/// A loaded harness and, for `runs/NAME@REF`, the run and commit it came from.
type Loaded = (ahe_harness::Harness, Option<(PathBuf, String)>);

/// Resolves (`runs/NAME@REF` is exported to a temp dir) and validates one harness.
fn load_harness(arg: &std::path::Path, exports: &mut Exports) -> Result<Loaded, CliError> {
    let (harness_dir, replay) = resolve_harness(arg).map_err(CliError::usage)?;
    if replay.is_some() {
        exports.0.push(harness_dir.clone());
    }
    let harness = ahe_harness::load(&harness_dir).map_err(|problems| {
        let list: Vec<String> = problems.iter().map(|p| format!("  {p}")).collect();
        CliError::usage(anyhow::anyhow!(
            "harness {} is invalid:\n{}",
            arg.display(),
            list.join("\n")
        ))
    })?;
    Ok((harness, replay))
}

/// Evaluates one loaded harness into `out_dir`.
fn evaluate(
    c: &Common,
    harness_arg: &std::path::Path,
    harness: ahe_harness::Harness,
    replay: Option<(PathBuf, String)>,
    out_dir: &std::path::Path,
) -> Result<ahe_bench::Scores, CliError> {
    let run_name = out_dir
        .file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "eval".into());
    let spec = RolloutSpec {
        harness: Arc::new(harness),
        model_cfg: c.model_cfg.clone(),
        tasks: c.tasks.clone(),
        backend: c.backend.clone(),
        k: c.k,
        concurrency: c.concurrency,
        infra_retries: c.infra_retries,
        verifier: c.verifier,
        default_agent_timeout_sec: c.default_agent_timeout_sec,
        out_dir: out_dir.to_path_buf(),
        run: run_name,
        prior: Vec::new(),
        schedule: Default::default(),
        expected_sec: Default::default(),
        judge: c.judge.clone(),
        min_free_disk: c.min_free_disk,
    };
    if !c.quiet {
        eprintln!(
            "ahe eval: {} on {} tasks × k={} with {} on {} sandbox → {}",
            harness_arg.display(),
            spec.tasks.len(),
            c.k,
            spec.model_cfg.describe(),
            spec.backend.name(),
            out_dir.display()
        );
    }
    let scores = c.rt.block_on(async {
        let bar = crate::progress::Bar::new(c.quiet);
        bar.set_cost_shown(crate::progress::CostShown::of([&c.model_cfg]));
        let target = std::sync::Arc::new(std::sync::OnceLock::new());
        let _ = target.set(ahe_bench::EvalDir::new(out_dir).pulls_path());
        let progress = crate::pulls::recorder(bar.callback(), target);
        let result = ahe_runner::rollout::rollout(spec, c.cancel.clone(), progress).await;
        bar.finish();
        result
    });
    let mut scores = scores.map_err(CliError::failed)?;
    if let Some((run, commit)) = &replay {
        scores.meta.replay_of = Some(run.display().to_string());
        scores.meta.harness_commit = Some(commit.clone());
        ahe_bench::EvalDir::new(out_dir)
            .write_scores(&scores)
            .map_err(CliError::failed)?;
    }
    Ok(scores)
}

/// A harness directory, or `runs/NAME@REF` exported from that run's harness repository
/// (returns the run dir and the full commit id for the record).
pub(crate) fn resolve_harness(
    arg: &std::path::Path,
) -> anyhow::Result<(PathBuf, Option<(PathBuf, String)>)> {
    let s = arg.to_string_lossy();
    let Some((run, rev)) = ahe_runner::repo::split_ref(&s).filter(|_| !arg.is_dir()) else {
        return Ok((arg.to_path_buf(), None));
    };
    let repo = ahe_runner::repo::HarnessRepo::open(&ahe_rundir::RunDir::new(&run).harness_repo())?;
    let commit = repo.resolve(&rev)?;
    let dest = std::env::temp_dir().join(format!(
        "ahe-replay-{}-{}",
        &commit[..12],
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dest);
    repo.export(&commit, &dest)?;
    Ok((dest, Some((run, commit))))
}
