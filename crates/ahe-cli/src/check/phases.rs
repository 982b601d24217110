//! `ahe check`'s estimate by phase: the trials and dollars of the rollouts, attribution's
//! extra trials (the share and the harm floor), the final answer, the matched-budget
//! baseline, the trajectory judge, the debugger, the overview and the evolve agent — from
//! the config alone (per-trial dollars as a range: one short turn to every trial at its
//! token limit; the agents' dollars unknown), or from a run's measured spend per trial and
//! per iteration (`--from-run`), the same figures `ahe report` shows spent.

use std::path::Path;

use ahe_report::spend::{PhaseSpend, PHASES};
use ahe_runner::config::RunConfig;
use serde::Serialize;

/// One phase of the estimate.
#[derive(Debug, Clone, Serialize)]
pub struct PhaseEstimate {
    /// `rollouts`, `attribution extras`, `final`, `baseline`, `judge`, `debugger`,
    /// `overview`, `evolve`.
    pub phase: &'static str,
    /// Trials it runs: [fewest, most] (0 for the model-only phases).
    pub trials: [usize; 2],
    /// Dollars [low, high]; None when unknown (no prices, or an agent without a measured run).
    pub usd: Option<[f64; 2]>,
    /// How the figures were reached.
    pub basis: String,
}

/// What the estimate reads from the config and the benchmark.
pub struct Plan<'a> {
    /// The run config.
    pub cfg: &'a RunConfig,
    /// Tasks (visible + held-out).
    pub tasks: usize,
    /// Of those, held out.
    pub holdout: usize,
    /// Code-agent dollars of one trial, [low, high] (None: no prices).
    pub per_trial: Option<[f64; 2]>,
    /// Dollars of one judge call at most (None: judge off or no prices).
    pub judge_call: Option<f64>,
}

/// Tokens and dollars of one unit (a trial, an iteration's agent), as a run measured them.
#[derive(Debug, Clone, Copy, Default)]
pub struct Unit {
    /// Prompt tokens.
    pub input: f64,
    /// Completion tokens.
    pub output: f64,
    /// Dollars at the run's own prices.
    pub usd: f64,
}

impl Unit {
    fn of(p: &PhaseSpend, per: f64) -> Unit {
        let per = per.max(1.0);
        Unit {
            input: (p.tokens - p.output_tokens) as f64 / per,
            output: p.output_tokens as f64 / per,
            usd: p.usd / per,
        }
    }

    /// Dollars at the config's prices for `role` (the run's own dollars when it names none).
    pub fn priced(&self, cfg: &RunConfig, role: &str) -> f64 {
        let m = cfg.model(role);
        match m.price_input_per_mtok > 0.0 || m.price_output_per_mtok > 0.0 {
            true => {
                (self.input * m.price_input_per_mtok + self.output * m.price_output_per_mtok) / 1e6
            }
            false => self.usd,
        }
    }
}

/// Measured spend of an earlier run (or pilot): per trial and per iteration.
#[derive(Debug, Clone, Default)]
pub struct Measured {
    /// The run directory.
    pub run: String,
    /// Iterations with an evolve step it measured.
    pub iterations: u32,
    /// Rollout trials it measured.
    pub trials: u32,
    /// One rollout trial (the code agent).
    pub per_trial: Unit,
    /// Attribution's extra trials per rollout trial.
    pub extra_share: f64,
    /// The judge per trial (rollout and extra).
    pub judge_per_trial: Unit,
    /// The debugger, overview and evolve agents per iteration.
    pub per_iteration: [Unit; 3],
}

/// Reads the measured spend of the run at `dir` (None when it measured no trial).
pub fn measure(dir: &Path) -> anyhow::Result<Option<Measured>> {
    let run = ahe_report::RunReport::load(dir)?;
    let sp = ahe_report::spend::spend(&run);
    let t = |name: &str| sp.total[PHASES.iter().position(|p| *p == name).unwrap()];
    let (roll, extra): (PhaseSpend, PhaseSpend) = (t("rollouts"), t("attribution extras"));
    if roll.trials == 0 {
        return Ok(None);
    }
    let iterations = run.iterations.iter().filter(|i| !i.is_final).count().max(1) as u32;
    let per_it = |name: &str| Unit::of(&t(name), iterations as f64);
    Ok(Some(Measured {
        run: dir.display().to_string(),
        iterations,
        trials: roll.trials,
        per_trial: Unit::of(&roll, roll.trials as f64),
        extra_share: extra.trials as f64 / roll.trials as f64,
        judge_per_trial: Unit::of(&t("judge"), (roll.trials + extra.trials) as f64),
        per_iteration: [per_it("debugger"), per_it("overview"), per_it("evolve")],
    }))
}

/// The estimate by phase (`m`: a measured run, whose figures replace the config's ranges).
pub fn estimate(p: &Plan, m: Option<&Measured>) -> Vec<PhaseEstimate> {
    let (cfg, n) = (p.cfg, p.cfg.iterations as usize);
    let k = cfg.k as usize;
    let visible = p.tasks - p.holdout;
    let per_iteration = p.tasks * k;
    let at = cfg.attribution.clone();
    let share_cap = (at.max_extra_share * per_iteration as f64).ceil() as usize;
    let extra_max = n * (share_cap + at.harm_floor_trials as usize);
    let extra_low = m.map_or(0, |m| (m.extra_share * (n * per_iteration) as f64) as usize);
    let cap = cfg.evolve.final_trials.unwrap_or(2 * cfg.k) as usize;
    let fin = match cap {
        0 => [0, 0],
        _ => [2 * visible, 2 * visible * cap],
    };
    let base = match cfg.evolve.baseline {
        true => p.tasks * cfg.evolve.baseline_trials.saturating_sub(cfg.k) as usize,
        false => 0,
    };
    let trial_usd = |t: [usize; 2]| match m {
        Some(m) => {
            let c = m.per_trial.priced(cfg, "code_agent");
            Some([t[0] as f64 * c, t[1] as f64 * c])
        }
        None => p
            .per_trial
            .map(|c| [t[0] as f64 * c[0], t[1] as f64 * c[1]]),
    };
    let rollouts = [(n + 1) * per_iteration; 2];
    let from = match m {
        Some(m) => format!(
            "{:.0} in / {:.0} out tokens per trial measured over {} trials of {} (${:.4} a trial at this config's prices)",
            m.per_trial.input,
            m.per_trial.output,
            m.trials,
            m.run,
            m.per_trial.priced(cfg, "code_agent")
        ),
        None => "per trial: one short turn to every trial at its token limit".into(),
    };
    let mut out = vec![
        row("rollouts", rollouts, trial_usd(rollouts), format!("{} evaluations × {} tasks × k = {k}; {from}", n + 1, p.tasks)),
        row("attribution extras", [extra_low, extra_max], trial_usd([extra_low, extra_max]), format!(
            "at most {n} × ({share_cap} = max_extra_share {:.2} of {per_iteration} + harm floor {}){}",
            at.max_extra_share,
            at.harm_floor_trials,
            m.map_or(String::new(), |m| format!("; measured {:.1}% of the rollouts", 100.0 * m.extra_share))
        )),
        row("final", fin, trial_usd(fin), format!(
            "best and seed on {visible} visible tasks: one round (1 trial each) to the cap of {cap}; 0 when best stays the seed (docs/final-answer.md)"
        )),
        row("baseline", [base, base], trial_usd([base, base]), "seed trials of the matched-budget baseline ([evolve] baseline)".into()),
    ];
    let all_trials: usize = out.iter().map(|e| e.trials[1]).sum();
    let judge = match (m, p.judge_call) {
        (Some(m), _) if m.judge_per_trial.input > 0.0 => {
            let c = m.judge_per_trial.priced(cfg, "judge");
            Some([all_trials as f64 * c; 2])
        }
        (_, Some(c)) => Some([0.0, all_trials as f64 * c]),
        _ => None,
    };
    if cfg.judge_model().is_some() {
        out.push(row(
            "judge",
            [0, 0],
            judge,
            format!("one call per passing trial, at most {all_trials}"),
        ));
    }
    out.extend(agent_rows(cfg, m));
    out
}

/// The debugger, overview and evolve agents: per iteration, measured or unknown.
fn agent_rows(cfg: &RunConfig, m: Option<&Measured>) -> Vec<PhaseEstimate> {
    let n = cfg.iterations as usize;
    let agents = [
        ("debugger", "one per visible task"),
        ("overview", "one"),
        ("evolve", "one"),
    ];
    let mut out = Vec::new();
    for (i, (phase, what)) in agents.into_iter().enumerate() {
        let usd = m.map(|m| [m.per_iteration[i].priced(cfg, phase) * n as f64; 2]);
        let basis = match m {
            Some(m) => format!(
                "{what} per iteration × {n}; {:.0} in / {:.0} out tokens per iteration measured over {}",
                m.per_iteration[i].input, m.per_iteration[i].output, m.iterations
            ),
            None => format!(
                "{what} per iteration × {n}; unknown until a run measures it (--from-run)"
            ),
        };
        out.push(row(phase, [0, 0], usd, basis));
    }
    out
}

fn row(
    phase: &'static str,
    trials: [usize; 2],
    usd: Option<[f64; 2]>,
    basis: String,
) -> PhaseEstimate {
    PhaseEstimate {
        phase,
        trials,
        usd,
        basis,
    }
}

/// The estimate as text lines, and the total of what is known.
pub fn text(rows: &[PhaseEstimate]) -> String {
    let mut s = String::from("estimate by phase (trials; dollars):\n");
    for r in rows {
        let trials = match r.trials {
            [0, 0] => String::new(),
            [a, b] if a == b => format!("{a} trials"),
            [a, b] => format!("{a}–{b} trials"),
        };
        let usd = match r.usd {
            Some([a, b]) if (a - b).abs() < 1e-9 => format!("${a:.2}"),
            Some([a, b]) => format!("${a:.2}–${b:.2}"),
            None => "$?".into(),
        };
        s.push_str(&format!(
            "  {:<19} {:>16} {:>20}  {}\n",
            r.phase, trials, usd, r.basis
        ));
    }
    let lo: f64 = rows.iter().filter_map(|r| r.usd).map(|u| u[0]).sum();
    let hi: f64 = rows.iter().filter_map(|r| r.usd).map(|u| u[1]).sum();
    let trials: usize = rows.iter().map(|r| r.trials[1]).sum();
    let unknown: Vec<&str> = rows
        .iter()
        .filter(|r| r.usd.is_none())
        .map(|r| r.phase)
        .collect();
    s.push_str(&format!(
        "  {:<19} {:>16} {:>20}  {}\n",
        "total",
        format!("≤ {trials} trials"),
        format!("${lo:.2}–${hi:.2}"),
        match unknown.is_empty() {
            true => "every phase priced".to_string(),
            false => format!("without {}", unknown.join(", ")),
        }
    ));
    s
}
