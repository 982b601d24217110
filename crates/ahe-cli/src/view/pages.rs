//! The pages of `ahe view`: the report pages of `ahe report` rendered in memory from the
//! same view model (`ahe_report`), the run list, directory listings, and what the view adds
//! to each page (a bar with the way back and the live state, and the live script).

use std::path::Path;
use std::sync::Arc;

use ahe_report::format::secs;
use ahe_report::numbers::f3;
use ahe_report::RunReport;
use minijinja::{context, Environment, Value};
use serde::Serialize;

use super::site::{Entry, Kind};

/// The view's own templates (`templates/view/`).
fn env() -> &'static Environment<'static> {
    static ENV: std::sync::OnceLock<Environment<'static>> = std::sync::OnceLock::new();
    ENV.get_or_init(|| {
        let mut e = Environment::new();
        for (name, src) in [
            ("list.html", include_str!("../../templates/view/list.html")),
            ("dir.html", include_str!("../../templates/view/dir.html")),
            ("bar.html", include_str!("../../templates/view/bar.html")),
        ] {
            e.add_template(name, src)
                .unwrap_or_else(|err| panic!("view template {name}: {err}"));
        }
        e
    })
}

/// The live script every page loads (`/_view/live.js`).
pub const LIVE_JS: &str = include_str!("../../templates/view/live.js");

/// A run's `report.html`, as `ahe report` writes it (trial links to trial pages).
pub fn run_page(run: &RunReport) -> anyhow::Result<String> {
    let charts = ahe_report::charts::charts(run, true);
    ahe_report::html::render_report(run, &charts, true)
}

/// How a page or row gets a run's read model (loaded once per change and shared).
pub type Model<'a> = &'a dyn Fn() -> anyhow::Result<Arc<RunReport>>;

/// A matrix's `matrix.html`, from its `matrix.json`.
pub fn matrix_page(dir: &Path) -> anyhow::Result<String> {
    let p = dir.join("matrix.json");
    let text = std::fs::read_to_string(&p).map_err(|e| anyhow::anyhow!("{}: {e}", p.display()))?;
    let doc: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| anyhow::anyhow!("{}: {e}", p.display()))?;
    crate::matrix::report::html(&doc)
}

/// The page of a run, evaluation or matrix directory.
pub fn page(dir: &Path, kind: Kind, model: Model) -> anyhow::Result<String> {
    match kind {
        Kind::Run => run_page(&*model()?),
        Kind::Eval => ahe_report::eval::render_eval_html(dir),
        Kind::Matrix => matrix_page(dir),
    }
}

/// One row of the run list.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// Directory name.
    pub name: String,
    /// `run`, `evaluation` or `matrix`.
    pub kind: String,
    /// URL of its page.
    pub url: String,
    /// `complete`, `running (pid N)`, `interrupted`, `stopped`…
    pub status: String,
    /// Where it is: iteration and phase, or trials done.
    pub at: String,
    /// pass@1 with suspect passes counted as failures (the latest scored).
    pub pass: String,
    /// pass@1 counting every pass (raw).
    pub raw: String,
    /// The best harness (iteration, visible pass@1).
    pub best: String,
    /// Dollars spent, or why unknown.
    pub spend: String,
    /// Wall time.
    pub wall: String,
}

/// The row of a run directory, from its read model.
pub fn run_row(e: &Entry, run: &RunReport) -> anyhow::Result<Row> {
    let status = match (run.ended.as_deref(), &run.incomplete) {
        (Some(_), None) => run.status().to_string(),
        _ => match ahe_evolve::inputs::lock::RunLock::holder(&e.dir) {
            Some(pid) => format!("running (pid {})", pid.trim()),
            None if run.ended.is_some() => run.status().to_string(),
            None => "interrupted".into(),
        },
    };
    let last = run.iterations.last();
    let at = match last {
        None => "not started".into(),
        Some(it) => {
            let phase = it
                .phases
                .iter()
                .rfind(|p| p.started && !p.finished)
                .map(|p| p.phase.clone());
            let trials: usize = it.journal_trials.values().map(|m| m.len()).sum();
            let label = ahe_report::format::iter_label(it);
            match phase {
                Some(p) => format!("iteration {label} · {p} · {trials} trials done"),
                None => format!("iteration {label} · {trials} trials"),
            }
        }
    };
    let scored = run.iterations.iter().rev().find_map(|i| i.scores.as_ref());
    Ok(Row {
        name: e.name.clone(),
        kind: e.kind.word().into(),
        url: e.url.clone(),
        status,
        at,
        pass: scored
            .map(|s| f3(s.pass_at_1))
            .unwrap_or_else(|| "–".into()),
        raw: scored
            .map(|s| f3(s.pass_at_1_raw.max(s.pass_at_1)))
            .unwrap_or_else(|| "–".into()),
        best: run
            .best
            .as_ref()
            .map(|b| format!("iteration {} · {}", b.iteration, f3(b.pass_at_1)))
            .unwrap_or_else(|| "–".into()),
        spend: run.cost_text(),
        // `+ 0.0`: an empty sum of f64 is -0.0, shown as "-0.00 s".
        wall: secs(run.wall_sec() + 0.0),
    })
}

/// The row of an evaluation directory (a running one counts its finished trials).
pub fn eval_row(e: &Entry) -> anyhow::Result<Row> {
    let ev = ahe_bench::EvalDir::new(&e.dir);
    let done = ev
        .trial_dirs()
        .iter()
        .filter(|t| t.result_path().is_file())
        .count();
    let scores = ev.read_scores().ok();
    Ok(Row {
        name: e.name.clone(),
        kind: e.kind.word().into(),
        url: e.url.clone(),
        status: if scores.is_some() {
            "complete".into()
        } else {
            "running or interrupted".into()
        },
        at: format!("{done} trials done"),
        pass: scores
            .as_ref()
            .map(|s| f3(s.pass_at_1))
            .unwrap_or_else(|| "–".into()),
        raw: scores
            .as_ref()
            .map(|s| f3(s.pass_at_1_raw.max(s.pass_at_1)))
            .unwrap_or_else(|| "–".into()),
        best: "–".into(),
        spend: scores
            .as_ref()
            .map(|s| ahe_report::numbers::usd(s.cost_usd))
            .unwrap_or_else(|| "–".into()),
        wall: scores
            .as_ref()
            .map(|s| secs(s.durations.wall_sec))
            .unwrap_or_else(|| "–".into()),
    })
}

/// The row of a matrix directory.
pub fn matrix_row(e: &Entry) -> anyhow::Result<Row> {
    let p = e.dir.join("matrix.json");
    let doc: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&p)?)
        .map_err(|err| anyhow::anyhow!("{}: {err}", p.display()))?;
    let cells = doc["cells"].as_array().map(|c| c.len()).unwrap_or(0);
    Ok(Row {
        name: e.name.clone(),
        kind: e.kind.word().into(),
        url: e.url.clone(),
        status: "written".into(),
        at: format!("{cells} cells"),
        pass: "–".into(),
        raw: "–".into(),
        best: "–".into(),
        spend: doc["cost_usd"]
            .as_f64()
            .map(ahe_report::numbers::usd)
            .unwrap_or_else(|| "–".into()),
        wall: doc["wall_sec"].as_f64().map(secs).unwrap_or_default(),
    })
}

/// The row of any entry; an unreadable directory gets a row saying why.
pub fn row(e: &Entry, model: Model) -> Row {
    let r = match e.kind {
        Kind::Run => model().and_then(|run| run_row(e, &run)),
        Kind::Eval => eval_row(e),
        Kind::Matrix => matrix_row(e),
    };
    r.unwrap_or_else(|err| Row {
        name: e.name.clone(),
        kind: e.kind.word().into(),
        url: e.url.clone(),
        status: format!("unreadable: {err:#}"),
        at: String::new(),
        pass: "–".into(),
        raw: "–".into(),
        best: "–".into(),
        spend: "–".into(),
        wall: "–".into(),
    })
}

/// The front page: every run, evaluation and matrix with its row.
pub fn list_page(roots: &[String], rows: &[Row]) -> anyhow::Result<String> {
    Ok(env().get_template("list.html")?.render(context! {
        css => Value::from_safe_string(ahe_report::html::css().to_string()),
        roots => roots,
        rows => rows,
    })?)
}

/// A directory listing (a trial directory, `iterations/`…): its entries, directories first.
pub fn dir_page(dir: &Path, shown: &str) -> anyhow::Result<String> {
    let mut items: Vec<(bool, String)> = std::fs::read_dir(dir)?
        .flatten()
        .map(|e| {
            let d = e.file_type().map(|t| t.is_dir()).unwrap_or(false);
            (!d, e.file_name().to_string_lossy().into_owned())
        })
        .collect();
    items.sort();
    let items: Vec<(String, String, bool)> = items
        .into_iter()
        .map(|(file, name)| {
            let href = format!(
                "{}{}",
                ahe_report::url_segment(&name),
                if file { "" } else { "/" }
            );
            (name, href, !file)
        })
        .collect();
    Ok(env().get_template("dir.html")?.render(context! {
        css => Value::from_safe_string(ahe_report::html::css().to_string()),
        dir => shown,
        items => items,
    })?)
}

/// A page with the view's bar after `<body…>` and, in `<head>`, its change token and the
/// live script.
pub fn inject(html: &str, token: &str) -> String {
    let head = format!(
        "<meta name=\"ahe-view-token\" content=\"{token}\"><script src=\"/_view/live.js\" defer></script>"
    );
    let bar = env()
        .get_template("bar.html")
        .and_then(|t| t.render(context! {}))
        .unwrap_or_default();
    let mut out = String::with_capacity(html.len() + head.len() + bar.len());
    match html.find("</head>") {
        Some(i) => {
            out.push_str(&html[..i]);
            out.push_str(&head);
            out.push_str(&html[i..]);
        }
        None => {
            out.push_str(&head);
            out.push_str(html);
        }
    }
    if let Some(b) = out.find("<body") {
        if let Some(end) = out[b..].find('>') {
            out.insert_str(b + end + 1, &bar);
        }
    }
    out
}
