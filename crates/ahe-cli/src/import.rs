//! `ahe import harbor`: a Harbor job directory (any agent: Terminus-2, Claude Code, Codex,
//! ahe's own export) as an ahe evaluation directory — per trial `result.json` and a
//! `trace.jsonl` rebuilt from its ATIF trajectory, and `scores.json` — so ahe's scores,
//! comparisons and trace tooling read it.
//!
//! Outcomes: a reward ≥ 1 passes; a trial with a reward, or one that ended in an agent or
//! verifier outcome Harbor never retries (`AgentTimeoutError`, `VerifierTimeoutError`, the
//! reward-file errors), fails; any other exception without a reward is an infra error
//! (what Harbor retries), never a failure of the agent.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use ahe_bench::layout::harbor_job;
use ahe_bench::{EvalDir, TrialResult, TrialStatus};
use anyhow::{anyhow, bail, Context};
use clap::{Args, Subcommand};
use serde_json::{json, Value};

use crate::CliError;

/// Exceptions that are the agent's or verifier's outcome, not the infrastructure's (the
/// ones Harbor's retry policy excludes).
pub const OUTCOME_EXCEPTIONS: &[&str] = &[
    "AgentTimeoutError",
    "VerifierTimeoutError",
    "RewardFileNotFoundError",
    "RewardFileEmptyError",
    "VerifierOutputParseError",
    "AgentError",
];

/// `ahe import`.
#[derive(Subcommand)]
pub enum ImportCommand {
    /// Read a Harbor job directory into an ahe evaluation directory.
    Harbor(ImportArgs),
}

/// Arguments of `ahe import harbor`.
#[derive(Args)]
pub struct ImportArgs {
    /// The Harbor job directory (config.json, result.json, <trial>/result.json …).
    job: PathBuf,
    /// The evaluation directory to write (must not exist or be empty).
    #[arg(long)]
    out: PathBuf,
}

/// Runs `ahe import`.
pub fn run(c: ImportCommand) -> Result<(), CliError> {
    match c {
        ImportCommand::Harbor(a) => {
            let s = import(&a.job, &a.out).map_err(CliError::failed)?;
            print!("{}", ahe_bench::eval::table(&s));
            println!("scores: {}", EvalDir::new(&a.out).scores_path().display());
            Ok(())
        }
    }
}

fn read(p: &Path) -> anyhow::Result<Value> {
    let text = std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
    serde_json::from_str(&text).with_context(|| format!("{}: not JSON", p.display()))
}

/// Imports the job; returns the scores written.
pub fn import(job: &Path, out: &Path) -> anyhow::Result<ahe_bench::Scores> {
    if !job.join(harbor_job::RESULT).is_file() && !job.join(harbor_job::CONFIG).is_file() {
        bail!(
            "{}: not a Harbor job directory (no config.json or result.json)",
            job.display()
        );
    }
    if std::fs::read_dir(out).is_ok_and(|mut d| d.next().is_some()) {
        bail!("--out {}: exists and is not empty", out.display());
    }
    let mut trials: Vec<(PathBuf, Value)> = Vec::new();
    for e in std::fs::read_dir(job)?.flatten() {
        let p = e.path();
        if p.join(harbor_job::RESULT).is_file() {
            trials.push((p.clone(), read(&p.join(harbor_job::RESULT))?));
        }
    }
    if trials.is_empty() {
        bail!("{}: no trial has a result.json", job.display());
    }
    // Attempts per task in start order (Harbor names trials by a random suffix).
    trials.sort_by(|a, b| {
        (a.1["task_name"].as_str(), a.1["started_at"].as_str(), &a.0).cmp(&(
            b.1["task_name"].as_str(),
            b.1["started_at"].as_str(),
            &b.0,
        ))
    });
    let eval = EvalDir::new(out);
    let mut attempts: BTreeMap<String, u32> = BTreeMap::new();
    let mut results = Vec::new();
    let mut model = None;
    for (dir, r) in &trials {
        let task = r["task_name"]
            .as_str()
            .ok_or_else(|| anyhow!("{}: no task_name", dir.display()))?;
        let n = attempts.entry(task.to_string()).or_default();
        *n += 1;
        let mut t = trial(r, task, *n);
        let info = &r["agent_info"];
        // The model as provider:name; an agent without a model (Harbor's oracle) by its name.
        model.get_or_insert_with(|| {
            let agent = info["name"].as_str().unwrap_or("unknown");
            let m = info["model_info"]["name"].as_str().unwrap_or(agent);
            match info["model_info"]["provider"].as_str() {
                Some(p) => format!("{p}:{m}"),
                None => m.to_string(),
            }
        });
        let td = eval.trial(task, *n);
        std::fs::create_dir_all(td.path())?;
        let traj = dir.join("agent/trajectory.json");
        if traj.is_file() {
            let (trace, turns) = trace(&read(&traj)?);
            std::fs::write(td.trace_path(), trace)?;
            t.turns = turns;
        }
        copy_logs(dir, td.path())?;
        td.write_result(&t);
        results.push(t);
    }
    let k = attempts.values().copied().max().unwrap_or(1);
    // The job's wall time from its own result.json (Harbor writes naive UTC times).
    let wall = read(&job.join(harbor_job::RESULT)).ok().and_then(|r| {
        let t = |k: &str| {
            let s = r[k].as_str()?.trim_end_matches('Z');
            chrono::NaiveDateTime::parse_from_str(s, "%Y-%m-%dT%H:%M:%S%.f").ok()
        };
        Some((t("finished_at")? - t("started_at")?).num_milliseconds() as f64 / 1000.0)
    });
    let mut scores = ahe_bench::scores::compute(k, &results, wall.unwrap_or(0.0).max(0.0));
    scores.meta.model = model;
    scores.meta.harness = Some(format!("harbor job {}", job.display()));
    scores
        .meta
        .extra
        .insert("imported_from".into(), json!(job.display().to_string()));
    eval.write_scores(&scores)?;
    Ok(scores)
}

/// A Harbor trial's logs where ahe's readers look: the verifier's output as
/// `verifier/stdout.txt` (and `stderr.txt`), what the agent wrote under `agent/` (any
/// agent's text logs, e.g. the oracle's `oracle.txt`) and Harbor's `trial.log` as
/// `agent.log`.
fn copy_logs(from: &Path, to: &Path) -> anyhow::Result<()> {
    for (src, dst) in [
        ("verifier/test-stdout.txt", "verifier/stdout.txt"),
        ("verifier/test-stderr.txt", "verifier/stderr.txt"),
    ] {
        let src = from.join(src);
        if src.is_file() {
            std::fs::create_dir_all(to.join("verifier"))?;
            std::fs::copy(&src, to.join(dst))
                .with_context(|| format!("copying {}", src.display()))?;
        }
    }
    let mut logs: Vec<PathBuf> = std::fs::read_dir(from.join("agent"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_file() && p.extension().is_some_and(|x| x == "txt" || x == "log"))
        .collect();
    logs.sort();
    logs.push(from.join("trial.log"));
    let mut out = String::new();
    for p in logs.iter().filter(|p| p.is_file()) {
        let rel = p.strip_prefix(from).unwrap_or(p).display().to_string();
        let text = std::fs::read(p).with_context(|| format!("reading {}", p.display()))?;
        out.push_str(&format!(
            "==> {rel} <==\n{}\n",
            String::from_utf8_lossy(&text)
        ));
    }
    if !out.is_empty() {
        std::fs::write(ahe_bench::TrialDir::new(to).agent_log_path(), out)?;
    }
    Ok(())
}

/// One Harbor `TrialResult` as ahe's.
fn trial(r: &Value, task: &str, attempt: u32) -> TrialResult {
    let mut t = TrialResult::new(task, attempt);
    t.trial_id = format!(
        "{task}/{attempt}-{}",
        r["trial_name"].as_str().unwrap_or("")
    );
    let rewards = &r["verifier_result"]["rewards"];
    t.reward = rewards["reward"].as_f64().or_else(|| {
        rewards
            .as_object()
            .and_then(|m| m.values().next())
            .and_then(Value::as_f64)
    });
    let exception = r["exception_info"]["exception_type"].as_str();
    t.error = r["exception_info"]["exception_message"]
        .as_str()
        .map(str::to_string);
    t.agent_timed_out = exception == Some("AgentTimeoutError");
    t.status = match (t.reward, exception) {
        (Some(x), _) if x >= 1.0 => TrialStatus::Pass,
        (Some(_), _) => TrialStatus::Fail,
        (None, Some(e)) if !OUTCOME_EXCEPTIONS.contains(&e) => TrialStatus::InfraError,
        (None, None) if r["verifier_result"].is_null() && r["agent_result"].is_null() => {
            TrialStatus::InfraError
        }
        _ => TrialStatus::Fail,
    };
    let a = &r["agent_result"];
    t.usage.input_tokens = a["n_input_tokens"].as_u64().unwrap_or(0);
    t.usage.cached_input_tokens = a["n_cache_tokens"].as_u64().unwrap_or(0);
    t.usage.output_tokens = a["n_output_tokens"].as_u64().unwrap_or(0);
    t.cost_usd = a["cost_usd"].as_f64().unwrap_or(0.0);
    t.started_at = r["started_at"].as_str().unwrap_or("").to_string();
    t.finished_at = r["finished_at"].as_str().unwrap_or("").to_string();
    let ms = |b: &Value| -> u64 {
        let p = |k: &str| {
            b[k].as_str()
                .and_then(|s| chrono::DateTime::parse_from_rfc3339(s).ok())
        };
        match (p("started_at"), p("finished_at")) {
            (Some(s), Some(f)) => (f - s).num_milliseconds().max(0) as u64,
            _ => 0,
        }
    };
    t.timings.agent_ms = ms(&r["agent_execution"]);
    t.timings.verifier_ms = ms(&r["verifier"]);
    t.timings.setup_ms = ms(&r["environment_setup"]);
    t.timings.total_ms = ms(r);
    t.notes.push(format!(
        "imported from Harbor trial {}",
        r["trial_name"].as_str().unwrap_or("?")
    ));
    t
}

/// An ATIF trajectory as ahe trace events (`trace.jsonl`); returns the text and the turns.
pub fn trace(t: &Value) -> (String, u32) {
    let mut lines = Vec::new();
    let turns = emit("main", t, &mut lines);
    for (i, sub) in t["subagent_trajectories"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let name = sub["trajectory_id"]
            .as_str()
            .map_or(format!("subagent-{}", i + 1), str::to_string);
        emit(&name, sub, &mut lines);
    }
    (lines.join("\n") + "\n", turns)
}

/// One agent's ATIF steps as trace events; returns its turns.
fn emit(agent: &str, t: &Value, lines: &mut Vec<String>) -> u32 {
    let mut turns = 0;
    lines.push(
        json!({"event": "run_start", "agent": agent, "model": t["agent"]["model_name"].clone()})
            .to_string(),
    );
    for s in t["steps"].as_array().into_iter().flatten() {
        let ts = s["timestamp"].clone();
        let text = match &s["message"] {
            Value::String(x) => x.clone(),
            Value::Array(parts) => parts
                .iter()
                .filter_map(|p| p["text"].as_str())
                .collect::<Vec<_>>()
                .join("\n"),
            _ => String::new(),
        };
        match s["source"].as_str() {
                Some("agent") => {
                    turns += 1;
                    // Missing ids and names become "" (a null would make the line unreadable).
                    let calls: Vec<Value> = s["tool_calls"].as_array().into_iter().flatten().map(|c| {
                        json!({"id": c["tool_call_id"].as_str().unwrap_or(""),
                               "name": c["function_name"].as_str().unwrap_or(""), "arguments": c["arguments"]})
                    }).collect();
                    let m = &s["metrics"];
                    lines.push(json!({"ts": ts, "event": "assistant", "agent": agent, "turn": turns,
                        "content": text, "reasoning": s["reasoning_content"], "tool_calls": calls,
                        "usage": {"input_tokens": m["prompt_tokens"].as_u64().unwrap_or(0),
                                  "cached_input_tokens": m["cached_tokens"].as_u64().unwrap_or(0),
                                  "output_tokens": m["completion_tokens"].as_u64().unwrap_or(0)},
                        "cost_usd": m["cost_usd"].as_f64().unwrap_or(0.0)}).to_string());
                    for o in s["observation"]["results"].as_array().into_iter().flatten() {
                        let call = s["tool_calls"].as_array().into_iter().flatten().find(|c| c["tool_call_id"] == o["source_call_id"]);
                        let output = match &o["content"] {
                            Value::String(x) => x.clone(),
                            Value::Null => String::new(),
                            Value::Array(parts) if parts.iter().all(|p| p["text"].is_string()) => parts
                                .iter()
                                .filter_map(|p| p["text"].as_str())
                                .collect::<Vec<_>>()
                                .join("\n"),
                            other => other.to_string(),
                        };
                        lines.push(json!({"ts": ts, "event": "tool_call", "agent": agent, "turn": turns,
                            "id": o["source_call_id"].as_str().unwrap_or(""), "name": call.and_then(|c| c["function_name"].as_str()),
                            "args": call.map(|c| c["arguments"].clone()), "output": output, "ok": true}).to_string());
                    }
                }
                Some(role) => lines.push(json!({"ts": ts, "event": "message", "agent": agent, "role": role, "content": text}).to_string()),
                None => {}
            }
    }
    lines.push(json!({"event": "run_end", "agent": agent, "turns": turns}).to_string());
    turns
}
