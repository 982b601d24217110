//! One HTML page per trial trace (`report/trials/<iter>/<task>/<attempt>.html`), written in
//! parallel and only when missing or stale.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use minijinja::context;
use rayon::prelude::*;

use super::html::env;
use super::model::RunReport;
use super::view::trial::trial_view;
use super::write_atomic;
use ahe_rundir::clean::CleanTrace;

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
    render_trial_page(&run_trial_context(&run.name, iteration, t), t)
}

/// Renders one trial page of a run from its directory alone (`ahe view`: no
/// [`RunReport`] is loaded for one trial).
pub fn render_run_trial(
    dir: &Path,
    iteration: u32,
    task: &str,
    attempt: u32,
) -> anyhow::Result<String> {
    let rd = ahe_rundir::RunDir::new(dir);
    let trial = rd.iteration(iteration).trial(task, attempt);
    let d = trial.path();
    if !d.is_dir() {
        anyhow::bail!("no trial {task} #{attempt} in iteration {iteration}");
    }
    let t = ahe_rundir::clean::read_clean(d).or_else(|_| ahe_rundir::clean::clean_trial(d))?;
    let ctx = run_trial_context(&rd.name(), iteration, &t);
    render_trial_page(&ctx, &t)
}

/// Where a run's trial page sits (`report/trials/<iter>/<task>/<attempt>.html`).
fn run_trial_context(source: &str, iteration: u32, t: &CleanTrace) -> PageContext {
    use ahe_rundir::RunDir;
    let up =
        ahe_bench::layout::up_from(&RunDir::trial_page_segments(iteration, &t.task, t.attempt));
    let dir = crate::href_of(&RunDir::trial_segments(iteration, &t.task, t.attempt));
    PageContext {
        source: source.to_string(),
        iteration: Some(iteration),
        back: format!("{up}{}#iter-{iteration:03}", ahe_bench::layout::REPORT_HTML),
        raw: format!("{up}{dir}/"),
    }
}

/// Renders one trial's page from its cleaned trace (through its
/// [`TrialView`](super::view::trial::TrialView)), with the
/// links of `ctx`.
pub fn render_trial_page(ctx: &PageContext, t: &CleanTrace) -> anyhow::Result<String> {
    let v = trial_view(t);
    let tmpl = env().get_template("trial.html")?;
    Ok(tmpl.render(context! {
        run => ctx.source,
        iteration => ctx.iteration,
        task => v.task,
        attempt => v.attempt,
        trial_id => v.trial_id,
        status => v.status,
        reward => v.reward.map(|r| format!("{r}")).unwrap_or_else(|| "none".into()),
        agent_end => v.agent_end.unwrap_or_else(|| "did not run".into()),
        trace_state => v.trace_state,
        tokens => v.tokens,
        cost => v.cost,
        duration => v.duration,
        subagents => v.subagents,
        errors => v.errors,
        system_prompt => v.system_prompt,
        user => v.user,
        turns => v.turns,
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
