//! `ahe view` over HTTP: the run list, a run's page (the same page `ahe report` writes),
//! trial pages, files, live change events, and what it refuses (paths outside the
//! directories given, writes). The browser side is `view_browser`.

use crate::common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use ahe_bench::{TrialResult, TrialStatus};
use ahe_rundir::journal::{Entry, Phase};
use common::{ahe, root, text};

/// A running `ahe view`, killed when dropped.
pub struct ViewServer {
    child: Child,
    /// `http://127.0.0.1:PORT` (no trailing slash).
    pub base: String,
    /// `host:port`.
    pub addr: String,
}

impl ViewServer {
    /// Starts `ahe view ARGS…` and waits for the URL it prints.
    pub fn start(args: &[&str]) -> ViewServer {
        let mut child = Command::new(env!("CARGO_BIN_EXE_ahe"))
            .arg("view")
            .args(args)
            .current_dir(root())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let url = line
            .trim()
            .strip_prefix("ahe view: ")
            .unwrap_or_else(|| panic!("ahe view printed {line:?}, not its URL"))
            .trim_end_matches('/')
            .to_string();
        let addr = url.trim_start_matches("http://").to_string();
        ViewServer {
            child,
            base: url,
            addr,
        }
    }

    /// GET `path` (sent as it is, not normalised): (status, headers, body).
    pub fn get(&self, path: &str) -> (u16, String, String) {
        raw_get(&self.addr, path)
    }
}

impl Drop for ViewServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One HTTP/1.1 GET over a plain socket (so `..` reaches the server as written).
pub fn raw_get(addr: &str, path: &str) -> (u16, String, String) {
    request(addr, "GET", path)
}

fn request(addr: &str, method: &str, path: &str) -> (u16, String, String) {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    write!(
        &s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut r = BufReader::new(s);
    let mut head = String::new();
    loop {
        let mut l = String::new();
        if r.read_line(&mut l).unwrap() == 0 || l == "\r\n" {
            break;
        }
        head.push_str(&l);
    }
    let code = head.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap();
    // Read the body by its length when given (not every server closes the connection).
    let len = head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.eq_ignore_ascii_case("content-length")
            .then(|| v.trim().parse::<usize>().ok())
            .flatten()
    });
    let mut buf = Vec::new();
    match len {
        Some(n) => {
            buf.resize(n, 0);
            r.read_exact(&mut buf).unwrap();
        }
        None => {
            r.read_to_end(&mut buf).unwrap();
        }
    }
    (code, head, String::from_utf8_lossy(&buf).into_owned())
}

/// The fixture's finished runs (`tests/fixtures/compat`: full, killed-confirm,
/// killed-rollout) unpacked into `dir`.
pub fn unpack_compat(dir: &Path) {
    let tar = root().join("crates/ahe-cli/tests/fixtures/compat/runs-main-d27b95d.tar.gz");
    let o = Command::new("tar")
        .arg("xzf")
        .arg(tar)
        .arg("-C")
        .arg(dir)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
}

/// Appends journal entries to a run.
pub fn journal(dir: &Path, entries: &[Entry]) {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("journal.jsonl"))
        .unwrap();
    for e in entries {
        writeln!(f, "{}", serde_json::to_string(e).unwrap()).unwrap();
    }
}

/// Finishes a trial of iteration 1 as the rollout does: its record, then its journal line.
pub fn finish_trial(dir: &Path, task: &str, attempt: u32, pass: bool) {
    let mut r = TrialResult::new(task, attempt);
    r.status = if pass {
        TrialStatus::Pass
    } else {
        TrialStatus::Fail
    };
    r.reward = Some(if pass { 1.0 } else { 0.0 });
    r.turns = 3;
    let td = dir.join(format!("iterations/001/trials/{task}/{attempt}"));
    ahe_bench::trial::write_result(&td, &r);
    journal(
        dir,
        &[Entry::TrialDone {
            iter: 1,
            task: task.into(),
            attempt,
            status: r.status.as_str().into(),
        }],
    );
}

/// A run in its first rollout: run.toml, a journal, two finished trials.
pub fn running_run(dir: &Path) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(
        dir.join("run.toml"),
        "k = 2\niterations = 3\n[benchmark]\npath = \"benchmarks/smoke\"\n[sandbox]\nbackend = \"local\"\n[evolve]\nrollback = \"auto\"\n",
    )
    .unwrap();
    journal(
        dir,
        &[Entry::PhaseStart {
            iter: 1,
            phase: Phase::Rollout,
            ts: "2026-05-01T12:00:00.000Z".into(),
        }],
    );
    finish_trial(dir, "alpha-task", 1, true);
    finish_trial(dir, "alpha-task", 2, false);
    dir.to_path_buf()
}

/// The page without what differs between two renderings or what the view adds (its bar,
/// token and script; the time of generation).
fn comparable(html: &str) -> String {
    let re = regex::Regex::new(
        r#"generated \d{4}-\d\d-\d\d \d\d:\d\d:\d\d|<meta name="ahe-view-token"[^>]*><script src="/_view/live.js" defer></script>|<div id="ahe-view-bar".*?</div>"#,
    )
    .unwrap();
    re.replace_all(html, "").into_owned()
}

#[test]
fn the_run_page_is_the_report_and_trial_pages_and_files_are_served_read_only() {
    let d = tempfile::tempdir().unwrap();
    unpack_compat(d.path());
    let runs = d.path().to_str().unwrap();
    let v = ViewServer::start(&[runs]);
    assert!(
        v.base.starts_with("http://127.0.0.1:"),
        "loopback by default: {}",
        v.base
    );
    let (code, _, list) = v.get("/");
    assert_eq!(code, 200, "{list}");
    for name in ["full", "killed-confirm", "killed-rollout"] {
        assert!(
            list.contains(&format!("data-name=\"{name}\"")),
            "{name} listed: {list}"
        );
    }
    let (code, head, page) = v.get("/d/0/full/report.html");
    assert_eq!(code, 200, "{page}");
    assert!(head
        .to_lowercase()
        .contains("content-security-policy: default-src 'self'; script-src 'self'"));
    // Nothing was written into the run by serving it.
    assert!(
        !d.path().join("full/report.html").exists(),
        "ahe view wrote report.html"
    );
    assert!(
        !d.path().join("full/report").exists(),
        "ahe view wrote report/"
    );
    // The same page `ahe report` writes: one view model, not a third rendering.
    let o = ahe(&["report", d.path().join("full").to_str().unwrap()], &[]);
    assert!(o.status.success(), "{}", text(&o));
    let written = std::fs::read_to_string(d.path().join("full/report.html")).unwrap();
    assert_eq!(comparable(&page), comparable(&written));
    // A trial page, rendered where `ahe report` writes it, equal to the written one.
    let trial_rel = {
        let re = regex::Regex::new(r#"href="(report/trials/[^"]+\.html)""#).unwrap();
        re.captures(&written).expect("a trial link")[1].to_string()
    };
    let (code, _, tp) = v.get(&format!("/d/0/full/{trial_rel}"));
    assert_eq!(code, 200, "{tp}");
    let on_disk = std::fs::read_to_string(d.path().join("full").join(&trial_rel)).unwrap();
    assert_eq!(comparable(&tp), comparable(&on_disk));
    // Files the report links to, as text; the run directory itself goes to its page.
    let (code, head, j) = v.get("/d/0/full/journal.jsonl");
    assert_eq!(code, 200);
    assert!(head.contains("text/plain"), "{head}");
    assert!(j.contains("\"ev\":\"phase_start\""), "{j}");
    let (code, head, _) = v.get("/d/0/full/");
    assert_eq!(code, 303, "{head}");
    assert!(head.contains("location: report.html"), "{head}");
    let (code, _, listing) = v.get("/d/0/full/iterations/");
    assert_eq!(code, 200);
    assert!(listing.contains(">001/</a>"), "{listing}");
    // GET only.
    let (code, _, _) = request(&v.addr, "POST", "/d/0/full/report.html");
    assert_eq!(code, 405);
}

#[test]
fn paths_outside_the_directories_given_are_refused() {
    let d = tempfile::tempdir().unwrap();
    let runs = d.path().join("runs");
    running_run(&runs.join("live"));
    std::fs::write(d.path().join("secret.txt"), "do not serve").unwrap();
    std::os::unix::fs::symlink(d.path().join("secret.txt"), runs.join("live/link.txt")).unwrap();
    std::os::unix::fs::symlink(d.path(), runs.join("live/up")).unwrap();
    // A run outside, reached by a symlink inside: its page is not served either.
    running_run(&d.path().join("elsewhere"));
    std::os::unix::fs::symlink(d.path().join("elsewhere"), runs.join("live/ext")).unwrap();
    let v = ViewServer::start(&[runs.to_str().unwrap()]);
    for path in [
        "/d/0/../secret.txt",
        "/d/0/live/../../secret.txt",
        "/d/0/..%2Fsecret.txt",
        "/d/0/live/%2E%2E/%2E%2E/secret.txt",
        "/d/0/live/link.txt",
        "/d/0/live/up/secret.txt",
        "/d/0/live/ext/report.html",
        "/d/0/live/ext/run.toml",
        "/d/0/live/up/elsewhere/report.html",
        "/d/0/..%5Csecret.txt",
    ] {
        let (code, _, body) = v.get(path);
        assert!(
            code == 403 || code == 404 || code == 400,
            "{path}: {code} {body}"
        );
        assert!(!body.contains("do not serve"), "{path} leaked the file");
        assert!(!body.contains("elsewhere"), "{path} served the run outside");
    }
    let (code, _, _) = v.get("/d/1/");
    assert_eq!(code, 404, "no second root");
    let (code, _, body) = v.get("/d/0/live/run.toml");
    assert_eq!(code, 200, "a file inside is served: {body}");
}

#[test]
fn a_running_run_moves_its_token_and_sends_a_change_event() {
    let d = tempfile::tempdir().unwrap();
    let run = running_run(&d.path().join("runs/live"));
    let v = ViewServer::start(&[d.path().join("runs").to_str().unwrap()]);
    let page_path = "/d/0/live/report.html";
    let (code, _, page) = v.get(page_path);
    assert_eq!(code, 200, "{page}");
    assert!(page.contains("alpha-task"), "{page}");
    assert!(!page.contains("beta-task"));
    let (_, _, t0) = v.get(&format!("/_view/token?path={page_path}"));
    assert!(
        page.contains(&format!("content=\"{t0}\"")),
        "the page carries its token"
    );
    // Listen for a change from the page's token, then finish a trial.
    let mut s = TcpStream::connect(&v.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        s,
        "GET /_view/events?path={page_path}&token={t0} HTTP/1.1\r\nHost: x\r\n\r\n"
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    finish_trial(&run, "beta-task", 1, true);
    let t0_clock = Instant::now();
    let mut got = String::new();
    let mut buf = [0u8; 4096];
    while !got.contains("event: change") && t0_clock.elapsed() < Duration::from_secs(20) {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "the event stream ended: {got}");
        got.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    assert!(got.contains("event: change"), "no change event: {got}");
    let (_, _, t1) = v.get(&format!("/_view/token?path={page_path}"));
    assert_ne!(t0, t1);
    assert!(got.contains(&format!("data: {t1}")), "{got}");
    let (_, _, page) = v.get(page_path);
    assert!(page.contains("beta-task"), "the new trial is on the page");
    let (_, _, list) = v.get("/");
    assert!(list.contains("rollout · 3 trials done"), "{list}");
}

#[test]
fn a_missing_directory_is_a_usage_error_naming_it() {
    let o = ahe(&["view", "/nonexistent/ahe-view-dir"], &[]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("/nonexistent/ahe-view-dir"),
        "{}",
        text(&o)
    );
}

#[test]
fn evaluations_and_matrices_get_their_report_pages_and_a_running_evaluation_is_scored_so_far() {
    let d = tempfile::tempdir().unwrap();
    let dirs = d.path().join("dirs");
    common::eval_smoke(&dirs.join("ev"), "mock:oracle");
    // The same evaluation before scores.json: running, scored from the trials finished.
    common::copy_dir(&dirs.join("ev"), &dirs.join("ev-running"));
    std::fs::remove_file(dirs.join("ev-running/scores.json")).unwrap();
    let cfg = d.path().join("run.toml");
    std::fs::write(
        &cfg,
        format!(
            "extends = \"{}\"\n[sandbox]\nbackend = \"local\"\n",
            root().join("configs/base.toml").display()
        ),
    )
    .unwrap();
    let m = d.path().join("matrix.toml");
    std::fs::write(
        &m,
        format!(
            "run_config = \"{}\"\nharnesses = [\"harness-seed\"]\nbenchmarks = [\"benchmarks/smoke\"]\nmodels = [\"oracle\"]\nk = 1\n[model.oracle]\nprovider = \"mock\"\nmodel = \"oracle\"\n",
            cfg.display()
        ),
    )
    .unwrap();
    let mx = dirs.join("mx");
    let o = ahe(
        &[
            "matrix",
            "--config",
            m.to_str().unwrap(),
            "--out",
            mx.to_str().unwrap(),
        ],
        &[],
    );
    assert!(o.status.success(), "{}", text(&o));
    let v = ViewServer::start(&[dirs.to_str().unwrap()]);
    let (_, _, list) = v.get("/");
    for (name, status) in [
        ("ev", "complete"),
        ("ev-running", "running or interrupted"),
        ("mx", "written"),
    ] {
        let row = list
            .split("<tr class=\"run-row\"")
            .find(|r| r.contains(&format!("data-name=\"{name}\"")))
            .unwrap_or_else(|| panic!("{name} not listed: {list}"));
        assert!(row.contains(status), "{name}: {row}");
    }
    // The evaluation's page and a trial page are the ones `ahe report` writes.
    let (code, _, page) = v.get("/d/0/ev/report.html");
    assert_eq!(code, 200, "{page}");
    let (code, _, running) = v.get("/d/0/ev-running/report.html");
    assert_eq!(code, 200, "{running}");
    let (_, _, trial) = v.get("/d/0/ev/report/trials/fix-sum/1.html");
    let o = ahe(&["report", dirs.join("ev").to_str().unwrap()], &[]);
    assert!(o.status.success(), "{}", text(&o));
    let written = std::fs::read_to_string(dirs.join("ev/report.html")).unwrap();
    assert_eq!(comparable(&page), comparable(&written));
    let on_disk = std::fs::read_to_string(dirs.join("ev/report/trials/fix-sum/1.html")).unwrap();
    assert_eq!(comparable(&trial), comparable(&on_disk));
    // The oracle passes every trial: the running evaluation's page says so from its trials.
    let pass = |p: &str| {
        let re = regex::Regex::new(r"<dt>pass@1</dt><dd><b>([0-9.]+)</b>").unwrap();
        re.captures(p).map(|c| c[1].to_string())
    };
    assert_eq!(pass(&running), Some("1.000".into()), "{running}");
    // The matrix page, with its cell linked to the cell's evaluation page.
    let (code, _, mpage) = v.get("/d/0/mx/report.html");
    assert_eq!(code, 200, "{mpage}");
    let cell = regex::Regex::new(r#"href="(cells/[^"]+/)""#)
        .unwrap()
        .captures(&mpage)
        .unwrap_or_else(|| panic!("no cell link: {mpage}"))[1]
        .to_string();
    let (code, head, _) = v.get(&format!("/d/0/mx/{cell}"));
    assert_eq!(code, 303, "{head}");
    let (code, _, cpage) = v.get(&format!("/d/0/mx/{cell}report.html"));
    assert_eq!(code, 200, "{cpage}");
    assert!(cpage.contains("ahe report — evaluation"), "{cpage}");
}
