//! `ahe matrix`: harnesses × benchmarks × models, every cell an evaluation with k trials;
//! all cells share one pool of trial slots, one budget and one output directory, and a
//! re-run of the same command resumes (finished cells are reused, finished trials kept).
//! `--ablate` adds generated harnesses that remove (or add alone) each component type.

mod ablate;
mod plan;
pub(crate) mod report;

pub(crate) use plan::files;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use ahe_bench::EvalDir;
use ahe_runner::config::RunConfig;
use ahe_runner::rollout::RolloutSpec;
use anyhow::{anyhow, bail, Context};
use clap::Args;
use plan::{Ablate, BenchEntry, CellKey, HarnessEntry, MatrixFile, ModelEntry};
use serde_json::json;

use crate::CliError;

/// Arguments of `ahe matrix`.
#[derive(Args)]
pub struct MatrixArgs {
    /// A matrix file (TOML: run_config, harnesses, benchmarks, models, [model.NAME], k,
    /// ablate, base, out, concurrency); the flags below add to its lists and override the rest.
    #[arg(long)]
    config: Option<PathBuf>,
    /// A harness: directory or runs/NAME@REF (repeatable; the first is the reference).
    #[arg(long)]
    harness: Vec<String>,
    /// A benchmark: directory or fetch SPEC (repeatable).
    #[arg(long)]
    benchmark: Vec<String>,
    /// A model: spec (mock:oracle, openai:MODEL, local…) or a [model.NAME] of the matrix file
    /// (repeatable).
    #[arg(long)]
    model: Vec<String>,
    /// Trials per task and cell.
    #[arg(short = 'k', long = "k")]
    k: Option<u32>,
    /// Output directory (default runs/matrix-<timestamp>); re-running with the same one resumes.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Generate ablations of the last harness against --base: `components` (each type
    /// removed) or `add-one` (each type alone on the base).
    #[arg(long, value_enum)]
    ablate: Option<Ablate>,
    /// The base of the ablations (default: the evolved run's seed, runs/NAME@iter-000, or
    /// the first harness).
    #[arg(long)]
    base: Option<String>,
    /// Trials running at once over all cells.
    #[arg(long, value_parser = crate::concurrency_parser())]
    concurrency: Option<usize>,
    /// Sandbox backend: auto, docker, local or harbor (`[sandbox.harbor]` of --config).
    #[arg(long)]
    sandbox: Option<String>,
    /// Print matrix.json on stdout instead of the table.
    #[arg(long)]
    json: bool,
}

/// A cell with where it lives and what came of it.
pub struct Cell {
    /// Its identity.
    pub key: CellKey,
    /// Index into the harnesses, benchmarks and models.
    pub at: (usize, usize, usize),
    /// `cells/<h>__<b>__<m>/`.
    pub dir: PathBuf,
    /// ok | reused | infra_error | invalid_harness | interrupted | not_run
    pub status: String,
    /// The infrastructure's or the validation's message.
    pub message: Option<String>,
    /// Its scores, once evaluated.
    pub scores: Option<ahe_bench::Scores>,
}

/// Everything the matrix spans.
pub struct Plan {
    /// Harnesses (given, then generated).
    pub harnesses: Vec<HarnessEntry>,
    /// Benchmarks.
    pub benchmarks: Vec<BenchEntry>,
    /// Models.
    pub models: Vec<ModelEntry>,
    /// Trials per task.
    pub k: u32,
    /// The ablation mode and the labels of (evolved, base).
    pub ablation: Option<(Ablate, String, String)>,
}

/// Runs `ahe matrix`.
pub fn run(a: MatrixArgs) -> Result<(), CliError> {
    let (file, cfg) = load_file(&a)?;
    let k = a.k.or(file.k).or(cfg.as_ref().map(|c| c.k)).unwrap_or(1);
    if k == 0 {
        return Err(CliError::usage(anyhow!("-k: must be at least 1")));
    }
    let out = a.out.clone().or(file.out.clone()).unwrap_or_else(|| {
        PathBuf::from("runs").join(format!(
            "matrix-{}",
            chrono::Local::now().format("%Y%m%d-%H%M%S")
        ))
    });
    std::fs::create_dir_all(&out)
        .map_err(|e| CliError::failed(anyhow!("{}: {e}", out.display())))?;
    let mut exports = crate::eval::Exports::default();
    let ablate = a.ablate.or(file.ablate);
    let base = a.base.clone().or(file.base.clone());
    let plan = make_plan(&file, cfg.as_ref(), k, ablate, base, &out, &mut exports)
        .map_err(CliError::usage)?;
    let mut cells = cells(&plan, &out).map_err(CliError::usage)?;
    let concurrency = a
        .concurrency
        .or(file.concurrency)
        .or(cfg.as_ref().map(|c| c.sandbox.concurrency))
        .unwrap_or(4)
        .max(1);
    let rt = tokio::runtime::Runtime::new().map_err(CliError::failed)?;
    let cancel = crate::cancel_on_interrupt(&rt, "stopping the matrix's trials...")?;
    let t0 = std::time::Instant::now();
    let env = Env {
        cfg: cfg.clone(),
        backend: backend(&a, cfg.as_ref())?,
        concurrency,
        budget: cfg
            .as_ref()
            .and_then(|c| c.evolve.budget_usd)
            .map(|usd| Arc::new(ahe_model::Budget::new(usd))),
        quiet: a.json,
        journal: out.join("matrix.jsonl"),
        cancel: cancel.clone(),
    };
    if !a.json {
        eprintln!(
            "ahe matrix: {} harnesses × {} benchmarks × {} models = {} cells, k={k}, {concurrency} trials at once → {}",
            plan.harnesses.len(),
            plan.benchmarks.len(),
            plan.models.len(),
            cells.len(),
            out.display()
        );
    }
    rt.block_on(run_cells(&plan, &mut cells, &env));
    let wall = t0.elapsed().as_secs_f64();
    let doc = report::document(&plan, &cells, &out, wall);
    report::write(&out, &doc).map_err(CliError::failed)?;
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&doc).map_err(CliError::failed)?
        );
    } else {
        print!("{}", report::text(&doc));
        println!("matrix: {}", out.join("matrix.json").display());
    }
    if cancel.is_cancelled() {
        return Err(CliError::failed(anyhow!(
            "interrupted: re-run the same command to resume (finished trials and cells are kept in {})",
            out.display()
        )));
    }
    Ok(())
}

/// The matrix file (`--config`, else empty) with the command line's harnesses, benchmarks and
/// models added, and the run config it names.
fn load_file(a: &MatrixArgs) -> Result<(MatrixFile, Option<RunConfig>), CliError> {
    let mut file = match &a.config {
        Some(p) => MatrixFile::load(p).map_err(CliError::usage)?,
        None => MatrixFile::default(),
    };
    file.harnesses.extend(a.harness.iter().cloned());
    file.benchmarks.extend(a.benchmark.iter().cloned());
    file.models.extend(a.model.iter().cloned());
    let cfg = file
        .run_config
        .as_deref()
        .map(RunConfig::load)
        .transpose()
        .map_err(CliError::usage)?;
    Ok((file, cfg))
}

/// The sandbox backend every cell shares: `--sandbox`, else the run config's (with its pull
/// policy, hosts and Harbor settings), else `auto`.
fn backend(
    a: &MatrixArgs,
    cfg: Option<&RunConfig>,
) -> Result<Arc<dyn ahe_sandbox::Backend>, CliError> {
    let sandbox = a
        .sandbox
        .clone()
        .or_else(|| cfg.map(|c| c.sandbox.backend.clone()))
        .unwrap_or_else(|| "auto".into());
    let pull = cfg.map(|c| c.sandbox.pull).unwrap_or_default();
    let hosts = cfg.map(|c| c.sandbox.hosts.clone()).unwrap_or_default();
    let harbor = cfg.and_then(|c| c.sandbox.harbor.as_ref());
    ahe_runner::rollout::select_backend_on(&sandbox, pull, &hosts, harbor).map_err(CliError::usage)
}

/// Resolves every harness (exporting `runs/NAME@REF`), generates the ablations, validates.
fn make_plan(
    file: &MatrixFile,
    cfg: Option<&RunConfig>,
    k: u32,
    ablate: Option<Ablate>,
    base: Option<String>,
    out: &Path,
    exports: &mut crate::eval::Exports,
) -> anyhow::Result<Plan> {
    if file.harnesses.is_empty() {
        bail!("no harness: pass --harness DIR|runs/NAME@REF (repeatable)");
    }
    let mut seen = std::collections::BTreeSet::new();
    let mut harnesses = Vec::new();
    for h in &file.harnesses {
        if !seen.insert(h.clone()) {
            bail!("--harness {h} is given twice");
        }
        harnesses.push(resolve(h, exports)?);
    }
    let mut ablation = None;
    if let Some(mode) = ablate {
        let evolved = harnesses.last().cloned().expect("at least one harness");
        let base_label = base.unwrap_or_else(|| match &evolved.run {
            Some(_) => format!(
                "{}@iter-000",
                evolved.label.rsplit_once('@').map_or("", |x| x.0)
            ),
            None => harnesses[0].label.clone(),
        });
        let base_entry = match harnesses.iter().find(|h| h.label == base_label) {
            Some(b) => b.clone(),
            None => {
                let b = resolve(&base_label, exports)?;
                harnesses.push(b.clone());
                b
            }
        };
        if base_entry.label == evolved.label {
            bail!(
                "--ablate: the base and the evolved harness are both {}",
                evolved.label
            );
        }
        let changed = ablate::changed(&base_entry.dir, &evolved.dir)?;
        for ty in ablate::changed_types(&changed) {
            let (label, start, from, how) = match mode {
                Ablate::Components => (
                    format!("{} -{ty}", evolved.label),
                    &evolved.dir,
                    &base_entry.dir,
                    "without",
                ),
                Ablate::AddOne => (
                    format!("{} +{ty}", base_entry.label),
                    &base_entry.dir,
                    &evolved.dir,
                    "only",
                ),
            };
            let dest = out.join("harnesses").join(plan::slug(&label));
            ablate::generate(start, from, &changed, ty, &dest)?;
            let mut e = entry(&label, dest, None)?;
            e.ablation = Some((ty.to_string(), how.to_string()));
            harnesses.push(e);
        }
        ablation = Some((mode, evolved.label.clone(), base_entry.label.clone()));
    }
    let _ = cfg;
    Ok(Plan {
        harnesses,
        benchmarks: plan::benchmarks(&file.benchmarks)?,
        models: plan::models(&file.models, &file.model)?,
        k,
        ablation,
    })
}

/// One given harness: exported when `runs/NAME@REF`, hashed when a directory.
fn resolve(arg: &str, exports: &mut crate::eval::Exports) -> anyhow::Result<HarnessEntry> {
    let (dir, replay) = crate::eval::resolve_harness(Path::new(arg))?;
    if replay.is_some() {
        exports.0.push(dir.clone());
    }
    if !dir.is_dir() {
        bail!("--harness {arg}: no such directory (or runs/NAME@REF)");
    }
    entry(arg, dir, replay)
}

fn entry(
    label: &str,
    dir: PathBuf,
    replay: Option<(PathBuf, String)>,
) -> anyhow::Result<HarnessEntry> {
    let invalid = ahe_harness::load(&dir).err().map(|problems| {
        problems
            .iter()
            .map(|p| p.to_string())
            .collect::<Vec<_>>()
            .join("; ")
    });
    let identity = match &replay {
        Some((_, commit)) => commit.clone(),
        None => plan::content_hash(&dir)?,
    };
    let run = replay.map(|(run, _)| run);
    Ok(HarnessEntry {
        label: label.to_string(),
        holdout: run.as_deref().map(plan::holdout_of).unwrap_or_default(),
        dir,
        identity,
        run,
        ablation: None,
        invalid,
    })
}

/// Every cell, with the ones a previous run of the same matrix finished marked `reused`.
fn cells(plan: &Plan, out: &Path) -> anyhow::Result<Vec<Cell>> {
    let mut cells = Vec::new();
    for (hi, h) in plan.harnesses.iter().enumerate() {
        for (bi, b) in plan.benchmarks.iter().enumerate() {
            for (mi, m) in plan.models.iter().enumerate() {
                let key = CellKey {
                    harness: h.label.clone(),
                    benchmark: b.label.clone(),
                    model: m.label.clone(),
                    harness_identity: h.identity.clone(),
                    model_describe: m.cfg.describe(),
                    k: plan.k,
                    tasks: b.tasks.iter().map(|t| t.name.clone()).collect(),
                };
                let dir = out.join("cells").join(key.dir_name());
                let mut cell = Cell {
                    key,
                    at: (hi, bi, mi),
                    dir,
                    status: "not_run".into(),
                    message: None,
                    scores: None,
                };
                let key_file = cell.dir.join("cell.json");
                if let Ok(text) = std::fs::read_to_string(&key_file) {
                    let old: CellKey = serde_json::from_str(&text)
                        .with_context(|| format!("{}: not a cell record", key_file.display()))?;
                    if old != cell.key {
                        bail!(
                            "{}: this cell was made for another harness content, model or task list \
                             ({} vs {}); use a new --out, or delete that cell directory",
                            cell.dir.display(), old.harness_identity, cell.key.harness_identity
                        );
                    }
                    if let Ok(s) = EvalDir::new(&cell.dir).read_scores() {
                        cell.status = "reused".into();
                        cell.scores = Some(s);
                    }
                }
                if let Some(why) = &h.invalid {
                    cell.status = "invalid_harness".into();
                    cell.message = Some(why.clone());
                }
                cells.push(cell);
            }
        }
    }
    Ok(cells)
}

/// What every cell's evaluation shares.
struct Env {
    cfg: Option<RunConfig>,
    backend: Arc<dyn ahe_sandbox::Backend>,
    concurrency: usize,
    budget: Option<Arc<ahe_model::Budget>>,
    quiet: bool,
    journal: PathBuf,
    cancel: tokio_util::sync::CancellationToken,
}

impl Env {
    /// Appends one event to `matrix.jsonl`.
    fn journal(&self, event: &str, cell: &Cell, extra: serde_json::Value) {
        use std::io::Write;
        let line = json!({"time": chrono::Utc::now().to_rfc3339(), "event": event, "cell": cell.dir.file_name().map(|n| n.to_string_lossy().into_owned()), "extra": extra});
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.journal)
        {
            let _ = writeln!(f, "{line}");
        }
    }
}

/// What a cell runs: its harness (turns capped by the run config's `[agent]`), model and
/// tasks, with the run config's sandbox, verifier, agent-timeout, judge and disk settings.
fn cell_spec(
    plan: &Plan,
    c: &Cell,
    env: &Env,
    prior: Vec<ahe_bench::TrialResult>,
) -> anyhow::Result<RolloutSpec> {
    let (h, b, m) = (
        &plan.harnesses[c.at.0],
        &plan.benchmarks[c.at.1],
        &plan.models[c.at.2],
    );
    let mut harness =
        ahe_harness::load(&h.dir).map_err(|p| anyhow!("harness {}: {p:?}", h.label))?;
    if let Some(cfg) = &env.cfg {
        cfg.agent.cap(&mut harness);
    }
    Ok(RolloutSpec {
        harness: Arc::new(harness),
        model_cfg: m.cfg.clone(),
        tasks: b.tasks.clone(),
        backend: env.backend.clone(),
        k: plan.k,
        concurrency: env.concurrency,
        infra_retries: env.cfg.as_ref().map_or(1, |c| c.sandbox.infra_retries),
        verifier: env.cfg.as_ref().map(|c| c.verifier).unwrap_or_default(),
        default_agent_timeout_sec: env
            .cfg
            .as_ref()
            .map_or(1800.0, |c| c.agent.default_timeout_sec),
        out_dir: c.dir.clone(),
        run: format!("matrix-{}", c.key.dir_name()),
        prior,
        schedule: Default::default(),
        expected_sec: Default::default(),
        judge: env.cfg.as_ref().and_then(|c| c.judge_model()),
        min_free_disk: env
            .cfg
            .as_ref()
            .map_or(ahe_bench::disk::DEFAULT_MIN_FREE, |c| {
                c.sandbox.min_free_disk
            }),
    })
}

/// A progress callback printing `[cell] task #attempt: status` per finished trial (nothing
/// when `quiet`).
fn cell_progress(c: &Cell, quiet: bool) -> Arc<dyn Fn(ahe_bench::Progress) + Send + Sync> {
    let name = c
        .dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    Arc::new(move |p| {
        if let (false, ahe_bench::Progress::TrialDone { result }) = (quiet, p) {
            eprintln!(
                "[{name}] {} #{}: {}",
                result.task,
                result.attempt,
                result.status.as_str()
            );
        }
    })
}

/// Evaluates the cells still to run, all at once within one pool of trial slots.
async fn run_cells(plan: &Plan, cells: &mut [Cell], env: &Env) {
    let slots = Arc::new(tokio::sync::Semaphore::new(env.concurrency));
    let todo: Vec<&mut Cell> = cells.iter_mut().filter(|c| c.status == "not_run").collect();
    let jobs = todo.into_iter().map(|c| async move {
        let r = run_cell(plan, c, env).await;
        match r {
            Ok(s) => {
                c.status = "ok".into();
                env.journal("cell_done", c, json!({"pass_at_1": s.pass_at_1}));
                c.scores = Some(s);
            }
            Err(e) if env.cancel.is_cancelled() => {
                c.status = "interrupted".into();
                c.message = Some(format!("{e:#}"));
            }
            Err(e) => {
                c.status = "infra_error".into();
                c.message = Some(format!("{e:#}"));
                env.journal("cell_failed", c, json!({"error": format!("{e:#}")}));
            }
        }
    });
    ahe_bench::with_shared_slots(slots, futures_util::future::join_all(jobs)).await;
}

/// One cell's evaluation; its finished trials (not infra errors) from before are kept.
async fn run_cell(plan: &Plan, c: &Cell, env: &Env) -> anyhow::Result<ahe_bench::Scores> {
    std::fs::create_dir_all(&c.dir)?;
    std::fs::write(
        c.dir.join("cell.json"),
        serde_json::to_string_pretty(&c.key)?,
    )?;
    env.journal("cell_started", c, json!({}));
    let eval = EvalDir::new(&c.dir);
    let prior: Vec<ahe_bench::TrialResult> = ahe_rundir::clean::load_results(&eval.trials())
        .unwrap_or_default()
        .into_iter()
        .filter(|r| r.status != ahe_bench::TrialStatus::InfraError && r.attempt <= plan.k)
        .collect();
    let spec = cell_spec(plan, c, env, prior)?;
    let opts = ahe_model::ClientOptions {
        default_cache_dir: Some(eval.model_cache()),
        budget: env.budget.clone(),
    };
    let progress = cell_progress(c, env.quiet);
    let scores =
        ahe_runner::rollout::rollout_with(spec, &opts, env.cancel.clone(), progress).await?;
    let all_infra = scores.n_tasks > 0
        && scores.statuses.get("infra_error").copied().unwrap_or(0)
            == scores.n_tasks as u64 * plan.k as u64;
    if all_infra {
        // No scores.json: the next run of the matrix tries the cell again.
        bail!(
            "every trial ended as an infrastructure error (see {})",
            eval.trials().display()
        );
    }
    eval.write_scores(&scores)?;
    Ok(scores)
}
