//! `ahe view` in a real browser: headless Chromium (Debian's package; `scripts/setup.sh`
//! installs it), driven over the DevTools protocol. It loads the run list, a finished run
//! and a running one, and asserts on the rendered DOM that a trial finishing and a phase
//! ending appear on the open page without a reload. Screenshots go to
//! `target/view-screenshots/`. Without chromium the test skips, unless `CI` or
//! `AHE_BROWSER_TESTS=1` is set: then it fails.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use ahe_rundir::journal::{Entry, Phase};
use base64::Engine;
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;

use super::view::{finish_trial, journal, raw_get, running_run, unpack_compat, ViewServer};
use crate::common::root;

/// The chromium binary, or None (skip) when it is missing and no CI asks for it.
fn chromium() -> Option<&'static str> {
    let bin = ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find(|b| {
            Command::new(b)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        });
    if bin.is_none() {
        let required = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false")
            || std::env::var("AHE_BROWSER_TESTS").as_deref() == Ok("1");
        assert!(
            !required,
            "chromium is not installed (bash scripts/setup.sh installs it); CI or AHE_BROWSER_TESTS=1 requires the browser test"
        );
        eprintln!("skipped: chromium is not installed (bash scripts/setup.sh installs it)");
    }
    bin
}

/// Headless Chromium with its DevTools endpoint, killed when dropped.
struct Browser {
    child: Child,
    _profile: tempfile::TempDir,
    port: u16,
}

impl Browser {
    fn start(bin: &str, url: &str) -> Browser {
        let profile = tempfile::tempdir().unwrap();
        let child = Command::new(bin)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--hide-scrollbars",
                "--window-size=1400,1800",
                "--remote-debugging-port=0",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg(url)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // Chromium writes the port it chose into DevToolsActivePort.
        let f = profile.path().join("DevToolsActivePort");
        let t0 = Instant::now();
        let port = loop {
            if let Some(p) = std::fs::read_to_string(&f)
                .ok()
                .and_then(|s| s.lines().next().and_then(|l| l.parse().ok()))
            {
                break p;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(60),
                "chromium wrote no DevToolsActivePort"
            );
            std::thread::sleep(Duration::from_millis(100));
        };
        Browser {
            child,
            _profile: profile,
            port,
        }
    }

    /// The websocket URL of the page chromium opened.
    fn page_ws(&self) -> String {
        let t0 = Instant::now();
        loop {
            let (_, _, body) = raw_get(&format!("127.0.0.1:{}", self.port), "/json/list");
            let targets: Value = serde_json::from_str(&body).unwrap_or(json!([]));
            let page = targets
                .as_array()
                .into_iter()
                .flatten()
                .find(|t| t["type"] == "page");
            if let Some(ws) = page.and_then(|p| p["webSocketDebuggerUrl"].as_str()) {
                return ws.to_string();
            }
            assert!(t0.elapsed() < Duration::from_secs(30), "no page: {body}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// A DevTools session with one page.
struct Page {
    ws: Ws,
    next: u64,
}

impl Page {
    async fn connect(url: &str) -> Page {
        let (ws, _) = tokio_tungstenite::connect_async(url).await.unwrap();
        Page { ws, next: 0 }
    }

    /// Sends one command and returns its result (events in between are skipped).
    async fn call(&mut self, method: &str, params: Value) -> Value {
        self.next += 1;
        let id = self.next;
        let msg = json!({"id": id, "method": method, "params": params}).to_string();
        self.ws.send(Message::Text(msg)).await.unwrap();
        loop {
            let m = tokio::time::timeout(Duration::from_secs(60), self.ws.next())
                .await
                .unwrap_or_else(|_| panic!("{method}: no answer"))
                .unwrap()
                .unwrap();
            let Message::Text(t) = m else { continue };
            let v: Value = serde_json::from_str(&t).unwrap();
            if v["id"] == id {
                assert!(v.get("error").is_none(), "{method}: {v}");
                return v["result"].clone();
            }
        }
    }

    /// Evaluates a JavaScript expression in the page; its value.
    async fn eval(&mut self, js: &str) -> Value {
        let r = self
            .call(
                "Runtime.evaluate",
                json!({"expression": js, "returnByValue": true}),
            )
            .await;
        r["result"]["value"].clone()
    }

    /// Waits until `js` is true in the page (or fails after `secs`, saying `what`).
    async fn wait_for(&mut self, js: &str, secs: u64, what: &str) {
        let t0 = Instant::now();
        while self.eval(js).await != json!(true) {
            assert!(
                t0.elapsed() < Duration::from_secs(secs),
                "{what} (after {secs} s); page text: {}",
                self.eval("document.body.innerText").await
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Opens `url` and waits for its document to be loaded.
    async fn goto(&mut self, url: &str) {
        self.call("Page.navigate", json!({"url": url})).await;
        let ready = format!(
            "location.href === {} && document.readyState === 'complete'",
            json!(url)
        );
        self.wait_for(&ready, 60, &format!("{url} did not load"))
            .await;
    }

    /// Saves a screenshot of the page as `target/view-screenshots/<name>.png`.
    async fn screenshot(&mut self, name: &str) -> PathBuf {
        let r = self
            .call("Page.captureScreenshot", json!({"format": "png"}))
            .await;
        let png = base64::engine::general_purpose::STANDARD
            .decode(r["data"].as_str().unwrap())
            .unwrap();
        let dir = root().join("target/view-screenshots");
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join(format!("{name}.png"));
        std::fs::write(&p, png).unwrap();
        p
    }
}

/// Text of the page's iteration-1 phase table row, for assertions on phase changes.
const ROLLOUT_DONE: &str = "document.body.innerText.includes('42.0 s')";

async fn drive(bin: &str, runs: &Path, live: &Path) {
    let v = ViewServer::start(&[runs.to_str().unwrap()]);
    let browser = Browser::start(bin, &format!("{}/", v.base));
    let mut page = Page::connect(&browser.page_ws()).await;
    page.goto(&format!("{}/", v.base)).await;
    // The run list, as rendered.
    let names = page
        .eval("[...document.querySelectorAll('tr.run-row')].map(r => r.dataset.name).join(',')")
        .await;
    assert_eq!(names, json!("full,killed-confirm,killed-rollout,live"));
    page.screenshot("list").await;
    // A finished run: its report, then a trial page through its link.
    page.goto(&format!("{}/d/0/full/report.html", v.base)).await;
    let h1 = page.eval("document.querySelector('h1').textContent").await;
    assert_eq!(h1, json!("ahe report — full"));
    let trials = page
        .eval("document.querySelectorAll('a.trial-link').length")
        .await;
    assert!(trials.as_u64().unwrap() > 0, "trial links: {trials}");
    page.screenshot("finished-run").await;
    let href = page
        .eval("document.querySelector('a.trial-link').href")
        .await;
    page.goto(href.as_str().unwrap()).await;
    let title = page.eval("document.title").await;
    assert!(
        title.as_str().unwrap().contains('#'),
        "a trial page: {title}"
    );
    page.screenshot("trial").await;
    // The running run: open it, mark the document, then finish a trial and end a phase.
    page.goto(&format!("{}/d/0/live/report.html", v.base)).await;
    page.wait_for(
        "document.getElementById('ahe-view-live').textContent.startsWith('live')",
        30,
        "the page did not go live",
    )
    .await;
    page.eval("window.__ahe_marker = 42").await;
    assert_eq!(
        page.eval("document.body.innerText.includes('gamma-task')")
            .await,
        json!(false)
    );
    assert_eq!(page.eval(ROLLOUT_DONE).await, json!(false));
    finish_trial(live, "gamma-task", 1, true);
    page.wait_for(
        "document.body.innerText.includes('gamma-task')",
        30,
        "the finished trial did not appear",
    )
    .await;
    journal(
        live,
        &[
            Entry::PhaseEnd {
                iter: 1,
                phase: Phase::Rollout,
                ts: "2026-05-01T12:10:00.000Z".into(),
                secs: 42.0,
            },
            Entry::PhaseStart {
                iter: 1,
                phase: Phase::Clean,
                ts: "2026-05-01T12:10:00.000Z".into(),
            },
        ],
    );
    page.wait_for(ROLLOUT_DONE, 30, "the phase end did not appear")
        .await;
    // Same document all along: updated in place, not reloaded.
    assert_eq!(page.eval("window.__ahe_marker").await, json!(42));
    let updates = page
        .eval("Number(document.documentElement.dataset.aheViewUpdates)")
        .await;
    assert!(updates.as_u64().unwrap() >= 2, "updates: {updates}");
    let shot = page.screenshot("running-run").await;
    eprintln!("screenshots: {}", shot.parent().unwrap().display());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_run_updates_in_the_browser_without_a_reload() {
    let Some(bin) = chromium() else { return };
    let d = tempfile::tempdir().unwrap();
    let runs = d.path().join("runs");
    std::fs::create_dir_all(&runs).unwrap();
    unpack_compat(&runs);
    let live = running_run(&runs.join("live"));
    drive(bin, &runs, &live).await;
}
