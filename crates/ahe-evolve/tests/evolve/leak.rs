//! The leak guard against real benchmarks: the seed harness and generic edits raise no
//! alarm against the built-in benchmarks and Terminal-Bench 2 (`/work/shared/terminal-bench-2`
//! or `AHE_TB2_DIR`, skipped when absent), and indexing TB2's 89 tasks is fast.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Instant;

use ahe_evolve::evolve::leak::{added_lines, LeakIndex, LeakSettings, TaskText};
use ahe_rundir::leak::{LeakKind, LeakPolicy};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn tb2() -> Option<PathBuf> {
    let p = std::env::var_os("AHE_TB2_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/work/shared/terminal-bench-2"));
    p.join("regex-log").is_dir().then_some(p)
}

fn task_texts(bench: &Path) -> Vec<TaskText> {
    let (tasks, _) = ahe_bench::load_benchmark(bench).unwrap();
    assert!(!tasks.is_empty(), "{}", bench.display());
    tasks
        .iter()
        .map(|t| TaskText::read(&t.name, &t.dir, false))
        .collect()
}

/// Every file of `dir`, as (relative path, content) — all of it counts as added.
fn files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                let rel = p.strip_prefix(dir).unwrap().to_string_lossy().into_owned();
                out.push((rel, std::fs::read(&p).unwrap()));
            }
        }
    }
    out
}

/// Generic harness text a legitimate edit might add.
const GENERIC: &str = "#!/bin/bash
set -euo pipefail
Read the task instruction carefully, then inspect the files it names before editing them.
Before calling finish, run the task's own checks if any exist (for example `python3 -m pytest -q`).
When a command fails, read the whole error message; do not retry the same command unchanged.
Use `ls -la`, `cat`, `head -n 50` and `grep -rn PATTERN .` to explore; prefer small edits.
If pip is missing, try `python3 -m ensurepip` or `apt-get update && apt-get install -y python3-pip`.
Write output files exactly where the instruction says and with the exact requested format.
import json, sys
def main():
    data = json.load(sys.stdin)
    print(json.dumps({\"ok\": True, \"output\": data.get(\"command\", \"\")}))
if __name__ == \"__main__\":
    main()
";

fn scan_all(ix: &LeakIndex, dir: &Path) -> Vec<String> {
    let mut hits = Vec::new();
    for (rel, content) in files(dir) {
        for h in ix.scan(&rel, &added_lines(None, &content)) {
            hits.push(format!(
                "{}:{} {:?} {} {:?}",
                h.file, h.line, h.kind, h.task, h.excerpt
            ));
        }
    }
    hits
}

#[test]
fn the_seed_and_generic_edits_raise_no_alarm_on_the_built_in_benchmarks() {
    let mut all = Vec::new();
    for b in ["smoke", "terminal-lite", "transfer-lite"] {
        all.extend(task_texts(&root().join("benchmarks").join(b)));
    }
    let ix = LeakIndex::build(&all);
    assert!(ix.len() > 10_000, "{}", ix.len());
    assert_eq!(
        scan_all(&ix, &root().join("harness-seed")),
        Vec::<String>::new()
    );
    let generic = ix.scan("memory/MEMORY.md", &added_lines(None, GENERIC.as_bytes()));
    assert_eq!(generic, vec![]);
    // ... while the same index does catch a copied line of a task's tests.
    let (tasks, _) = ahe_bench::load_benchmark(&root().join("benchmarks/smoke")).unwrap();
    let fix = tasks.iter().find(|t| t.name == "fix-sum").unwrap();
    let test = std::fs::read_to_string(fix.dir.join("tests/test.sh")).unwrap();
    let h = ix.scan("skills/s/SKILL.md", &added_lines(None, test.as_bytes()));
    assert!(
        h.iter()
            .any(|h| h.task == "fix-sum" && h.kind == LeakKind::Span),
        "{h:?}"
    );
}

#[test]
fn terminal_bench_2_indexes_fast_and_the_seed_raises_no_alarm() {
    let Some(dir) = tb2() else {
        eprintln!("skipped: no Terminal-Bench 2 checkout (set AHE_TB2_DIR)");
        return;
    };
    let (tasks, _) = ahe_bench::load_benchmark(&dir).unwrap();
    assert_eq!(tasks.len(), 89);
    let t0 = Instant::now();
    let s = LeakSettings::build(LeakPolicy::Reject, &tasks, &BTreeSet::new()).unwrap();
    let build = t0.elapsed();
    let t1 = Instant::now();
    assert_eq!(
        scan_all(&s.index, &root().join("harness-seed")),
        Vec::<String>::new()
    );
    let generic = s
        .index
        .scan("memory/MEMORY.md", &added_lines(None, GENERIC.as_bytes()));
    assert_eq!(generic, vec![]);
    let scan = t1.elapsed();
    eprintln!(
        "TB2: {} tasks, {} distinct windows, index built in {:.0} ms, seed + generic scanned in {:.1} ms",
        tasks.len(),
        s.index.len(),
        build.as_secs_f64() * 1e3,
        scan.as_secs_f64() * 1e3
    );
    // Task names of TB2 are caught as tokens, and a verbatim instruction line too.
    let inst = &tasks
        .iter()
        .find(|t| t.name == "regex-log")
        .unwrap()
        .instruction;
    let line = inst.lines().find(|l| l.len() > 60).unwrap();
    let text = format!("For regex-log:\n{line}\n");
    let h = s
        .index
        .scan("memory/x.md", &added_lines(None, text.as_bytes()));
    let kinds: Vec<(u32, &str, LeakKind)> = h
        .iter()
        .map(|h| (h.line, h.task.as_str(), h.kind))
        .collect();
    assert_eq!(
        kinds,
        vec![
            (1, "regex-log", LeakKind::Name),
            (2, "regex-log", LeakKind::Span)
        ]
    );
    // Release builds index TB2 in about 0.35 s; debug builds take a few seconds.
    assert!(build.as_secs_f64() < 30.0, "{build:?}");
}

#[test]
fn the_policy_is_a_config_key_with_a_clear_error() {
    let d = tempfile::tempdir().unwrap();
    let write = |name: &str, evolve: &str| {
        let p = d.path().join(name);
        std::fs::write(&p, format!("[benchmark]\npath = \"x\"\n[evolve]\n{evolve}")).unwrap();
        p
    };
    let c = ahe_runner::config::RunConfig::load(&write("a.toml", "")).unwrap();
    assert_eq!(c.evolve.leak_guard, LeakPolicy::Reject);
    let frozen = toml::to_string(&c).unwrap();
    assert!(frozen.contains("leak_guard = \"reject\""), "{frozen}");
    let c =
        ahe_runner::config::RunConfig::load(&write("b.toml", "leak_guard = \"warn\"\n")).unwrap();
    assert_eq!(c.evolve.leak_guard, LeakPolicy::Warn);
    let e = ahe_runner::config::RunConfig::load(&write("c.toml", "leak_guard = \"block\"\n"))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("c.toml") && e.contains("evolve.leak_guard") && e.contains("reject"),
        "{e}"
    );
}
