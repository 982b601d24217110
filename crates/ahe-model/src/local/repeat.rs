//! A DRY-style repetition penalty ("don't repeat yourself", p-e-w) for the local model's
//! reply: a token that would extend a sequence already repeated within the reply loses
//! logit, growing exponentially with the length of the repeat. Greedy decoding of small
//! models otherwise loops inside JSON strings (`"cant_use_cant_use_…"`) until the token cap.
//! Deterministic, so temperature 0 stays reproducible.

/// Repeats shorter than this are free.
const ALLOWED: usize = 2;
/// Penalty of a repeat of exactly `ALLOWED` tokens.
const MULTIPLIER: f32 = 0.8;
/// Growth of the penalty per extra repeated token.
const BASE: f32 = 1.75;
/// Largest penalty.
const MAX_PENALTY: f32 = 40.0;
/// How far back in the reply repeats are looked for.
const WINDOW: usize = 256;

/// Logit penalties (token, amount) for the next token after `reply` (the reply's tokens).
pub fn penalties(reply: &[i32]) -> Vec<(i32, f32)> {
    let n = reply.len();
    let mut out: Vec<(i32, f32)> = Vec::new();
    if n < ALLOWED {
        return out;
    }
    for i in n.saturating_sub(WINDOW).max(1)..n {
        // Length of the common suffix of reply[..i] and reply[..n].
        let k = (0..i)
            .take_while(|&j| reply[i - 1 - j] == reply[n - 1 - j])
            .count();
        if k < ALLOWED {
            continue;
        }
        let p = (MULTIPLIER * BASE.powi((k - ALLOWED) as i32)).min(MAX_PENALTY);
        match out.iter_mut().find(|(t, _)| *t == reply[i]) {
            Some((_, q)) => *q = q.max(p),
            None => out.push((reply[i], p)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeats_are_penalized_more_the_longer_they_run() {
        assert!(penalties(&[1, 2, 3, 4]).is_empty());
        // "a b c a b" -> continuing with "c" repeats "a b c".
        let p = penalties(&[1, 2, 3, 1, 2]);
        assert_eq!(p, vec![(3, MULTIPLIER)]);
        let long = penalties(&[7, 1, 2, 3, 4, 9, 1, 2, 3, 4]);
        assert_eq!(long.len(), 1);
        assert_eq!(long[0].0, 9);
        assert!(long[0].1 > 2.0, "{long:?}");
        let capped = penalties(&[5; 200]);
        assert_eq!(capped, vec![(5, MAX_PENALTY)]);
    }
}
