use super::*;

fn p(usd: f64, tokens: u64, trials: u32) -> PhaseSpend {
    PhaseSpend {
        usd,
        tokens,
        output_tokens: tokens / 10,
        trials,
    }
}

#[test]
fn the_machinery_share_leaves_rollouts_and_baseline_out() {
    let mut row = [PhaseSpend::default(); 9];
    row[0] = p(6.0, 0, 178); // rollouts
    row[1] = p(1.0, 0, 30); // attribution extras
    row[2] = p(1.0, 0, 178); // final
    row[3] = p(50.0, 0, 356); // baseline: not in the share
    row[5] = p(2.0, 0, 0); // debugger
    let s = Spend {
        usd: true,
        rows: vec![("1".into(), row)],
        total: row,
    };
    assert!((s.share(&row).unwrap() - 0.4).abs() < 1e-12);
    assert_eq!(s.share_cell(&row), "40.0%");
    assert_eq!(s.cell(&row[0]), "$6.00 · 178 trials");
    assert_eq!(s.cell(&row[4]), "–");
    let line = s.total_line();
    assert!(line.contains("rollouts $6.00 · 178 trials"), "{line}");
    assert!(line.contains("baseline $50.00 · 356 trials"), "{line}");
    assert!(!line.contains("judge $"), "nothing spent on it: {line}");
    assert!(line.contains("took 40.0% of the run's dollars"), "{line}");
}

#[test]
fn without_prices_the_share_is_of_tokens() {
    let mut row = [PhaseSpend::default(); 9];
    row[0] = p(0.0, 30_000, 12);
    row[7] = p(0.0, 10_000, 0); // evolve
    let s = Spend {
        usd: false,
        rows: vec![],
        total: row,
    };
    assert_eq!(s.share_cell(&row), "25.0%");
    assert_eq!(s.cell(&row[7]), "10.0k tok");
    assert_eq!(s.share(&[PhaseSpend::default(); 9]), None);
    assert!(machinery(1) && machinery(2) && !machinery(0) && !machinery(3));
}
