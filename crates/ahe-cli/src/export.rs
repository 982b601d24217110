//! `ahe export harbor`: an evaluation (an `ahe eval` directory, or one iteration's rollout of
//! a run) as a Harbor job directory — the job's `config.json` and `result.json`, and per
//! trial `config.json`, `result.json` (Harbor's `TrialResult`), `agent/trajectory.json`
//! (ATIF, sub-agents embedded) and `verifier/reward.txt` — so Harbor's viewer, its
//! `job` tooling and the leaderboard's trajectory checks read ahe's trials.

use std::path::{Path, PathBuf};

use ahe_bench::layout::harbor_job;
use ahe_bench::{EvalDir, TrialResult, TrialStatus};
use ahe_rundir::RunDir;
use ahe_runner::config::RunConfig;
use anyhow::{anyhow, bail, Context};
use clap::{Args, Subcommand};
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

use crate::CliError;

/// `ahe export`.
#[derive(Subcommand)]
pub enum ExportCommand {
    /// Write a Harbor job directory: runs/NAME[@ITER|@best] (default: the last iteration
    /// with scores) or an `ahe eval` directory.
    Harbor(HarborArgs),
}

/// Arguments of `ahe export harbor`.
#[derive(Args)]
pub struct HarborArgs {
    /// runs/NAME[@ITER|@best] or an evaluation directory (scores.json + trials/).
    source: String,
    /// The job directory to write (must not exist or be empty).
    #[arg(long)]
    out: PathBuf,
    /// The benchmark the tasks come from (for task paths and checksums; a run's config
    /// names its own).
    #[arg(long)]
    benchmark: Option<PathBuf>,
}

/// The ATIF version written (the newest Harbor 0.26 validates).
pub const ATIF_VERSION: &str = "ATIF-v1.8";

/// Runs `ahe export`.
pub fn run(c: ExportCommand) -> Result<(), CliError> {
    match c {
        ExportCommand::Harbor(a) => {
            let n = harbor(&a).map_err(CliError::failed)?;
            println!("harbor job: {} ({n} trials)", a.out.display());
            Ok(())
        }
    }
}

/// The evaluation directory, its name and the benchmark directory a source names.
fn source(a: &HarborArgs) -> anyhow::Result<(EvalDir, String, Option<PathBuf>)> {
    let (path, rev) = match a.source.rsplit_once('@') {
        Some((p, r)) if !Path::new(&a.source).is_dir() => (PathBuf::from(p), Some(r.to_string())),
        _ => (PathBuf::from(&a.source), None),
    };
    let rd = RunDir::new(&path);
    if !rd.looks_like_run() {
        if rev.is_some() {
            bail!(
                "{}: not a run directory (NAME@ITER is for runs/NAME)",
                path.display()
            );
        }
        let eval = EvalDir::new(&path);
        if !eval.scores_path().is_file() {
            bail!(
                "{}: neither a run nor an evaluation directory (no scores.json)",
                path.display()
            );
        }
        let name = path
            .file_name()
            .map_or("eval".into(), |n| n.to_string_lossy().into_owned());
        return Ok((eval, name, a.benchmark.clone()));
    }
    let t = match rev.as_deref() {
        None | Some("last") => (1..=rd.last_iteration_on_disk())
            .rev()
            .find(|t| rd.iteration(*t).eval().scores_path().is_file())
            .ok_or_else(|| anyhow!("{}: no iteration has scores yet", path.display()))?,
        Some("best") => rd
            .best()
            .map(|b| b.iteration)
            .ok_or_else(|| anyhow!("{}: no best yet", path.display()))?,
        Some(n) => n
            .trim_start_matches("iter-")
            .parse()
            .map_err(|_| anyhow!("@{n}: use an iteration number, best or last"))?,
    };
    let cfg = RunConfig::load(&rd.config_path())?;
    let eval = rd.iteration(t).eval().clone();
    Ok((
        eval,
        format!("{}-iter-{t:03}", rd.name()),
        a.benchmark.clone().or(Some(cfg.benchmark.path)),
    ))
}

/// Writes the job; returns the number of trials.
fn harbor(a: &HarborArgs) -> anyhow::Result<usize> {
    let (eval, name, bench) = source(a)?;
    if std::fs::read_dir(&a.out).is_ok_and(|mut d| d.next().is_some()) {
        bail!("--out {}: exists and is not empty", a.out.display());
    }
    let scores = eval.read_scores()?;
    let results: Vec<TrialResult> = eval
        .trial_dirs()
        .iter()
        .filter_map(|t| t.read_result().ok())
        .collect();
    if results.is_empty() {
        bail!("{}: no finished trials", eval.path().display());
    }
    let model = scores
        .meta
        .model
        .clone()
        .unwrap_or_else(|| "unknown".into());
    let (provider, model_name) = model
        .split_once(':')
        .map_or((None, model.as_str()), |(p, m)| (Some(p), m));
    std::fs::create_dir_all(&a.out)?;
    let job = Job {
        out: &a.out,
        eval: &eval,
        bench: bench.as_deref(),
        job_id: uuid(&name),
        name: &name,
        model: &model,
        model_name,
        agent: json!({"name": "ahe", "model_name": model}),
        agent_info: json!({"name": "ahe", "version": env!("CARGO_PKG_VERSION"),
            "model_info": {"name": model_name, "provider": provider}}),
    };
    let mut summaries = Vec::new();
    for r in &results {
        summaries.push(job.write_trial(r)?);
    }
    job.write_summary(&scores, &results)?;
    Ok(summaries.len())
}

/// What every file of one exported Harbor job shares: where it goes, the evaluation it comes
/// from, the benchmark's tasks (when at hand), its name and id, and the agent it names.
struct Job<'a> {
    out: &'a Path,
    eval: &'a EvalDir,
    bench: Option<&'a Path>,
    name: &'a str,
    job_id: String,
    model: &'a str,
    model_name: &'a str,
    agent: Value,
    agent_info: Value,
}

impl Job<'_> {
    /// Writes one trial's folder (`agent/trajectory.json`, `verifier/reward.txt`, its config
    /// and result); returns its result document.
    fn write_trial(&self, r: &TrialResult) -> anyhow::Result<Value> {
        let task_dir = self.bench.map(|b| b.join(&r.task)).filter(|d| d.is_dir());
        let trial_name = format!(
            "{}__{}",
            r.task.chars().take(32).collect::<String>(),
            &uuid(&r.trial_id)[..7]
        );
        let dir = self.out.join(&trial_name);
        std::fs::create_dir_all(dir.join("agent"))?;
        std::fs::create_dir_all(dir.join("verifier"))?;
        let task_path = task_dir.clone().unwrap_or_else(|| PathBuf::from(&r.task));
        let config = json!({
            "task": {"path": task_path},
            "trial_name": trial_name,
            "trials_dir": self.out,
            "agent": self.agent,
            "job_id": self.job_id,
        });
        let trial_dir = self.eval.trial(&r.task, r.attempt);
        let trace = std::fs::read_to_string(trial_dir.trace_path()).unwrap_or_default();
        // A trial that never reached its agent (infra error) has no trajectory, as in Harbor.
        let t = atif(&trace, self.model);
        if t["steps"].as_array().is_some_and(|s| !s.is_empty()) {
            std::fs::write(
                dir.join("agent/trajectory.json"),
                serde_json::to_string_pretty(&t)?,
            )?;
        }
        if let Some(reward) = r.reward {
            std::fs::write(dir.join("verifier/reward.txt"), format!("{reward}\n"))?;
        }
        let result = trial_result(
            r,
            &trial_name,
            &dir,
            &task_path,
            task_dir.as_deref(),
            &config,
            &self.agent_info,
        )?;
        std::fs::write(
            dir.join(harbor_job::CONFIG),
            serde_json::to_string_pretty(&config)?,
        )?;
        std::fs::write(
            dir.join(harbor_job::RESULT),
            serde_json::to_string_pretty(&result)?,
        )?;
        Ok(result)
    }

    /// Writes the job's own config and result: trial and error counts, the mean reward, the
    /// tokens and dollars of the evaluation.
    fn write_summary(
        &self,
        scores: &ahe_bench::Scores,
        results: &[TrialResult],
    ) -> anyhow::Result<()> {
        let errored = results
            .iter()
            .filter(|r| r.status == TrialStatus::InfraError)
            .count();
        let rewards: Vec<f64> = results.iter().map(|r| r.reward.unwrap_or(0.0)).collect();
        let mean = rewards.iter().sum::<f64>() / rewards.len() as f64;
        let eval_key = format!("ahe__{}__{}", self.model_name, self.name);
        let started = results.iter().map(|r| r.started_at.clone()).min();
        let finished = results.iter().map(|r| r.finished_at.clone()).max();
        let job = json!({
            "id": self.job_id,
            "started_at": started,
            "finished_at": finished,
            "n_total_trials": results.len(),
            "stats": {
                "n_completed_trials": results.len(),
                "n_errored_trials": errored,
                "evals": {eval_key: {"n_trials": results.len(), "n_errors": errored, "metrics": [{"mean": mean}]}},
                "n_input_tokens": scores.tokens.input,
                "n_cache_tokens": scores.tokens.cached_input,
                "n_output_tokens": scores.tokens.output,
                "cost_usd": scores.cost_usd,
            },
        });
        let job_config =
            json!({"job_name": self.name, "n_attempts": scores.k, "agents": [self.agent]});
        std::fs::write(
            self.out.join(harbor_job::CONFIG),
            serde_json::to_string_pretty(&job_config)?,
        )?;
        std::fs::write(
            self.out.join(harbor_job::RESULT),
            serde_json::to_string_pretty(&job)?,
        )?;
        Ok(())
    }
}

/// A stable UUID (v4 layout) from a string: the same trial gets the same id on re-export.
fn uuid(s: &str) -> String {
    let h = Sha256::digest(s.as_bytes());
    let mut b = [0u8; 16];
    b.copy_from_slice(&h[..16]);
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let x: String = b.iter().map(|v| format!("{v:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &x[..8],
        &x[8..12],
        &x[12..16],
        &x[16..20],
        &x[20..]
    )
}

/// Harbor's task checksum: sha256 over the task directory's files (relative path and
/// bytes, sorted), or over the task name when the directory is not at hand.
fn checksum(task: &str, dir: Option<&Path>) -> anyhow::Result<String> {
    let mut h = Sha256::new();
    match dir {
        Some(d) => {
            for rel in crate::matrix::files(d)? {
                h.update(rel.as_bytes());
                h.update(std::fs::read(d.join(&rel))?);
            }
        }
        None => h.update(task.as_bytes()),
    }
    Ok(format!("{:x}", h.finalize()))
}

fn trial_result(
    r: &TrialResult,
    trial_name: &str,
    dir: &Path,
    task_path: &Path,
    task_dir: Option<&Path>,
    config: &Value,
    agent_info: &Value,
) -> anyhow::Result<Value> {
    let exception = match (r.status, &r.error) {
        (TrialStatus::Pass | TrialStatus::Fail, None) => Value::Null,
        (status, e) => json!({
            "exception_type": if status == TrialStatus::InfraError { "InfraError" } else { "AgentError" },
            "exception_message": e.clone().unwrap_or_else(|| status.as_str().to_string()),
            "exception_traceback": "",
            "occurred_at": r.finished_at,
        }),
    };
    let abs = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    Ok(json!({
        "id": uuid(&r.trial_id),
        "task_name": r.task,
        "trial_name": trial_name,
        "trial_uri": format!("file://{}", abs.display()),
        "task_id": {"path": task_path},
        "source": "ahe",
        "task_checksum": checksum(&r.task, task_dir).context("task checksum")?,
        "config": config,
        "agent_info": agent_info,
        "agent_result": {
            "n_input_tokens": r.usage.input_tokens,
            "n_cache_tokens": r.usage.cached_input_tokens,
            "n_output_tokens": r.usage.output_tokens,
            "cost_usd": r.cost_usd,
            "metadata": {"ahe_status": r.status.as_str(), "ahe_attempt": r.attempt, "ahe_turns": r.turns},
        },
        "verifier_result": r.reward.map(|x| json!({"rewards": {"reward": x}})),
        "exception_info": exception,
        "started_at": r.started_at,
        "finished_at": r.finished_at,
    }))
}

/// ATIF of one trial's trace: the main agent's steps, each sub-agent embedded as its own
/// trajectory.
pub fn atif(trace: &str, model: &str) -> Value {
    let events: Vec<Value> = trace
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let mut agents: Vec<String> = Vec::new();
    for e in &events {
        if let Some(a) = e["agent"].as_str() {
            if !agents.iter().any(|x| x == a) {
                agents.push(a.to_string());
            }
        }
    }
    let main = agents.first().cloned().unwrap_or_else(|| "main".into());
    let mut t = trajectory(&events, &main, model);
    let subs: Vec<Value> = agents[1.min(agents.len())..]
        .iter()
        .map(|a| {
            let mut s = trajectory(&events, a, model);
            s["trajectory_id"] = json!(a);
            s
        })
        .collect();
    if !subs.is_empty() {
        t["subagent_trajectories"] = json!(subs);
    }
    t
}

fn trajectory(events: &[Value], agent: &str, model: &str) -> Value {
    let mut steps: Vec<Value> = Vec::new();
    let mut totals = (0u64, 0u64, 0u64, 0f64);
    for e in events.iter().filter(|e| e["agent"] == agent) {
        let ts = e["ts"].clone();
        match e["event"].as_str().unwrap_or("") {
            "message" => {
                let source = if e["role"] == "system" {
                    "system"
                } else {
                    "user"
                };
                steps.push(
                    json!({"step_id": steps.len() + 1, "timestamp": ts, "source": source,
                    "message": e["content"].as_str().unwrap_or("")}),
                );
            }
            "assistant" => {
                let u = &e["usage"];
                let (p, c, k) = (
                    u["input_tokens"].as_u64().unwrap_or(0),
                    u["output_tokens"].as_u64().unwrap_or(0),
                    u["cached_input_tokens"].as_u64().unwrap_or(0),
                );
                let cost = e["cost_usd"].as_f64().unwrap_or(0.0);
                totals = (totals.0 + p, totals.1 + c, totals.2 + k, totals.3 + cost);
                let calls: Vec<Value> = e["tool_calls"].as_array().into_iter().flatten().map(|c| json!({
                    "tool_call_id": c["id"], "function_name": c["name"],
                    "arguments": if c["arguments"].is_object() { c["arguments"].clone() } else { json!({"raw": c["arguments"]}) },
                })).collect();
                let mut step = Map::new();
                step.insert("step_id".into(), json!(steps.len() + 1));
                step.insert("timestamp".into(), ts);
                step.insert("source".into(), json!("agent"));
                step.insert("model_name".into(), json!(model));
                step.insert("message".into(), json!(e["content"].as_str().unwrap_or("")));
                if let Some(r) = e["reasoning"].as_str() {
                    step.insert("reasoning_content".into(), json!(r));
                }
                if !calls.is_empty() {
                    step.insert("tool_calls".into(), json!(calls));
                    step.insert("observation".into(), json!({"results": []}));
                }
                step.insert("metrics".into(), json!({"prompt_tokens": p, "completion_tokens": c, "cached_tokens": k, "cost_usd": cost}));
                steps.push(Value::Object(step));
            }
            "tool_call" => {
                // The observation goes on the agent step that made the call.
                let id = e["id"].clone();
                if let Some(s) = steps.iter_mut().rev().find(|s| {
                    s["tool_calls"]
                        .as_array()
                        .is_some_and(|c| c.iter().any(|c| c["tool_call_id"] == id))
                }) {
                    let content = match e["error"].as_str() {
                        Some(err) => {
                            format!("{}\n[error: {err}]", e["output"].as_str().unwrap_or(""))
                        }
                        None => e["output"].as_str().unwrap_or("").to_string(),
                    };
                    if let Some(r) = s["observation"]["results"].as_array_mut() {
                        r.push(json!({"source_call_id": id, "content": content}));
                    }
                }
            }
            _ => {}
        }
    }
    json!({
        "schema_version": ATIF_VERSION,
        "session_id": agent,
        "agent": {"name": "ahe", "version": env!("CARGO_PKG_VERSION"), "model_name": model},
        "steps": steps,
        "final_metrics": {"total_prompt_tokens": totals.0, "total_completion_tokens": totals.1,
            "total_cached_tokens": totals.2, "total_cost_usd": totals.3, "total_steps": steps.len()},
    })
}
