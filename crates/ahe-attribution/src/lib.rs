//! Attribution (docs/attribution.md) as functions over a run's records: flips, per-change verdicts,
//! file-matched regressions, prediction quality against the counterfactual truth, the
//! statistical layer, when a flip within noise is decided, and when the final answer has
//! enough fresh trials (docs/final-answer.md). The phases that run extra trials (confirm,
//! counterfactual, canary, final) live in `ahe-evolve` and call these.

pub mod attribute;
pub mod boundary;
pub mod confirm;
pub mod normal;
pub mod sequential;
pub mod stats;
