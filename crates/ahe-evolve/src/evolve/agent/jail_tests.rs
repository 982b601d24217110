//! The evolve agent's jail over an iteration: traces, verifier output, held-out tasks.

use super::*;

const CAPS: WriteCaps = WriteCaps {
    max_file_bytes: 1 << 20,
    max_total_bytes: 1 << 22,
};

#[test]
fn the_evolve_jail_guards_traces_verifier_and_holdout() {
    let d = tempfile::tempdir().unwrap();
    let it = d.path().join("iterations/001");
    for task in ["seen", "held"] {
        let t = it.join(format!("trials/{task}/1"));
        std::fs::create_dir_all(t.join("verifier")).unwrap();
        std::fs::write(t.join("trace.clean.json"), "{}").unwrap();
        std::fs::write(t.join("verifier/stdout.txt"), "test output").unwrap();
    }
    let h = d.path().join("harness");
    std::fs::create_dir_all(h.join("memory")).unwrap();
    std::fs::write(d.path().join("run.toml"), "x").unwrap();
    let visible: BTreeSet<String> = ["seen".to_string()].into();
    let jail = build_jail(&IterationDir::at(&it), &h, &visible, false, CAPS).unwrap();
    assert_eq!(jail.read("traces/seen/1/trace.clean.json").unwrap(), "{}");
    assert!(
        jail.read("traces/held/1/trace.clean.json").is_err(),
        "held-out traces are hidden"
    );
    assert_eq!(jail.list("traces").unwrap(), vec!["seen/"]);
    assert!(
        jail.read("traces/seen/1/verifier/stdout.txt").is_err(),
        "verifier output hidden by default"
    );
    assert!(jail
        .write("traces/seen/1/trace.clean.json", "x")
        .unwrap_err()
        .contains("read-only"));
    assert!(jail
        .write("traces/seen/1/verifier/reward.txt", "1")
        .is_err());
    assert!(jail.write("harness/../run.toml", "x").is_err());
    assert!(jail.write("/etc/x", "x").is_err());
    assert!(jail.write("harness/memory/MEMORY.md", "ok").is_ok());
    let shown = build_jail(&IterationDir::at(&it), &h, &visible, true, CAPS).unwrap();
    assert_eq!(
        shown.read("traces/seen/1/verifier/stdout.txt").unwrap(),
        "test output"
    );
    assert!(shown.read("traces/held/1/verifier/stdout.txt").is_err());
}
