//! Attribution against a known ground truth (the simulation in `attribution_sim/`): a
//! helpful change, a predicted harmful one, an unpredicted harmful one, and a harmful and a
//! helpful change in the same file. Every harmful change must be HARMFUL and rolled back,
//! the helpful one's lines must survive, and verdicts and precision/recall must equal the
//! truth.

mod attribution_sim;
mod common;

use attribution_sim::Scenario;
use common::{root, text};

#[test]
fn every_harmful_change_is_found_and_reverted_alone() {
    let d = tempfile::tempdir().unwrap();
    let sc = Scenario::standard();
    let (o, run) = sc.run(d.path(), &root(), env!("CARGO_BIN_EXE_ahe").as_ref());
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let out = sc.outcome(&run);
    assert_eq!(out.verdicts, sc.expected_verdicts(), "{out:?}");
    assert_eq!(out.harmful, 2);
    assert_eq!(out.harmful_rolled_back, 2, "{out:?}");
    assert_eq!(out.collateral_lines_lost, 0, "{out:?}");

    // The unpredicted harm was found by reverting its commit alone.
    let ev = common::json_file(&run.join("iterations/002/change_evaluation.json"));
    let c3 = ev["changes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == "c3")
        .unwrap();
    assert_eq!(c3["risk_tasks"], serde_json::json!([]));
    assert_eq!(
        c3["counterfactual"]["restored"],
        serde_json::json!(["sim-06"])
    );
    assert_eq!(c3["blamed_regressions"], serde_json::json!(["sim-06"]));
    assert!(ev["unattributed_regressions"]
        .as_array()
        .unwrap()
        .is_empty());

    // Precision and recall against the truth.
    let [(fp, fr), (rp, rr)] = sc.expected_quality();
    let q = &out.prediction;
    assert_eq!(q["fix_precision"].as_f64(), fp, "{q}");
    assert_eq!(q["fix_recall"].as_f64(), fr, "{q}");
    assert_eq!(q["risk_precision"].as_f64(), rp, "{q}");
    assert_eq!(q["risk_recall"].as_f64(), rr, "{q}");
    assert_eq!(rr, Some(0.5));

    // Confirmation made the k = 2 flips significant; extra trials stayed within the cap.
    let fixed = &ev["fixed"][0];
    assert_eq!(fixed["task"], "sim-01");
    assert!(fixed["extra_trials"].as_u64().unwrap() >= 3, "{fixed}");
    assert_eq!(fixed["within_noise"], false, "{fixed}");
    let per_iteration_cap = (0.25 * (sc.tasks * 2) as f64) as u32;
    assert!(out.extra_trials <= 3 * per_iteration_cap, "{out:?}");
    assert!(
        (out.extra_trials as f64) / ((out.trials + out.extra_trials) as f64) <= 0.25,
        "{out:?}"
    );
}
