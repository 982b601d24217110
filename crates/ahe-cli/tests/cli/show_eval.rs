//! `ahe show EVAL_DIR`: an evaluation directory (here one `ahe import harbor` made from a
//! Harbor job fixture) shows its per-task table and one task's trials, as text and JSON;
//! `ahe compare` pairs evaluation directories (ahe's and imported ones) task by task.

use crate::common;

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

/// `ahe compare` over directories that exist: an ahe evaluation is the baseline of another
/// and of an imported Harbor job (another tool's trials), paired on the tasks in common.
#[test]
fn compare_reads_evaluation_directories_and_imported_jobs() {
    let d = tempfile::tempdir().unwrap();
    let (oracle, nop, job) = (
        d.path().join("oracle"),
        d.path().join("nop"),
        d.path().join("job"),
    );
    common::eval_smoke(&oracle, "mock:oracle");
    common::eval_smoke(&nop, "mock:nop");
    let fixture = root().join("crates/ahe-cli/tests/fixtures/harbor-job-compose-missing");
    common::import_harbor(&fixture, &job);
    let dirs = [&oracle, &nop, &job].map(|p| p.to_str().unwrap().to_string());

    let mut args = vec!["compare"];
    args.extend(dirs.iter().map(String::as_str));
    args.push("--json");
    let doc = stdout_json(&ahe(&args, &[]));
    assert_eq!(doc["kind"], "comparison", "{doc}");
    assert_eq!(doc["baseline"], "oracle", "{doc}");
    assert_eq!(doc["harnesses"][0]["pass_at_1"], 1.0, "{doc}");
    let nop_vs = &doc["comparisons"][0];
    assert_eq!(nop_vs["other"], "nop", "{doc}");
    assert_eq!(nop_vs["n_paired"], 2, "{doc}");
    assert_eq!(nop_vs["delta"], -1.0, "{doc}");
    assert_eq!(nop_vs["changed"], 2, "{doc}");
    for t in nop_vs["tasks"].as_array().unwrap() {
        assert_eq!(
            (t["baseline_passed"].as_u64(), t["other_passed"].as_u64()),
            (Some(2), Some(0)),
            "{t}"
        );
    }
    // The imported job's trials never ran (infra): nothing to pair, and no harness failure.
    let job_vs = &doc["comparisons"][1];
    assert_eq!(job_vs["other"], "job", "{doc}");
    assert_eq!(job_vs["n_paired"], 0, "{doc}");
    let left_out = serde_json::json!(["fix-sum", "hello-file"]);
    assert_eq!(job_vs["excluded_infra"], left_out, "{doc}");
    assert_eq!(job_vs["delta"], serde_json::Value::Null, "{doc}");
    assert_eq!(doc["k"], serde_json::json!([1, 2]), "{doc}");
    assert_eq!(doc["model"], "mock:oracle vs mock:nop vs oracle", "{doc}");

    args.pop();
    let o = ahe(&args, &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let t = text(&o);
    assert!(t.contains("nop vs oracle: Δ pass@1 -1.000"), "{t}");
    assert!(t.contains("job vs oracle: no tasks in common"), "{t}");
    let line = "left out (no trial of one side could run: infra): fix-sum, hello-file";
    assert!(t.contains(line), "{t}");

    // One directory is no comparison; a run-less, scores-less directory is a clear error.
    let o = ahe(&["compare", &dirs[0]], &[]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let empty = d.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let o = ahe(&["compare", &dirs[0], empty.to_str().unwrap()], &[]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("is it an evaluation directory?"),
        "{}",
        text(&o)
    );
}
