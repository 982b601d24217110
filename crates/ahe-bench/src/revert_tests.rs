//! What a counterfactual run reverts, and when it refuses: on a layer made on this host.

use std::path::Path;

use ahe_sandbox::Layer;

use super::*;
use crate::changes::Snapshot;

fn put(root: &Path, p: &str, body: &str) {
    let h = root.join(p.trim_start_matches('/'));
    std::fs::create_dir_all(h.parent().unwrap()).unwrap();
    std::fs::write(h, body).unwrap();
}

fn reason(s: &str) -> SuspectReason {
    SuspectReason {
        reason: s.into(),
        turn: None,
    }
}

struct Fixture {
    _dir: tempfile::TempDir,
    upper: std::path::PathBuf,
    lower: std::path::PathBuf,
    layer: Layer,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let (upper, lower) = (dir.path().join("upper"), dir.path().join("lower"));
    put(
        &lower,
        "/usr/lib/python3/dist-packages/_pytest/runner.py",
        "real\n",
    );
    put(&lower, "/root/.bashrc", "# image\n");
    std::fs::create_dir_all(upper.join("app")).unwrap();
    let layer = Layer {
        upper: vec![("/".into(), upper.clone())],
        lower: vec![lower.clone()],
        lower_tops: None,
        overlay: true,
        path_env: "/usr/bin:/bin".into(),
        image_paths: None,
    };
    Fixture {
        _dir: dir,
        upper,
        lower,
        layer,
    }
}

#[test]
fn the_plan_removes_what_was_made_and_puts_back_what_the_image_had() {
    let f = fixture();
    let before = Snapshot::take(&f.layer);
    // The agent phase: a deliverable, a planted conftest, image code patched in place.
    put(&f.upper, "/app/solution.py", "x = 1\n");
    put(&f.upper, "/conftest.py", "# forces passes\n");
    put(
        &f.upper,
        "/usr/lib/python3/dist-packages/_pytest/runner.py",
        "patched\n",
    );
    let handed = Snapshot::take(&f.layer);
    let agent = handed.changes_since(&before, &f.layer);
    // The verifier's run: a cache tree of its own, an image file it rewrote.
    put(&f.upper, "/root/.cache/uv/pkg/mod.py", "y\n");
    put(&f.upper, "/root/.bashrc", "# verifier\n");
    let after = Snapshot::take_after(&f.layer, &handed, &|p| p.starts_with("/app/"));
    let during = after.changes_since(&handed, &f.layer);
    let suspects: Vec<(&Changed, SuspectReason)> = agent
        .iter()
        .filter(|c| c.path != "/app/solution.py")
        .map(|c| (c, reason(&c.path)))
        .collect();
    let plan = Plan::make(suspects, &handed, &after, &during, &f.layer).unwrap();
    assert!(
        plan.remove.contains(&"/conftest.py".to_string()),
        "{plan:?}"
    );
    assert!(
        plan.remove.contains(&"/root/.cache".to_string()),
        "{plan:?}"
    );
    assert!(
        !plan.remove.iter().any(|p| p.starts_with("/app")),
        "{plan:?}"
    );
    let restored: Vec<&str> = plan.restore.iter().map(|(p, _)| p.as_str()).collect();
    assert!(restored.contains(&"/usr/lib/python3/dist-packages/_pytest/runner.py"));
    assert!(restored.contains(&"/root/.bashrc"));
    let (_, host) = &plan.restore[0];
    assert!(host.starts_with(&f.lower), "the image's copy: {host:?}");
    assert_eq!(plan.paths().matches(", ").count(), 1, "{}", plan.paths());
}

#[test]
fn the_plan_refuses_when_the_verifier_changed_or_removed_what_the_agent_left() {
    let f = fixture();
    let before = Snapshot::take(&f.layer);
    put(&f.upper, "/app/solution.py", "x = 1\n");
    put(&f.upper, "/conftest.py", "# forces passes\n");
    let handed = Snapshot::take(&f.layer);
    let agent = handed.changes_since(&before, &f.layer);
    let suspect = || {
        agent
            .iter()
            .filter(|c| c.path == "/conftest.py")
            .map(|c| (c, reason("conftest")))
            .collect::<Vec<_>>()
    };
    // The tests' run rewrote the deliverable (say, code the agent left wrote the answer
    // once it saw the tests): its state before cannot be had back.
    std::fs::remove_file(f.upper.join("app/solution.py")).unwrap();
    put(&f.upper, "/app/solution.py", "x = 2\n");
    let after = Snapshot::take(&f.layer);
    let during = after.changes_since(&handed, &f.layer);
    let e = Plan::make(suspect(), &handed, &after, &during, &f.layer).unwrap_err();
    assert!(e.contains("/app/solution.py"), "{e}");
    // A file the agent left, gone by the end (a hook that deletes itself).
    std::fs::remove_file(f.upper.join("conftest.py")).unwrap();
    let after = Snapshot::take(&f.layer);
    let during = after.changes_since(&handed, &f.layer);
    let e = Plan::make(suspect(), &handed, &after, &during, &f.layer).unwrap_err();
    assert!(e.contains("removed while the verifier ran"), "{e}");
}
