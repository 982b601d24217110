//! `ahe bench fetch SPEC` against local bare repositories over `file://`: `git+URL@REV#SUBDIR`
//! and `NAME@VERSION` (a registry entry pointed at the local repo through
//! `AHE_BENCH_REGISTRY`) fetch into the cache, verify the commit, reuse the cache without
//! the repository, refuse a wrong commit, and a benchmark path accepts the SPEC.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{ahe, text};

fn git(dir: &Path, args: &[&str]) -> String {
    let o = Command::new("git")
        .args([
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "-c",
            "init.defaultBranch=main",
        ])
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

/// A bare repo with `tasks/` holding two tasks in its first commit and three in its second;
/// returns (bare repo path, first commit, second commit).
fn bare_repo(root: &Path) -> (PathBuf, String, String) {
    let work = root.join("work");
    std::fs::create_dir_all(&work).unwrap();
    git(&work, &["init", "-q"]);
    let task = |name: &str| {
        let t = work.join("tasks").join(name);
        std::fs::create_dir_all(t.join("tests")).unwrap();
        std::fs::create_dir_all(t.join("environment")).unwrap();
        std::fs::write(t.join("environment/Dockerfile"), "FROM ahe-base:bookworm\n").unwrap();
        std::fs::write(t.join("task.toml"), "[agent]\ntimeout_sec = 60.0\n").unwrap();
        std::fs::write(t.join("instruction.md"), format!("Do {name}.\n")).unwrap();
        std::fs::write(
            t.join("tests/test.sh"),
            "#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n",
        )
        .unwrap();
    };
    task("alpha");
    task("beta");
    std::fs::write(work.join("README.md"), "bench\n").unwrap();
    git(&work, &["add", "-A"]);
    git(&work, &["commit", "-qm", "two tasks"]);
    let first = git(&work, &["rev-parse", "HEAD"]);
    task("gamma");
    git(&work, &["add", "-A"]);
    git(&work, &["commit", "-qm", "three tasks"]);
    let second = git(&work, &["rev-parse", "HEAD"]);
    let bare = root.join("bench.git");
    git(
        root,
        &[
            "clone",
            "-q",
            "--bare",
            work.to_str().unwrap(),
            bare.to_str().unwrap(),
        ],
    );
    (bare, first, second)
}

#[test]
fn git_spec_fetches_verifies_and_reuses_the_cache() {
    let d = tempfile::tempdir().unwrap();
    let (bare, first, second) = bare_repo(d.path());
    let cache = d.path().join("cache");
    let env = [("XDG_CACHE_HOME", cache.to_str().unwrap())];
    let spec = format!("git+file://{}@{first}#tasks", bare.display());
    let o = ahe(&["bench", "fetch", &spec], &env);
    assert!(o.status.success(), "{}", text(&o));
    let dir = cache.join(format!("ahe/benchmarks/bench/{first}"));
    assert!(
        text(&o).starts_with("fetched") && text(&o).contains("2 tasks"),
        "{}",
        text(&o)
    );
    assert!(dir.join("tasks/alpha/task.toml").is_file() && !dir.join("tasks/gamma").exists());
    assert_eq!(
        git(&dir, &["rev-parse", "HEAD"]),
        first,
        "checked out at the commit"
    );

    // A branch resolves to its commit; the JSON names it.
    let o = ahe(
        &[
            "bench",
            "fetch",
            &format!("git+file://{}@main#tasks", bare.display()),
            "--json",
        ],
        &env,
    );
    assert!(o.status.success(), "{}", text(&o));
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        (doc["commit"].as_str(), doc["tasks"].as_u64()),
        (Some(second.as_str()), Some(3))
    );

    // The repository gone: the pinned commit is served from the cache.
    std::fs::remove_dir_all(&bare).unwrap();
    let o = ahe(&["bench", "fetch", &spec], &env);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).starts_with("cached"), "{}", text(&o));
    // ...and a benchmark path accepts the SPEC.
    let o = ahe(&["bench", "list", &spec, "--json"], &env);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("alpha") && text(&o).contains("beta"));

    // Unreachable and not cached: the error names the URL and the cache dir to fill.
    let other = "0123456789012345678901234567890123456789";
    let o = ahe(
        &[
            "bench",
            "fetch",
            &format!("git+file://{}@{other}", bare.display()),
        ],
        &env,
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let e = text(&o);
    assert!(e.contains(&format!("file://{}", bare.display())), "{e}");
    assert!(e.contains(&format!("ahe/benchmarks/bench/{other}")), "{e}");
}

#[test]
fn wrong_commit_is_refused() {
    let d = tempfile::tempdir().unwrap();
    let (bare, _, _) = bare_repo(d.path());
    let cache = d.path().join("cache");
    let env = [("XDG_CACHE_HOME", cache.to_str().unwrap())];
    let wrong = "deadbeefdeadbeefdeadbeefdeadbeefdeadbeef";
    let o = ahe(
        &[
            "bench",
            "fetch",
            &format!("git+file://{}@{wrong}", bare.display()),
        ],
        &env,
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains(&format!("commit {wrong} is not in")),
        "{}",
        text(&o)
    );
    assert!(!cache.join(format!("ahe/benchmarks/bench/{wrong}")).exists());
}

#[test]
fn name_at_version_uses_the_registry_entry() {
    let d = tempfile::tempdir().unwrap();
    let (bare, first, _) = bare_repo(d.path());
    let cache = d.path().join("cache");
    let reg = d.path().join("registry.toml");
    std::fs::write(
        &reg,
        format!(
            "[[benchmark]]\nname = \"terminal-bench\"\nversion = \"2.0\"\nurl = \"file://{}\"\ncommit = \"{first}\"\nsubdir = \"tasks\"\n",
            bare.display()
        ),
    )
    .unwrap();
    let env = [
        ("XDG_CACHE_HOME", cache.to_str().unwrap()),
        ("AHE_BENCH_REGISTRY", reg.to_str().unwrap()),
    ];
    let o = ahe(&["bench", "fetch", "terminal-bench@2.0"], &env);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("2 tasks"), "{}", text(&o));
    let dir = cache.join(format!("ahe/benchmarks/terminal-bench/{first}"));
    assert_eq!(git(&dir, &["rev-parse", "HEAD"]), first);
    let o = ahe(&["bench", "fetch", "terminal-bench@2.0"], &env);
    assert!(text(&o).starts_with("cached"), "{}", text(&o));
    // --to DIR checks out there instead.
    let to = d.path().join("tb2");
    let o = ahe(
        &[
            "bench",
            "fetch",
            "terminal-bench@2.0",
            "--to",
            to.to_str().unwrap(),
        ],
        &env,
    );
    assert!(o.status.success(), "{}", text(&o));
    assert!(to.join("tasks/beta/task.toml").is_file());

    // A registry entry pinned to a commit the repository lacks is refused.
    let wrong = "1111111111111111111111111111111111111111";
    std::fs::write(
        &reg,
        format!(
            "[[benchmark]]\nname = \"terminal-bench\"\nversion = \"2.0\"\nurl = \"file://{}\"\ncommit = \"{wrong}\"\n",
            bare.display()
        ),
    )
    .unwrap();
    let o = ahe(&["bench", "fetch", "terminal-bench@2.0"], &env);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains(&format!("commit {wrong} is not in")),
        "{}",
        text(&o)
    );
    // An unknown version names what the registry has.
    let o = ahe(&["bench", "fetch", "terminal-bench@9.9"], &env);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).contains("terminal-bench@2.0"), "{}", text(&o));
}
