//! `put`/`get` through the keeper: `tar` inside the container, the archive carried in the
//! request (base64) or the output. A fork in the container costs ≈10 ms where the engine's
//! archive API re-executes dockerd (≈100 ms on a 2-core VM). Every failure (no `tar` or
//! `base64` in the image, a busy keeper, a large archive, an error) makes the caller use the
//! archive API instead, which has the same semantics.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bollard::Docker;

use super::exec::ExecRequest;
use super::keeper::{quote, Keeper};

/// Archives larger than this (before base64) go through the archive API.
const MAX_PUT: usize = 20 << 10;

/// Time limit of one keeper transfer.
const TRANSFER_TIMEOUT: Duration = Duration::from_secs(120);

/// The keeper of one container plus what it lacks.
pub(crate) struct Transfer<'a> {
    /// The keeper.
    pub keeper: &'a Keeper,
    /// The engine.
    pub docker: &'a Docker,
    /// The container id.
    pub container: &'a str,
    /// Set once the image turned out to lack `tar` or `base64`.
    pub unavailable: &'a AtomicBool,
}

impl Transfer<'_> {
    /// Runs a shell command through the keeper; its stdout bytes when it exited 0.
    async fn run(&self, command: String) -> Option<Vec<u8>> {
        if self.unavailable.load(Ordering::Relaxed) {
            return None;
        }
        let req = ExecRequest {
            argv: vec!["bash".into(), "-c".into(), command],
            cwd: "/".into(),
            env: Vec::new(),
            stdin: None,
            timeout: Some(TRANSFER_TIMEOUT),
            user: None,
        };
        let out = self
            .keeper
            .try_exec_raw(self.docker, self.container, &req)
            .await?
            .ok()?;
        if out.exit_code == Some(127) {
            self.unavailable.store(true, Ordering::Relaxed);
        }
        if out.exit_code != Some(0) || out.timed_out {
            return None;
        }
        let (bytes, dropped) = out.stdout.into_parts();
        (dropped == 0).then_some(bytes)
    }

    /// A tar of `src_abs` (top entry = its base name), like `GET /archive`.
    pub async fn get(&self, src_abs: &str) -> Option<Vec<u8>> {
        let (parent, base) = src_abs.rsplit_once('/')?;
        if base.is_empty() || base == "." || base == ".." {
            return None;
        }
        let parent = if parent.is_empty() { "/" } else { parent };
        self.run(format!(
            "exec tar -C {} -cf - -- {}",
            quote(parent),
            quote(base)
        ))
        .await
    }

    /// Extracts `tar` (paths relative to `/`) at `/`, like `PUT /archive?path=/` as root.
    pub async fn put(&self, tar: &[u8]) -> bool {
        if tar.len() > MAX_PUT {
            return false;
        }
        self.run(format!(
            "set -o pipefail; printf %s {} | base64 -d | tar -xf - -C /",
            base64(tar)
        ))
        .await
        .is_some()
    }
}

/// Standard base64 with padding.
pub(crate) fn base64(data: &[u8]) -> String {
    const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for (i, shift) in [18, 12, 6, 0].into_iter().enumerate() {
            if i <= chunk.len() {
                out.push(ABC[((n >> shift) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_the_rfc_vectors() {
        for (input, want) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(input.as_bytes()), want);
        }
        assert_eq!(base64(&[0, 255, 128]), "AP+A");
    }
}
