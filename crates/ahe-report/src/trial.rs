//! One HTML page per trial trace (`report/trials/<iter>/<task>/<attempt>.html`), written in
//! parallel and only when missing or stale.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use minijinja::context;
use rayon::prelude::*;
use serde::Serialize;

use super::format::{secs, tokens, usd};
use super::html::env;
use super::model::RunReport;
use super::{url_segment, write_atomic};
use ahe_rundir::clean::CleanTrace;

#[derive(Serialize)]
struct CallView {
    name: String,
    summary: String,
    args: String,
    output: Option<String>,
    ok: bool,
    exit_code: Option<i32>,
    truncated: bool,
    error: Option<String>,
    duration: String,
}

#[derive(Serialize)]
struct TurnView {
    turn: u32,
    agent: String,
    content: Option<String>,
    calls: Vec<CallView>,
    middleware: Vec<(String, String, String)>,
    feedback: Vec<String>,
    errors: Vec<(String, String)>,
    tokens: String,
    duration: String,
    has_error: bool,
}

/// Where a trial page sits: what it names as its source and where its links go.
#[derive(Debug, Clone)]
pub struct PageContext {
    /// The run's (or evaluation's) name.
    pub source: String,
    /// The iteration of a run's trial; None for an evaluation directory's.
    pub iteration: Option<u32>,
    /// Link back to the report (with its anchor).
    pub back: String,
    /// Link to the trial's directory (ends in `/`).
    pub raw: String,
}

/// Renders one trial's page (`report/trials/<iter>/<task>/<attempt>.html`).
pub fn render_trial(run: &RunReport, iteration: u32, t: &CleanTrace) -> anyhow::Result<String> {
    let ctx = PageContext {
        source: run.name.clone(),
        iteration: Some(iteration),
        back: format!("../../../../report.html#iter-{iteration:03}"),
        raw: format!(
            "../../../../iterations/{iteration:03}/trials/{}/{}/",
            url_segment(&t.task),
            t.attempt
        ),
    };
    render_trial_page(&ctx, t)
}

/// Renders one trial's page from its cleaned trace, with the links of `ctx`.
pub fn render_trial_page(ctx: &PageContext, t: &CleanTrace) -> anyhow::Result<String> {
    let turns: Vec<TurnView> = t
        .turns
        .iter()
        .map(|turn| {
            let calls: Vec<CallView> = turn
                .tool_calls
                .iter()
                .map(|c| {
                    let args = serde_json::to_string_pretty(&c.args).unwrap_or_default();
                    let one_line = match &c.args {
                        serde_json::Value::Object(m) if m.len() == 1 => m
                            .values()
                            .next()
                            .map(|v| {
                                v.as_str()
                                    .map(String::from)
                                    .unwrap_or_else(|| v.to_string())
                            })
                            .unwrap_or_default(),
                        v => v.to_string(),
                    };
                    let mut summary: String =
                        one_line.replace('\n', " ⏎ ").chars().take(120).collect();
                    if one_line.chars().count() > 120 {
                        summary.push('…');
                    }
                    CallView {
                        name: c.name.clone(),
                        summary,
                        args,
                        output: c.output.clone(),
                        ok: c.ok && c.error.is_none(),
                        exit_code: c.exit_code,
                        truncated: c.truncated,
                        error: c.error.clone(),
                        duration: format!("{} ms", c.duration_ms),
                    }
                })
                .collect();
            let errors: Vec<(String, String)> = t
                .errors
                .iter()
                .filter(|e| e.turn == turn.turn && e.agent == turn.agent && e.turn > 0)
                .map(|e| (e.kind.clone(), e.message.clone()))
                .collect();
            TurnView {
                turn: turn.turn,
                agent: turn.agent.clone(),
                content: turn.content.clone().filter(|c| !c.is_empty()),
                has_error: !errors.is_empty() || calls.iter().any(|c| !c.ok),
                calls,
                middleware: turn
                    .middleware
                    .iter()
                    .map(|m| (m.hook.clone(), m.name.clone(), m.decision.to_string()))
                    .collect(),
                feedback: turn.feedback.clone(),
                errors,
                tokens: format!(
                    "{} in / {} out",
                    tokens(turn.usage.input_tokens),
                    tokens(turn.usage.output_tokens)
                ),
                duration: format!("{} ms", turn.duration_ms),
            }
        })
        .collect();
    let tmpl = env().get_template("trial.html")?;
    Ok(tmpl.render(context! {
        run => ctx.source,
        iteration => ctx.iteration,
        task => t.task,
        attempt => t.attempt,
        trial_id => t.trial_id,
        status => t.status,
        reward => t.reward.map(|r| format!("{r}")).unwrap_or_else(|| "none".into()),
        agent_end => t.agent_end.clone().unwrap_or_else(|| "did not run".into()),
        trace_state => serde_json::to_value(t.trace).ok().and_then(|v| v.as_str().map(String::from)).unwrap_or_default(),
        tokens => format!("{} in / {} out", tokens(t.usage.input_tokens), tokens(t.usage.output_tokens)),
        cost => usd(t.cost_usd),
        duration => secs(t.duration_ms as f64 / 1000.0),
        subagents => t.subagent_runs,
        errors => t.errors.iter().map(|e| (e.turn, e.agent.clone(), e.kind.clone(), e.message.clone())).collect::<Vec<_>>(),
        system_prompt => t.system_prompt,
        user => t.user,
        turns => turns,
        back => ctx.back,
        stamp => page_stamp(),
        raw => ctx.raw,
    })?)
}

/// Stamp of the trial page format (templates + crate version): pages with another stamp,
/// or older than their trial's files, are rewritten; the others are kept as they are.
pub fn page_stamp() -> &'static str {
    static STAMP: OnceLock<String> = OnceLock::new();
    STAMP.get_or_init(|| {
        // FNV-1a: stable across builds of the same sources.
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for part in [
            include_str!("../templates/report/trial.html"),
            include_str!("../templates/report/report.css"),
            env!("CARGO_PKG_VERSION"),
        ] {
            for b in part.bytes() {
                h = (h ^ b as u64).wrapping_mul(0x0100_0000_01b3);
            }
        }
        format!("{h:016x}")
    })
}

/// Whether a trial page exists with the current stamp and is newer than the trial's files.
pub(crate) fn page_is_current(page: &Path, trial_dir: &Path) -> bool {
    let mtime = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    let Some(pm) = mtime(page) else {
        return false;
    };
    let t = ahe_bench::TrialDir::new(trial_dir);
    let newer = [t.clean_path(), t.result_path(), t.trace_path()]
        .iter()
        .any(|f| mtime(f).is_some_and(|m| m > pm));
    if newer {
        return false;
    }
    let mut head = [0u8; 1024];
    let n = std::fs::File::open(page)
        .and_then(|mut f| std::io::Read::read(&mut f, &mut head))
        .unwrap_or(0);
    let marker = format!("content=\"{}\"", page_stamp());
    String::from_utf8_lossy(&head[..n]).contains(&marker)
}

/// What [`write_trial_pages`] did.
#[derive(Debug, Default)]
pub struct TrialPages {
    /// Pages written.
    pub written: usize,
    /// Pages already current (kept).
    pub current: usize,
    /// Pages that could not be written (path, reason).
    pub errors: Vec<(PathBuf, String)>,
}

/// Writes the trial pages in parallel, skipping those already current.
pub fn write_trial_pages(run: &RunReport) -> TrialPages {
    let jobs: Vec<(u32, &str, u32)> = run
        .iterations
        .iter()
        .flat_map(|it| {
            it.trials
                .iter()
                .map(move |t| (it.iteration, t.task.as_str(), t.attempt))
        })
        .collect();
    let rd = ahe_rundir::RunDir::new(&run.dir);
    let results: Vec<Result<bool, (PathBuf, String)>> = jobs
        .par_iter()
        .map(|(iter, task, attempt)| {
            let out = rd.trial_page(*iter, task, *attempt);
            let trial = ahe_rundir::RunDir::new(&run.dir)
                .iteration(*iter)
                .trial(task, *attempt);
            let trial_dir = trial.path();
            if page_is_current(&out, trial_dir) {
                return Ok(false);
            }
            let page = run
                .trial(*iter, task, *attempt)
                .and_then(|t| render_trial(run, *iter, &t));
            page.and_then(|p| write_atomic(&out, p.as_bytes()))
                .map(|_| true)
                .map_err(|e| (out, format!("{e:#}")))
        })
        .collect();
    let mut r = TrialPages::default();
    for x in results {
        match x {
            Ok(true) => r.written += 1,
            Ok(false) => r.current += 1,
            Err(e) => r.errors.push(e),
        }
    }
    r
}
