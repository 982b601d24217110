//! The stand-ins' prompt caches: OpenAI's automatic prefix cache and Anthropic's
//! breakpoint cache, over token counts of 4 characters a token.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

/// Tokens of a text as the stand-ins count them (4 characters a token, rounded up).
pub fn tokens(s: &str) -> u64 {
    (s.chars().count() as u64).div_ceil(4)
}

/// Shortest prefix OpenAI caches, in tokens.
pub const OPENAI_MIN_TOKENS: u64 = 1024;
/// OpenAI caches prefixes in steps of this many tokens past the minimum.
pub const OPENAI_STEP_TOKENS: u64 = 128;
/// How far before a breakpoint Anthropic looks for an earlier cached prefix, in blocks.
pub const LOOKBACK_BLOCKS: usize = 20;

/// One block of an Anthropic prompt, in prompt order (tools, system, messages).
#[derive(Debug, Clone)]
pub struct Block {
    /// Canonical text of the block (its `cache_control` left out).
    pub text: String,
    /// Whether the block carries `cache_control`, and its lifetime.
    pub breakpoint: Option<Duration>,
}

/// What a request's prompt cost, split the way the APIs report it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheUse {
    /// All prompt tokens.
    pub total: u64,
    /// Read from the cache.
    pub read: u64,
    /// Written to the cache.
    pub write: u64,
}

/// Cached prefixes by hash, with their expiry.
#[derive(Debug, Default)]
pub struct PrefixCache {
    entries: HashMap<[u8; 32], Instant>,
}

impl PrefixCache {
    fn live(&mut self, h: &[u8; 32], now: Instant) -> bool {
        matches!(self.entries.get(h), Some(exp) if *exp > now)
    }

    /// OpenAI: the cached part of `prompt` (the longest earlier-seen prefix of at least
    /// 1024 tokens, in 128-token steps); every step of this prompt is cached afterwards.
    pub fn openai(&mut self, prompt: &str) -> CacheUse {
        let now = Instant::now();
        let total = tokens(prompt);
        let step_chars = (OPENAI_STEP_TOKENS * 4) as usize;
        let mut hasher = Sha256::new();
        let mut last = 0usize;
        let mut read = 0;
        let mut seen = Vec::new();
        for (n, (i, _)) in prompt.char_indices().enumerate() {
            if n > 0 && n % step_chars == 0 {
                hasher.update(&prompt.as_bytes()[last..i]);
                last = i;
                let toks = (n / 4) as u64;
                if toks >= OPENAI_MIN_TOKENS {
                    let h: [u8; 32] = hasher.clone().finalize().into();
                    if self.live(&h, now) {
                        read = toks;
                    }
                    seen.push(h);
                }
            }
        }
        for h in seen {
            self.entries.insert(h, now + Duration::from_secs(600));
        }
        CacheUse {
            total,
            read,
            write: 0,
        }
    }

    /// Anthropic: reads the longest earlier-written prefix ending within 20 blocks before a
    /// breakpoint, writes the prefix up to each breakpoint of at least `min_tokens`.
    pub fn anthropic(&mut self, blocks: &[Block], min_tokens: u64) -> CacheUse {
        let now = Instant::now();
        let mut hasher = Sha256::new();
        let mut cum = Vec::with_capacity(blocks.len());
        let mut hashes = Vec::with_capacity(blocks.len());
        let mut toks = 0;
        for b in blocks {
            hasher.update((b.text.len() as u64).to_le_bytes());
            hasher.update(b.text.as_bytes());
            toks += tokens(&b.text);
            cum.push(toks);
            let h: [u8; 32] = hasher.clone().finalize().into();
            hashes.push(h);
        }
        let bps: Vec<usize> = (0..blocks.len())
            .filter(|&i| blocks[i].breakpoint.is_some())
            .collect();
        let mut read = 0;
        let mut read_at = None;
        for &b in &bps {
            for j in (b.saturating_sub(LOOKBACK_BLOCKS)..=b).rev() {
                if cum[j] >= min_tokens && self.live(&hashes[j], now) {
                    if cum[j] > read {
                        read = cum[j];
                        read_at = Some((j, b));
                    }
                    break;
                }
            }
        }
        if let Some((j, b)) = read_at {
            let ttl = blocks[b].breakpoint.unwrap_or(Duration::from_secs(300));
            self.entries.insert(hashes[j], now + ttl);
        }
        let mut write = 0;
        if let Some(&last) = bps.last() {
            if cum[last] >= min_tokens && cum[last] > read {
                write = cum[last] - read;
            }
        }
        for &b in &bps {
            if cum[b] >= min_tokens {
                let ttl = blocks[b].breakpoint.unwrap_or(Duration::from_secs(300));
                self.entries.insert(hashes[b], now + ttl);
            }
        }
        CacheUse {
            total: toks,
            read,
            write,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openai_prefix_cache_in_steps_from_1024_tokens() {
        let mut c = PrefixCache::default();
        let base = "x".repeat(4 * 1500);
        assert_eq!(c.openai(&base).read, 0);
        let longer = format!("{base}{}", "y".repeat(4 * 500));
        let u = c.openai(&longer);
        // 1500 tokens were seen: the longest 128-step boundary within them is 1408.
        assert_eq!((u.total, u.read), (2000, 1408));
        assert_eq!(c.openai(&"z".repeat(4 * 900)).read, 0);
        let mut short = PrefixCache::default();
        short.openai(&"q".repeat(4 * 1000));
        assert_eq!(
            short.openai(&"q".repeat(4 * 1100)).read,
            0,
            "under 1024: never cached"
        );
    }

    fn blk(text: &str, bp: bool) -> Block {
        Block {
            text: text.to_string(),
            breakpoint: bp.then(|| Duration::from_secs(300)),
        }
    }

    #[test]
    fn anthropic_reads_what_an_earlier_breakpoint_wrote() {
        let mut c = PrefixCache::default();
        let sys = "s".repeat(4 * 2000);
        let t1 = "a".repeat(4 * 300);
        let t2 = "b".repeat(4 * 300);
        let first = vec![blk(&sys, true), blk(&t1, true)];
        let u = c.anthropic(&first, 1024);
        assert_eq!((u.total, u.read, u.write), (2300, 0, 2300));
        let second = vec![blk(&sys, true), blk(&t1, false), blk(&t2, true)];
        let u = c.anthropic(&second, 1024);
        assert_eq!((u.total, u.read, u.write), (2600, 2300, 300));
        // No breakpoints: nothing read, nothing written.
        let u = c.anthropic(&[blk(&sys, false), blk(&t1, false)], 1024);
        assert_eq!((u.read, u.write), (0, 0));
        // A changed early block invalidates everything after it.
        let u = c.anthropic(&[blk("other", true), blk(&t1, false), blk(&t2, true)], 1024);
        assert_eq!(u.read, 0);
        // Below the minimum nothing is cached.
        let mut small = PrefixCache::default();
        small.anthropic(&[blk("tiny", true)], 1024);
        assert_eq!(small.anthropic(&[blk("tiny", true)], 1024).read, 0);
    }
}
