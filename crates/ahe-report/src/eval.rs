//! The report of an evaluation directory (`ahe eval --out`, `ahe import harbor --out`):
//! one view ([`EvalView`]) rendered by the templates `eval.html` and `eval.md`, and one
//! trial page per trial (`report/trials/<task>/<attempt>.html`, the template of a run's).

use std::path::Path;
use std::time::Instant;

use ahe_bench::{EvalDir, Scores, TaskStatus, TrialResult, TrialStatus};
use ahe_rundir::clean;
use ahe_rundir::run_dir::IterationDir;
use minijinja::context;
use rayon::prelude::*;
use serde::Serialize;

use super::format::{cell_class, cell_text, ci, f3, secs, tokens, usd};
use super::model::Cell;
use super::trial::{page_is_current, render_trial_page, PageContext, TrialPages};
use super::{href, href_of, url_segment, write_atomic, Generated, ReportOptions};

/// One trial of an evaluation as the report shows it.
#[derive(Debug, Clone, Serialize)]
pub struct EvalTrialRow {
    /// 1-based attempt number.
    pub attempt: u32,
    /// Link to the trial's page (or its directory without pages).
    pub href: String,
    /// Trial status (`pass`, `fail`, `infra_error`…).
    pub status: String,
    /// Verifier reward, or `–`.
    pub reward: String,
    /// Why it ended as it did: the agent's end, a time-out, the error text, suspect reasons.
    pub reason: String,
    /// Infrastructure trouble: retries spent, engines lost, the infra error itself.
    pub infra: String,
    /// Agent turns.
    pub turns: u32,
    /// `in / out` tokens.
    pub tokens: String,
    /// Dollars.
    pub cost: String,
    /// Wall time.
    pub duration: String,
}

/// One task of an evaluation: its k-trial result and its trials.
#[derive(Debug, Clone, Serialize)]
pub struct EvalTaskRow {
    /// Task name.
    pub task: String,
    /// HTML anchor of the task.
    pub anchor: String,
    /// `passed/k` or `infra`.
    pub text: String,
    /// CSS class of the result.
    pub class: String,
    /// pass@1 of the task (passed / k).
    pub pass_at_1: String,
    /// Link to the debugger's report of the task (`ahe debug`), when there is one.
    pub detail: Option<String>,
    /// The trials, by attempt.
    pub trials: Vec<EvalTrialRow>,
}

/// Everything the report of an evaluation shows.
#[derive(Debug, Clone, Serialize)]
pub struct EvalView {
    /// The directory's name.
    pub name: String,
    /// (label, value) facts: model, harness, sandbox, source, tasks, k.
    pub facts: Vec<(String, String)>,
    /// pass@1 over tasks (infra and suspect passes count as failures).
    pub pass: String,
    /// Its 95% bootstrap interval.
    pub pass_ci: String,
    /// pass@1 over tasks that were not all infra.
    pub pass_excluding_infra: String,
    /// Tasks where every trial passed, and the number of tasks.
    pub tasks_passed: (usize, usize),
    /// (status, trials) counts.
    pub statuses: Vec<(String, u64)>,
    /// (label, value) token and cost figures.
    pub usage: Vec<(String, String)>,
    /// (label, value) wall-time figures.
    pub times: Vec<(String, String)>,
    /// Link to the debugger's overview (`ahe debug`), when there is one.
    pub overview: Option<String>,
    /// The tasks, by name.
    pub tasks: Vec<EvalTaskRow>,
    /// Whether the trial links open trial pages (else trial directories).
    pub trial_pages: bool,
}

fn status_name(s: TaskStatus) -> &'static str {
    match s {
        TaskStatus::Pass => "pass",
        TaskStatus::Fail => "fail",
        TaskStatus::Infra => "infra",
    }
}

/// Link from the evaluation directory to a trial's page.
pub fn eval_trial_page_href(task: &str, attempt: u32) -> String {
    href_of(&EvalDir::trial_page_segments(task, attempt))
}

/// `p` relative to `dir`, with `/` between its parts (as a link wants it).
fn rel_to(dir: &Path, p: &Path) -> String {
    let rel = p.strip_prefix(dir).unwrap_or(p);
    rel.components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join("/")
}

/// Characters of a reason or infra error shown in the tables (the trial page has all).
const CLIP: usize = 300;

fn clip(s: &str) -> String {
    match s.char_indices().nth(CLIP) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}

fn trial_row(r: &TrialResult, pages: bool) -> EvalTrialRow {
    let mut reason: Vec<String> = Vec::new();
    if let Some(e) = r
        .agent_end
        .as_ref()
        .and_then(|e| serde_json::to_value(e).ok())
    {
        reason.push(format!("agent ended: {}", e.as_str().unwrap_or("?")));
    }
    if r.agent_timed_out {
        reason.push("agent time limit".into());
    }
    if let Some(e) = r
        .error
        .as_ref()
        .filter(|_| r.status != TrialStatus::InfraError)
    {
        reason.push(e.clone());
    }
    if let Some(s) = &r.suspect {
        reason.extend(s.reasons.iter().map(|x| format!("suspect: {}", x.reason)));
    }
    let mut infra: Vec<String> = Vec::new();
    if let Some(e) = r
        .error
        .as_ref()
        .filter(|_| r.status == TrialStatus::InfraError)
    {
        infra.push(e.clone());
    }
    if r.infra_retries > 0 {
        infra.push(format!("{} infra retries", r.infra_retries));
    }
    if !r.lost_hosts.is_empty() {
        infra.push(format!("lost engines: {}", r.lost_hosts.join(", ")));
    }
    EvalTrialRow {
        attempt: r.attempt,
        href: if pages {
            eval_trial_page_href(&r.task, r.attempt)
        } else {
            href(&format!("trials/{}/{}/", r.task, r.attempt))
        },
        status: r.status.as_str().into(),
        reward: r.reward.map_or("–".into(), |x| format!("{x}")),
        reason: clip(&reason.join("; ")),
        infra: clip(&infra.join("; ")),
        turns: r.turns,
        tokens: format!(
            "{} / {}",
            tokens(r.usage.input_tokens),
            tokens(r.usage.output_tokens)
        ),
        cost: usd(r.cost_usd),
        duration: secs(r.timings.total_ms as f64 / 1000.0),
    }
}

/// The evaluation's name: its directory's (canonical) file name.
fn eval_name(dir: &Path) -> String {
    dir.canonicalize()
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_else(|| dir.display().to_string())
}

/// The (label, value) facts of an evaluation: model, harness, sandbox, source, tasks, k.
fn eval_facts(scores: &Scores) -> Vec<(String, String)> {
    let m = &scores.meta;
    let mut facts: Vec<(String, String)> = Vec::new();
    for (k, v) in [
        ("model", m.model.clone()),
        ("harness", m.harness.clone()),
        ("sandbox", m.sandbox.clone()),
        (
            "imported from",
            m.extra
                .get("imported_from")
                .and_then(|v| v.as_str())
                .map(String::from),
        ),
    ] {
        if let Some(v) = v {
            facts.push((k.into(), v));
        }
    }
    facts.push((
        "tasks".into(),
        format!("{}, k = {}", scores.n_tasks, scores.k),
    ));
    facts
}

/// One row per task of the evaluation, each with its trials by attempt.
fn eval_task_rows(
    dir: &Path,
    scores: &Scores,
    results: &[TrialResult],
    pages: bool,
) -> Vec<EvalTaskRow> {
    let it = IterationDir::at(dir);
    let detail = |task: &str| {
        let p = it.detail_path(task);
        p.is_file().then(|| href(&rel_to(dir, &p)))
    };
    scores
        .tasks
        .iter()
        .map(|(task, ts)| {
            let cell = Cell {
                passed: ts.passed,
                k: ts.k,
                status: status_name(ts.status).into(),
            };
            let mut trials: Vec<EvalTrialRow> = results
                .iter()
                .filter(|r| &r.task == task)
                .map(|r| trial_row(r, pages))
                .collect();
            trials.sort_by_key(|t| t.attempt);
            EvalTaskRow {
                anchor: format!("task-{}", url_segment(task)),
                text: cell_text(&cell),
                class: cell_class(&cell).into(),
                pass_at_1: f3(ts.pass_at_1),
                detail: detail(task),
                task: task.clone(),
                trials,
            }
        })
        .collect()
}

/// The view of an evaluation from its scores and its trials' results.
pub fn eval_view(dir: &Path, scores: &Scores, results: &[TrialResult], pages: bool) -> EvalView {
    let name = eval_name(dir);
    let facts = eval_facts(scores);
    let tasks = eval_task_rows(dir, scores, results, pages);
    let t = &scores.tokens;
    let d = &scores.durations;
    EvalView {
        name,
        facts,
        pass: f3(scores.pass_at_1),
        pass_ci: ci(scores.pass_at_1_ci),
        pass_excluding_infra: f3(scores.pass_at_1_excluding_infra),
        tasks_passed: (
            scores
                .tasks
                .values()
                .filter(|t| t.status == TaskStatus::Pass)
                .count(),
            scores.tasks.len(),
        ),
        statuses: scores
            .statuses
            .iter()
            .map(|(k, v)| (k.clone(), *v))
            .collect(),
        usage: vec![
            ("input tokens".into(), tokens(t.input)),
            ("of which cached".into(), tokens(t.cached_input)),
            ("output tokens".into(), tokens(t.output)),
            ("cost".into(), usd(scores.cost_usd)),
        ],
        times: vec![
            ("wall time".into(), secs(d.wall_sec)),
            ("mean trial".into(), secs(d.mean_trial_sec)),
            ("setup (sum)".into(), secs(d.setup_sec)),
            ("agent (sum)".into(), secs(d.agent_sec)),
            ("verifier (sum)".into(), secs(d.verifier_sec)),
        ],
        overview: {
            let p = IterationDir::at(dir).overview_path();
            p.is_file().then(|| rel_to(dir, &p))
        },
        tasks,
        trial_pages: pages,
    }
}

/// Where an evaluation's trial page sits (`report/trials/<task>/<attempt>.html`): its
/// links back to the report and to the trial's directory.
fn eval_trial_context(name: &str, task: &str, attempt: u32) -> PageContext {
    let up = ahe_bench::layout::up_from(&EvalDir::trial_page_segments(task, attempt));
    let dir = super::href_of(&EvalDir::trial_segments(task, attempt));
    PageContext {
        source: name.to_string(),
        iteration: None,
        back: format!(
            "{up}{}#task-{}",
            ahe_bench::layout::REPORT_HTML,
            url_segment(task)
        ),
        raw: format!("{up}{dir}/"),
    }
}

/// The results of an evaluation's finished trials, sorted by task then attempt.
fn eval_results(dir: &Path) -> Vec<TrialResult> {
    let mut results: Vec<TrialResult> = EvalDir::new(dir)
        .trial_dirs()
        .into_par_iter()
        .filter_map(|t| t.read_result().ok())
        .collect();
    results.sort_by(|a, b| (&a.task, a.attempt).cmp(&(&b.task, b.attempt)));
    results
}

/// Renders an evaluation's `report.html` in memory (`ahe view`), linking to trial pages.
/// While the evaluation runs (no `scores.json` yet) the scores are computed from the
/// trials finished so far.
pub fn render_eval_html(dir: &Path) -> anyhow::Result<String> {
    let results = eval_results(dir);
    let eval = EvalDir::new(dir);
    let scores = if eval.scores_path().is_file() {
        eval.read_scores()?
    } else {
        let k = results.iter().map(|r| r.attempt).max().unwrap_or(0);
        ahe_bench::scores::compute(k, &results, 0.0)
    };
    let view = eval_view(dir, &scores, &results, true);
    let generated = chrono::Local::now().format("%Y-%m-%d %H:%M:%S").to_string();
    let ctx = context! { v => view, generated => generated };
    Ok(super::html::env().get_template("eval.html")?.render(&ctx)?)
}

/// Renders one trial page of an evaluation in memory (`ahe view`).
pub fn render_eval_trial(dir: &Path, task: &str, attempt: u32) -> anyhow::Result<String> {
    let td = EvalDir::new(dir).trial(task, attempt);
    if !td.path().is_dir() {
        anyhow::bail!("no trial {task} #{attempt} in {}", dir.display());
    }
    let t = clean::read_clean(td.path()).or_else(|_| clean::clean_trial(td.path()))?;
    render_trial_page(&eval_trial_context(&eval_name(dir), task, attempt), &t)
}

/// Writes the trial pages of an evaluation, skipping those already current.
fn write_eval_trial_pages(dir: &Path, name: &str, results: &[TrialResult]) -> TrialPages {
    let eval = EvalDir::new(dir);
    let outs: Vec<Result<bool, (std::path::PathBuf, String)>> = results
        .par_iter()
        .map(|r| {
            let out = eval.trial_page(&r.task, r.attempt);
            let td = eval.trial(&r.task, r.attempt);
            if page_is_current(&out, td.path()) {
                return Ok(false);
            }
            clean::read_clean(td.path())
                .or_else(|_| clean::clean_trial(td.path()))
                .and_then(|t| render_trial_page(&eval_trial_context(name, &r.task, r.attempt), &t))
                .and_then(|p| write_atomic(&out, p.as_bytes()))
                .map(|_| true)
                .map_err(|e| (out, format!("{e:#}")))
        })
        .collect();
    let mut p = TrialPages::default();
    for x in outs {
        match x {
            Ok(true) => p.written += 1,
            Ok(false) => p.current += 1,
            Err(e) => p.errors.push(e),
        }
    }
    p
}

/// Writes `report.html`, `report.md` and (optionally) the trial pages of an evaluation
/// directory.
pub fn generate_eval(dir: &Path, opts: &ReportOptions) -> anyhow::Result<Generated> {
    let t0 = Instant::now();
    let scores = EvalDir::new(dir).read_scores()?;
    let results = eval_results(dir);
    let load_time = t0.elapsed();
    let t1 = Instant::now();
    let view = eval_view(dir, &scores, &results, opts.trial_pages);
    let generated = chrono::Local::now().format("%Y-%m-%d %H:%M:%S").to_string();
    let env = super::html::env();
    let ctx = context! { v => view, generated => generated };
    let html = env.get_template("eval.html")?.render(&ctx)?;
    let md = env.get_template("eval.md")?.render(&ctx)?;
    let out = EvalDir::new(dir);
    let (html_path, md_path) = (out.report_html(), out.report_md());
    write_atomic(&html_path, html.as_bytes())?;
    write_atomic(&md_path, md.as_bytes())?;
    let render_time = t1.elapsed();
    let t2 = Instant::now();
    let pages = if opts.trial_pages {
        write_eval_trial_pages(dir, &view.name, &results)
    } else {
        TrialPages::default()
    };
    Ok(Generated {
        html: html_path,
        markdown: md_path,
        trial_pages: pages.written,
        trial_pages_current: pages.current,
        trial_page_errors: pages.errors,
        incomplete: None,
        load_time,
        render_time,
        trials_time: t2.elapsed(),
    })
}
