//! Numbers as the reports print them: scores, intervals, dollars, tokens, durations.

/// `0.333`.
pub fn f3(v: f64) -> String {
    format!("{v:.3}")
}

/// `0.000–1.000`.
pub fn ci(c: [f64; 2]) -> String {
    format!("{:.3}–{:.3}", c[0], c[1])
}

/// Dollars with enough digits for small sums.
pub fn usd(v: f64) -> String {
    if v == 0.0 {
        "$0".into()
    } else if v.abs() < 1.0 {
        format!("${v:.4}")
    } else {
        format!("${v:.2}")
    }
}

/// `950`, `12.3k`, `4.5M`.
pub fn tokens(n: u64) -> String {
    match n {
        0..=9_999 => n.to_string(),
        10_000..=999_999 => format!("{:.1}k", n as f64 / 1e3),
        _ => format!("{:.1}M", n as f64 / 1e6),
    }
}

/// `0.91 s`, `12.3 s`, `3 m 20 s`, `2 h 05 m`.
pub fn secs(v: f64) -> String {
    if v < 10.0 {
        format!("{v:.2} s")
    } else if v < 60.0 {
        format!("{v:.1} s")
    } else if v < 3600.0 {
        format!("{} m {:02} s", (v / 60.0) as u64, (v % 60.0) as u64)
    } else {
        format!(
            "{} h {:02} m",
            (v / 3600.0) as u64,
            ((v % 3600.0) / 60.0) as u64
        )
    }
}
