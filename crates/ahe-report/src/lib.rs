//! Reports of a run (`ahe report`, `ahe show`): a read model of the run directory
//! ([`RunReport`]), a self-contained `report.html` (inline CSS and SVG, no scripts), a
//! `report.md`, one HTML page per trial trace, and the JSON documents of `ahe show --json`;
//! and the same files for an evaluation directory ([`generate_eval`]).

pub mod charts;
pub mod closing;
pub mod eval;
pub mod format;
pub mod html;
pub mod json;
pub mod markdown;
pub mod model;
pub mod numbers;
pub mod spend;
pub mod svg;
pub mod trial;
pub mod view;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub use eval::generate_eval;
pub use model::{Cell, Incomplete, IterationReport, RunReport};

/// What [`generate`] should write.
#[derive(Debug, Clone)]
pub struct ReportOptions {
    /// Write the per-trial trace pages under `report/trials/` (the slow part on big runs;
    /// pages already current are kept, so later reports only write new trials' pages).
    pub trial_pages: bool,
}

impl Default for ReportOptions {
    fn default() -> Self {
        ReportOptions { trial_pages: true }
    }
}

/// What [`generate`] wrote, and how long each part took.
#[derive(Debug, Clone)]
pub struct Generated {
    /// `report.html`.
    pub html: PathBuf,
    /// `report.md`.
    pub markdown: PathBuf,
    /// Trial pages written.
    pub trial_pages: usize,
    /// Trial pages already current (kept as they were).
    pub trial_pages_current: usize,
    /// Trial pages that could not be written (path, reason).
    pub trial_page_errors: Vec<(PathBuf, String)>,
    /// Where the run stopped short, if it did.
    pub incomplete: Option<Incomplete>,
    /// Time to load the run directory.
    pub load_time: Duration,
    /// Time to write `report.html` and `report.md`.
    pub render_time: Duration,
    /// Time to write the trial pages.
    pub trials_time: Duration,
}

/// Writes `report.html`, `report.md` and (optionally) the trial pages of a run directory.
pub fn generate(dir: &Path, opts: &ReportOptions) -> anyhow::Result<Generated> {
    let t0 = Instant::now();
    let run = RunReport::load(dir)?;
    let load_time = t0.elapsed();
    let t1 = Instant::now();
    let rd = ahe_rundir::RunDir::new(dir);
    let (html_path, md_path) = (rd.report_html(), rd.report_md());
    let charts = charts::charts(&run, opts.trial_pages);
    let (h, m) = rayon::join(
        || html::render_report(&run, &charts, opts.trial_pages),
        || markdown::render(&run, opts.trial_pages),
    );
    write_atomic(&html_path, h?.as_bytes())?;
    write_atomic(&md_path, m.as_bytes())?;
    let svgs = [
        ("pass_at_1.svg", Some(&charts.pass)),
        ("heatmap.svg", Some(&charts.heatmap)),
        ("tokens.svg", Some(&charts.tokens)),
        ("cost.svg", charts.cost.as_ref()),
        ("phases.svg", Some(&charts.phases)),
    ];
    for (name, chart) in svgs {
        if let Some(c) = chart {
            write_atomic(
                &dir.join("report").join(name),
                charts::standalone_svg(c).as_bytes(),
            )?;
        }
    }
    let render_time = t1.elapsed();
    let t2 = Instant::now();
    let pages = if opts.trial_pages {
        trial::write_trial_pages(&run)
    } else {
        trial::TrialPages::default()
    };
    Ok(Generated {
        html: html_path,
        markdown: md_path,
        trial_pages: pages.written,
        trial_pages_current: pages.current,
        trial_page_errors: pages.errors,
        incomplete: run.incomplete.clone(),
        load_time,
        render_time,
        trials_time: t2.elapsed(),
    })
}

/// Writes a file via a temp file and a rename, so readers never see half a report.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    if let Some(p) = path.parent() {
        std::fs::create_dir_all(p)?;
    }
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    std::fs::write(&tmp, bytes).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    std::fs::rename(&tmp, path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    Ok(())
}

/// Percent-encodes one URL path segment (task names are directory names, not URL-safe).
pub fn url_segment(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            o.push(b as char);
        } else {
            o.push_str(&format!("%{b:02X}"));
        }
    }
    o
}

/// Relative link from the run dir to a trial's page.
pub fn trial_page_href(iteration: u32, task: &str, attempt: u32) -> String {
    href_of(&ahe_rundir::RunDir::trial_page_segments(
        iteration, task, attempt,
    ))
}

/// Relative link from path segments (as the run and evaluation directories give them), each
/// segment encoded.
pub fn href_of(segments: &[String]) -> String {
    segments
        .iter()
        .map(|s| url_segment(s))
        .collect::<Vec<_>>()
        .join("/")
}

/// Relative link from the run dir to a run-relative path (each segment encoded).
pub fn href(rel: &str) -> String {
    rel.split('/')
        .map(url_segment)
        .collect::<Vec<_>>()
        .join("/")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_encoded_per_segment() {
        assert_eq!(url_segment("a b#?%/x"), "a%20b%23%3F%25%2Fx");
        assert_eq!(
            trial_page_href(3, "fix-sum", 2),
            "report/trials/003/fix-sum/2.html"
        );
        assert_eq!(
            href("iterations/001/analysis/detail/a b.md"),
            "iterations/001/analysis/detail/a%20b.md"
        );
    }
}
