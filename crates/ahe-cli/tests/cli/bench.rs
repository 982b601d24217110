//! `ahe bench check` and `ahe bench list`: format validation, oracle/nop runs, exit codes,
//! the TB2 sample's metadata, and the built-in benchmarks on the local and docker backends.
//!
//! Docker tests print a note and pass without an engine (or the base image), except with
//! `CI=true`, where that is a failure. Local-backend runs of the built-in benchmarks need
//! the task tools on the host (the local backend uses the host's /usr) and skip otherwise.

use crate::common;

use common::{copy_dir, docker_ready, root, run as ahe, stdout_json as json, text};

use std::process::Command;

use serde_json::Value;

/// A benchmark in a temp dir holding copies of the named smoke tasks.
fn smoke_copy(tasks: &[&str]) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    for t in tasks {
        copy_dir(
            &root().join("benchmarks/smoke").join(t),
            &tmp.path().join(t),
        );
    }
    tmp
}

fn task<'a>(doc: &'a Value, name: &str) -> &'a Value {
    doc["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == name)
        .unwrap_or_else(|| panic!("no task {name} in {doc}"))
}

#[test]
fn smoke_oracle_and_nop_pass_on_local() {
    let o = ahe(&[
        "bench",
        "check",
        "benchmarks/smoke",
        "--oracle",
        "--nop",
        "--sandbox",
        "local",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("runs ok 8/8 — OK"), "{out}");
    for t in ["config-port", "count-errors", "fix-sum", "hello-file"] {
        let row = out.lines().find(|l| l.starts_with(t)).unwrap();
        assert!(row.contains("ok (1)") && row.contains("ok (0)"), "{row}");
    }
}

#[test]
fn a_task_whose_oracle_fails_fails_the_check() {
    let tmp = smoke_copy(&["hello-file", "config-port"]);
    std::fs::write(
        tmp.path().join("hello-file/solution/solve.sh"),
        "#!/bin/bash\necho 'Hello, World' > /app/hello.txt\n",
    )
    .unwrap();
    let dir = tmp.path().to_str().unwrap();
    let o = ahe(&["bench", "check", dir, "--oracle", "--sandbox", "local"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let out = text(&o);
    assert!(
        out.contains("hello-file: error: oracle: reward 0, expected 1"),
        "{out}"
    );
    assert!(out.contains("trial logs: "), "{out}");

    let o = ahe(&[
        "bench",
        "check",
        dir,
        "--oracle",
        "--sandbox",
        "local",
        "--json",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let doc = json(&o);
    assert_eq!(doc["ok"], false);
    assert_eq!(task(&doc, "hello-file")["oracle"]["ok"], false);
    assert_eq!(task(&doc, "hello-file")["oracle"]["reward"], 0.0);
    assert_eq!(task(&doc, "config-port")["oracle"]["ok"], true);
    assert!(task(&doc, "config-port")["nop"].is_null());
}

#[test]
fn a_task_whose_nop_passes_fails_the_check() {
    let tmp = smoke_copy(&["hello-file", "count-errors"]);
    // A verifier that only checks that a file exists, which the environment already has.
    std::fs::write(
        tmp.path().join("count-errors/tests/test.sh"),
        "#!/bin/bash\nif [ -f /app/server.log ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n",
    )
    .unwrap();
    let dir = tmp.path().to_str().unwrap();
    let o = ahe(&[
        "bench",
        "check",
        dir,
        "--oracle",
        "--nop",
        "--sandbox",
        "local",
        "--json",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let doc = json(&o);
    let t = task(&doc, "count-errors");
    assert_eq!(t["oracle"]["ok"], true, "{t}");
    assert_eq!(t["nop"]["ok"], false, "{t}");
    assert!(t["nop"]["problem"]
        .as_str()
        .unwrap()
        .contains("with nothing done"));
    assert_eq!(task(&doc, "hello-file")["nop"]["ok"], true);
    assert_eq!(doc["summary"]["runs_failed"], 1);
}

#[test]
fn format_problems_are_errors_or_warnings() {
    let tmp = smoke_copy(&["count-errors", "fix-sum", "hello-file"]);
    let p = tmp.path();
    // Error: a COPY source that is not in the build context.
    std::fs::remove_file(p.join("count-errors/environment/server.log")).unwrap();
    // Error: a verifier that never writes the reward.
    std::fs::write(p.join("fix-sum/tests/test.sh"), "#!/bin/bash\nexit 0\n").unwrap();
    // Warning only: no oracle solution.
    std::fs::remove_dir_all(p.join("hello-file/solution")).unwrap();
    let o = ahe(&["bench", "check", p.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let out = text(&o);
    assert!(out.contains("COPY server.log: not found"), "{out}");
    assert!(out.contains("/logs/verifier/reward"), "{out}");
    assert!(out.contains("hello-file: warning:") && out.contains("solve.sh: missing"));
    let row = out.lines().find(|l| l.starts_with("hello-file")).unwrap();
    assert!(row.contains("ok (1 warn)"), "{row}");

    // With only the warning left, the check passes.
    let ok = smoke_copy(&["hello-file"]);
    std::fs::remove_dir_all(ok.path().join("hello-file/solution")).unwrap();
    let o = ahe(&["bench", "check", ok.path().to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
}

#[test]
fn bad_usage_exits_2() {
    let empty = tempfile::tempdir().unwrap();
    for args in [
        vec!["bench", "check", "/nonexistent/bench"],
        vec!["bench", "check", empty.path().to_str().unwrap()],
        vec!["bench", "list", "/nonexistent/bench"],
        vec![
            "bench",
            "check",
            "benchmarks/smoke",
            "--oracle",
            "--sandbox",
            "bogus",
        ],
        vec![
            "bench",
            "check",
            "benchmarks/smoke",
            "--tasks",
            "no-such-task",
        ],
        vec!["bench", "check"],
        vec!["bench", "check", "benchmarks/smoke", "--frobnicate"],
    ] {
        let o = ahe(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", text(&o));
    }
}

#[test]
fn tb2_sample_format_and_metadata() {
    let sample = root().join("../shared/tb2-sample");
    if !sample.is_dir() {
        eprintln!("note: ../shared/tb2-sample is absent; skipping the TB2 sample check");
        return;
    }
    let o = ahe(&["bench", "check", "../shared/tb2-sample"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    let row = out.lines().find(|l| l.starts_with("fix-git")).unwrap();
    assert!(
        row.contains("easy") && row.contains("software-engineering") && row.contains(" ok"),
        "{row}"
    );

    let doc = json(&ahe(&["bench", "check", "../shared/tb2-sample", "--json"]));
    assert_eq!(doc["ok"], true);
    assert_eq!(doc["tasks"].as_array().unwrap().len(), 8);
    assert!(doc["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .all(|t| t["format"]["ok"] == true && t["oracle"].is_null()));
    assert_eq!(task(&doc, "cancel-async-tasks")["difficulty"], "hard");
    assert_eq!(task(&doc, "sqlite-db-truncate")["category"], "debugging");

    let o = ahe(&["bench", "list", "../shared/tb2-sample", "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let doc = json(&o);
    let fix_git = task(&doc, "fix-git");
    assert_eq!(fix_git["difficulty"], "easy");
    assert_eq!(fix_git["category"], "software-engineering");
    assert_eq!(fix_git["agent_timeout_sec"], 900.0);
    assert_eq!(fix_git["verifier_timeout_sec"], 900.0);
    assert_eq!(fix_git["cpus"], 1.0);
    assert_eq!(fix_git["memory_mb"], 2048);
    assert_eq!(fix_git["allow_internet"], true);
    assert_eq!(fix_git["docker_image"], "alexgshaw/fix-git:20251031");
    let sched = task(&doc, "constraints-scheduling");
    assert_eq!(sched["agent_timeout_sec"], 1200.0);
    assert_eq!(sched["category"], "personal-assistant");
    let list = String::from_utf8_lossy(&ahe(&["bench", "list", "../shared/tb2-sample"]).stdout)
        .into_owned();
    let row = list.lines().find(|l| l.starts_with("fix-git")).unwrap();
    for cell in ["easy", "software-engineering", "900", "2048", "yes"] {
        assert!(row.contains(cell), "{row}");
    }
}

/// Format, metadata and variety of a built-in benchmark; returns its `bench list --json`.
fn built_in(name: &str, min_tasks: usize, min_categories: usize, spread: bool) -> Value {
    let dir = format!("benchmarks/{name}");
    let o = ahe(&["bench", "check", &dir, "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let doc = json(&o);
    for t in doc["tasks"].as_array().unwrap() {
        let f = &t["format"];
        assert!(
            f["ok"] == true && f["warnings"].as_array().unwrap().is_empty(),
            "{}: {f}",
            t["name"]
        );
    }
    let list = json(&ahe(&["bench", "list", &dir, "--json"]));
    let tasks = list["tasks"].as_array().unwrap();
    assert!(tasks.len() >= min_tasks, "{name}: {} tasks", tasks.len());
    let mut cats: Vec<&str> = tasks
        .iter()
        .map(|t| t["category"].as_str().unwrap())
        .collect();
    cats.sort();
    cats.dedup();
    assert!(cats.len() >= min_categories, "{name}: categories {cats:?}");
    for d in ["easy", "medium", "hard"].iter().filter(|_| spread) {
        assert!(
            tasks.iter().any(|t| t["difficulty"] == *d),
            "{name}: no {d}"
        );
    }
    for t in tasks {
        assert_eq!(t["allow_internet"], false, "{}", t["name"]);
        assert_eq!(t["has_solution"], true, "{}", t["name"]);
        let df = std::fs::read_to_string(root().join(t["dockerfile"].as_str().unwrap())).unwrap();
        assert!(df.starts_with("FROM ahe-base:bookworm\n"), "{}", t["name"]);
    }
    list
}

#[test]
fn built_in_benchmarks_are_valid_and_varied() {
    let tl = built_in("terminal-lite", 20, 8, true);
    let tr = built_in("transfer-lite", 8, 5, true);
    let names = |l: &Value| -> Vec<String> {
        l["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_string())
            .collect()
    };
    let (a, b) = (names(&tl), names(&tr));
    assert!(a.iter().all(|n| !b.contains(n)), "a task is in both");
    built_in("smoke", 4, 3, false);
}

/// Runs oracle + nop of a benchmark on a backend; asserts every task passes.
fn check_runs(dir: &str, sandbox: &str, tasks: &[String]) {
    let mut args = vec![
        "bench",
        "check",
        dir,
        "--oracle",
        "--nop",
        "--sandbox",
        sandbox,
        "--concurrency",
        "2",
    ];
    let list = tasks.join(",");
    if !tasks.is_empty() {
        args.extend(["--tasks", list.as_str()]);
    }
    let o = ahe(&args);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains(" — OK"));
}

#[test]
fn smoke_on_docker() {
    if docker_ready() {
        check_runs("benchmarks/smoke", "docker", &[]);
    }
}

#[test]
fn terminal_lite_on_docker() {
    if docker_ready() {
        check_runs("benchmarks/terminal-lite", "docker", &[]);
    }
}

#[test]
fn transfer_lite_on_docker() {
    if docker_ready() {
        check_runs("benchmarks/transfer-lite", "docker", &[]);
    }
}

/// The host tools the local backend needs for a benchmark's tasks (it runs on the host's /usr).
fn host_has(tools: &[&str]) -> bool {
    let missing: Vec<&&str> = tools
        .iter()
        .filter(|t| {
            !Command::new("sh")
                .args(["-c", &format!("command -v {t}")])
                .output()
                .is_ok_and(|o| o.status.success())
        })
        .collect();
    if !missing.is_empty() {
        eprintln!("note: the host lacks {missing:?}; skipping this local-backend bench check");
    }
    missing.is_empty()
}

const TOOLS: [&str; 10] = [
    "/usr/bin/python3",
    "git",
    "sqlite3",
    "jq",
    "gcc",
    "make",
    "dpkg-deb",
    "patch",
    "zcat",
    "bwrap",
];

#[test]
fn terminal_lite_on_local() {
    if host_has(&TOOLS) {
        check_runs("benchmarks/terminal-lite", "local", &[]);
    }
}

#[test]
fn transfer_lite_on_local() {
    if !host_has(&TOOLS) {
        return;
    }
    // write-tests-mutants runs pytest, which the host's python3 may lack.
    let pytest = Command::new("/usr/bin/python3")
        .args(["-c", "import pytest"])
        .output()
        .is_ok_and(|o| o.status.success());
    let list = json(&ahe(&[
        "bench",
        "list",
        "benchmarks/transfer-lite",
        "--json",
    ]));
    let tasks: Vec<String> = list["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_string())
        .filter(|n| pytest || n != "write-tests-mutants")
        .collect();
    if !pytest {
        eprintln!(
            "note: the host's python3 has no pytest; write-tests-mutants is docker-only here"
        );
    }
    check_runs("benchmarks/transfer-lite", "local", &tasks);
}

/// A `bwrap` in `dir` that fails the first run in each `ahe` process the way bubblewrap does
/// when a host mount vanishes during its recursive bind of `/` (a Docker container created
/// or removed beside it: the race of issue 42), then is the real `bwrap` (`real`).
fn flaky_bwrap(dir: &std::path::Path, real: &str) {
    use std::os::unix::fs::PermissionsExt;
    let state = dir.join("state");
    std::fs::create_dir(&state).unwrap();
    let script = format!(
        "#!/bin/sh\n\
         if mkdir '{}/'\"$PPID\" 2>/dev/null; then\n  \
         echo \"bwrap: Can't bind mount /oldroot/ on /newroot/: Unable to apply mount flags: \
         remount \\\"/newroot/var/lib/docker/overlay2/0-init/merged\\\": Invalid argument\" >&2\n  \
         exit 1\n\
         fi\n\
         exec '{real}' \"$@\"\n",
        state.display()
    );
    let bin = dir.join("bwrap");
    std::fs::write(&bin, script).unwrap();
    // Sandboxes of a root ahe run bwrap as an unprivileged uid: it must reach the script.
    for (p, mode) in [(dir, 0o755), (&state, 0o777), (&bin, 0o755)] {
        std::fs::set_permissions(p, PermissionsExt::from_mode(mode)).unwrap();
    }
}

/// Issue 42: several `ahe bench check --sandbox local` at once, each on a cold temp dir of
/// its own, each seeing one transient bubblewrap failure (as when Docker starts containers
/// beside it): every process must stay isolated and every oracle and nop run pass. Before
/// the fix, the one failed probe put the process in plain mode, where no smoke task runs.
#[test]
fn concurrent_local_checks_on_a_cold_state_survive_a_transient_bwrap_failure() {
    let real = Command::new("sh")
        .args(["-c", "command -v bwrap"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    let Some(real) = real.filter(|_| ahe_sandbox::local::LocalBackend::bubblewrap_available())
    else {
        eprintln!("note: bubblewrap does not work here; skipping");
        return;
    };
    let fake = tempfile::tempdir().unwrap();
    flaky_bwrap(fake.path(), &real);
    let path = format!(
        "{}:{}",
        fake.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let tmps: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let children: Vec<_> = tmps
        .iter()
        .map(|tmp| {
            use std::os::unix::fs::PermissionsExt;
            // Like /tmp: the sandbox's unprivileged uid reaches its trial dirs.
            std::fs::set_permissions(tmp.path(), PermissionsExt::from_mode(0o1777)).unwrap();
            Command::new(env!("CARGO_BIN_EXE_ahe"))
                .args(["bench", "check", "benchmarks/smoke", "--oracle", "--nop"])
                .args(["--sandbox", "local"])
                .current_dir(root())
                .env("PATH", &path)
                .env("TMPDIR", tmp.path())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for child in children {
        let o = child.wait_with_output().unwrap();
        let all = text(&o);
        assert_eq!(o.status.code(), Some(0), "{all}");
        assert!(!all.contains("PLAIN mode"), "{all}");
        assert!(
            String::from_utf8_lossy(&o.stdout).contains("runs ok 8/8 — OK"),
            "{all}"
        );
    }
    let probed = std::fs::read_dir(fake.path().join("state"))
        .unwrap()
        .count();
    assert_eq!(probed, 3, "each process met the failing bwrap once");
}
