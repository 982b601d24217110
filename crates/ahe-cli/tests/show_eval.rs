//! `ahe show EVAL_DIR`: an evaluation directory (here one `ahe import harbor` made from a
//! Harbor job fixture) shows its per-task table and one task's trials, as text and JSON.

mod common;

use common::{ahe, root, stdout_json, text};

#[test]
fn show_reads_an_evaluation_directory() {
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("eval");
    let job = root().join("crates/ahe-cli/tests/fixtures/harbor-job-compose-missing");
    let (job, out_s) = (job.to_str().unwrap(), out.to_str().unwrap());
    let o = ahe(&["import", "harbor", job, "--out", out_s], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));

    let o = ahe(&["show", out_s], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let t = text(&o);
    assert!(t.contains("hello-file") && t.contains("fix-sum"), "{t}");
    assert!(t.contains("pass@1 = 0.000"), "{t}");

    let o = ahe(&["show", out_s, "--task", "hello-file"], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let t = text(&o);
    assert!(
        t.contains("infra_error") && t.contains("docker compose"),
        "{t}"
    );

    let doc = stdout_json(&ahe(
        &["show", out_s, "--task", "hello-file", "--json"],
        &[],
    ));
    assert_eq!(doc["kind"], "eval_task");
    assert_eq!(doc["trials"][0]["status"], "infra_error", "{doc}");
    let doc = stdout_json(&ahe(&["show", out_s, "--json"], &[]));
    assert_eq!(doc["statuses"]["infra_error"], 2, "{doc}");

    // What an evaluation does not have, and a task it did not run: clear errors.
    let o = ahe(&["show", out_s, "--iteration", "1"], &[]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("no iterations"), "{}", text(&o));
    let o = ahe(&["show", out_s, "--task", "nope"], &[]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("no task \"nope\""), "{}", text(&o));
}
