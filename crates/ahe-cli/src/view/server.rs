//! The HTTP side of `ahe view` (axum): GET only, every answer read from the directories
//! given, nothing written. Pages carry a Content-Security-Policy that allows no script but
//! the view's own, so model output in a trace can never run.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path as UrlPath, Query, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use axum::Router;
use futures_util::stream::Stream;
use serde::Deserialize;

use super::live::{list_token, token, Cache};
use super::pages;
use super::site::{watched, Kind, Refusal, Site, Target};

/// How often an open page's directory is checked for a change.
const POLL: Duration = Duration::from_millis(500);

/// What every handler shares.
pub struct App {
    /// The directories served.
    pub site: Site,
    /// Rendered pages by directory and token.
    pages: Cache<String>,
    /// Run-list rows by directory and token.
    rows: Cache<pages::Row>,
    /// Runs' read models by directory and token (one load for the row and the page).
    models: Cache<ahe_report::RunReport>,
}

impl App {
    /// The read model of the run in `dir` at `token` (loaded once per change).
    fn model(
        &self,
        dir: &std::path::Path,
        token: &str,
    ) -> anyhow::Result<Arc<ahe_report::RunReport>> {
        self.models
            .get_or(dir, "model", token, || ahe_report::RunReport::load(dir))
    }
}

/// The state the handlers share.
pub type Shared = Arc<App>;

/// The shared state of `ahe view` over `site` (nothing rendered yet).
pub fn app(site: Site) -> Shared {
    Arc::new(App {
        site,
        pages: Cache::default(),
        rows: Cache::default(),
        models: Cache::default(),
    })
}

/// Renders every entry's list row and page once, so that the first requests find them
/// ready (a run of 10,000 trials takes a moment to load); blocking.
pub fn warm(app: &App) {
    for e in app.site.entries() {
        let tok = token(&e.dir, e.kind);
        let model = || app.model(&e.dir, &tok);
        let _ = app
            .rows
            .get_or(&e.dir, "row", &tok, || Ok(pages::row(&e, &model)));
        let _ = app.pages.get_or(&e.dir, page_key(e.kind), &tok, || {
            pages::page(&e.dir, e.kind, &model)
        });
    }
}

/// The cache key of a directory's page.
fn page_key(k: Kind) -> &'static str {
    match k {
        Kind::Run => "run",
        Kind::Eval => "eval",
        Kind::Matrix => "matrix",
    }
}

/// The router of `ahe view` over `app`.
pub fn router(app: Shared) -> Router {
    Router::new()
        .route("/", get(list))
        .route("/_view/live.js", get(live_js))
        .route("/_view/events", get(events))
        .route("/_view/token", get(token_of))
        .route(
            "/d/:root",
            get(
                |UrlPath(root): UrlPath<usize>| async move { Redirect::to(&format!("/d/{root}/")) },
            ),
        )
        .route("/d/:root/", get(root_index))
        .route("/d/:root/*rest", get(serve))
        .with_state(app)
}

/// A page as HTML, under the view's policy (its own script only; inline styles and SVG).
fn html(body: String) -> Response {
    let mut r = (StatusCode::OK, body).into_response();
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:",
        ),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

/// A plain-text error answer.
fn fail(code: StatusCode, msg: String) -> Response {
    (code, msg).into_response()
}

/// Runs blocking work (directory reads, rendering) off the async threads.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, Response> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| fail(StatusCode::INTERNAL_SERVER_ERROR, format!("{e}")))
}

/// The front page's entries with their kinds (for the list token).
fn list_parts(app: &App) -> (Vec<std::path::PathBuf>, Vec<super::site::Entry>) {
    let roots = app.site.roots.iter().map(|r| r.path.clone()).collect();
    (roots, app.site.entries())
}

/// `/`: the run list.
async fn list(State(app): State<Shared>) -> Response {
    let r = blocking(move || {
        let (roots, entries) = list_parts(&app);
        let kinds: Vec<_> = entries.iter().map(|e| (e.dir.clone(), e.kind)).collect();
        let t = list_token(&roots, &kinds);
        let rows: Vec<pages::Row> = entries
            .iter()
            .map(|e| {
                let tok = token(&e.dir, e.kind);
                let model = || app.model(&e.dir, &tok);
                app.rows
                    .get_or(&e.dir, "row", &tok, || Ok(pages::row(e, &model)))
                    .map(|r| (*r).clone())
                    .unwrap_or_else(|_| pages::row(e, &model))
            })
            .collect();
        let labels: Vec<String> = app.site.roots.iter().map(|r| r.label.clone()).collect();
        pages::list_page(&labels, &rows).map(|p| pages::inject(&p, &t))
    })
    .await;
    match r {
        Ok(Ok(p)) => html(p),
        Ok(Err(e)) => fail(StatusCode::INTERNAL_SERVER_ERROR, format!("{e:#}")),
        Err(r) => r,
    }
}

async fn live_js() -> Response {
    let mut r = pages::LIVE_JS.into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/javascript; charset=utf-8"),
    );
    r
}

async fn root_index(UrlPath(root): UrlPath<usize>, state: State<Shared>) -> Response {
    serve(UrlPath((root, String::new())), state).await
}

/// The token of what `path` (a URL path of the view) shows; None when it shows nothing
/// that changes (files, listings) or is refused.
fn token_for(app: &App, path: &str) -> Option<String> {
    if path == "/" {
        let (roots, entries) = list_parts(app);
        let kinds: Vec<_> = entries.iter().map(|e| (e.dir.clone(), e.kind)).collect();
        return Some(list_token(&roots, &kinds));
    }
    let rest = path.strip_prefix("/d/")?;
    let (root, rest) = rest.split_once('/').unwrap_or((rest, ""));
    let t = app.site.resolve(root.parse().ok()?, rest).ok()?;
    watched(&t).map(|(d, k)| token(&d, k))
}

/// Query of `/_view/events` and `/_view/token`.
#[derive(Deserialize)]
struct Watch {
    /// URL path of the page.
    path: String,
    /// The token the page was rendered at.
    #[serde(default)]
    token: String,
}

/// `/_view/token?path=`: the current token of a page (for scripts and tests).
async fn token_of(State(app): State<Shared>, Query(w): Query<Watch>) -> Response {
    match blocking(move || token_for(&app, &w.path)).await {
        Ok(Some(t)) => t.into_response(),
        Ok(None) => fail(StatusCode::NOT_FOUND, "no live page there".into()),
        Err(r) => r,
    }
}

/// `/_view/events?path=&token=`: server-sent `change` events, one each time the token of
/// the page's directory moves away from the last one sent (first: the page's own).
async fn events(
    State(app): State<Shared>,
    Query(w): Query<Watch>,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let s = futures_util::stream::unfold((app, w, true), |(app, w, first)| async move {
        if !first {
            tokio::time::sleep(POLL).await;
        }
        loop {
            let (a, p) = (app.clone(), w.path.clone());
            let now = tokio::task::spawn_blocking(move || token_for(&a, &p))
                .await
                .ok()
                .flatten();
            match now {
                Some(t) if t != w.token => {
                    let ev = Event::default().event("change").data(t.clone());
                    let next = Watch { token: t, ..w };
                    return Some((Ok::<Event, Infallible>(ev), (app, next, false)));
                }
                _ => tokio::time::sleep(POLL).await,
            }
        }
    });
    Sse::new(s).keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
}

/// `/d/<root>/<path>`: a page, a listing or a file inside root `<root>`.
async fn serve(
    UrlPath((root, rest)): UrlPath<(usize, String)>,
    State(app): State<Shared>,
) -> Response {
    let trailing = rest.is_empty() || rest.ends_with('/');
    let a = app.clone();
    let target = match blocking(move || a.site.resolve(root, &rest)).await {
        Ok(t) => t,
        Err(r) => return r,
    };
    let target = match target {
        Ok(t) => t,
        Err(Refusal::Outside) => {
            return fail(
                StatusCode::FORBIDDEN,
                "refused: the path leads outside the directories `ahe view` serves".into(),
            )
        }
        Err(Refusal::NotFound) => return fail(StatusCode::NOT_FOUND, "not found".into()),
    };
    match target {
        Target::Dir(d) if !trailing => {
            let name = d.file_name().map(|n| n.to_string_lossy().into_owned());
            Redirect::to(&format!(
                "{}/",
                ahe_report::url_segment(&name.unwrap_or_default())
            ))
            .into_response()
        }
        Target::Dir(d) if super::site::kind(&d).is_some() => {
            Redirect::to(ahe_bench::layout::REPORT_HTML).into_response()
        }
        Target::File(f) => file(&f).await,
        t => render(app, t).await,
    }
}

/// Renders a page, a trial page or a listing (pages kept per token).
async fn render(app: Shared, t: Target) -> Response {
    let r = blocking(move || -> anyhow::Result<String> {
        let tok = watched(&t).map(|(d, k)| token(&d, k)).unwrap_or_default();
        let page = match &t {
            Target::Page(d, k) => {
                let p = app.pages.get_or(d, page_key(*k), &tok, || {
                    pages::page(d, *k, &|| app.model(d, &tok))
                })?;
                return Ok(pages::inject(&p, &tok));
            }
            Target::RunTrial(d, it, task, a) => {
                ahe_report::trial::render_run_trial(d, *it, task, *a)?
            }
            Target::EvalTrial(d, task, a) => ahe_report::eval::render_eval_trial(d, task, *a)?,
            Target::Dir(d) => pages::dir_page(d, &d.display().to_string())?,
            Target::File(_) => unreachable!("files are served as they are"),
        };
        Ok(pages::inject(&page, &tok))
    })
    .await;
    match r {
        Ok(Ok(p)) => html(p),
        Ok(Err(e)) => fail(StatusCode::NOT_FOUND, format!("{e:#}")),
        Err(r) => r,
    }
}

/// A file as it is: text as `text/plain` (a Markdown file, a diff, a trace), anything else
/// as bytes to download — never as a page, so nothing in a run directory runs in the browser.
async fn file(p: &std::path::Path) -> Response {
    let bytes = match tokio::fs::read(p).await {
        Ok(b) => b,
        Err(e) => return fail(StatusCode::NOT_FOUND, format!("{}: {e}", p.display())),
    };
    let ct = if std::str::from_utf8(&bytes).is_ok() {
        "text/plain; charset=utf-8"
    } else {
        "application/octet-stream"
    };
    let mut r = (StatusCode::OK, bytes).into_response();
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(ct));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static("default-src 'none'; sandbox"),
    );
    r
}
