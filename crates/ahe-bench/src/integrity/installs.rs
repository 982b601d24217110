//! Files a package manager installed in a phase with exactly the content its records name
//! (pip's `RECORD`, dpkg's `md5sums`, both from the same phase): installs, not tampering.
//!
//! A record counts only as part of the whole an install writes: pip writes a `RECORD` with
//! its dist-info's `METADATA` (a new version's dist-info, or the same one made again by a
//! reinstall), dpkg its `md5sums` with its `status` database. A `RECORD` or `md5sums`
//! rewritten alone — a hack editing an image's package in place and the record to match —
//! vouches for nothing.

use std::collections::HashMap;

use super::read_head;
use crate::changes::{Changed, Kind};

/// dpkg's database of installed packages, which every install and upgrade rewrites.
const DPKG_STATUS: &str = "/var/lib/dpkg/status";

/// Files a package manager installed in the phase, with the content its records name.
pub(super) struct Installs {
    /// pip: path → sha256 (urlsafe base64, no padding), from `*.dist-info/RECORD`.
    pub(super) pip: HashMap<String, String>,
    /// dpkg: path → md5 (hex), from `/var/lib/dpkg/info/*.md5sums`.
    pub(super) dpkg: HashMap<String, String>,
}

impl Installs {
    pub(super) fn of(changed: &[Changed]) -> Installs {
        let mut i = Installs {
            pip: HashMap::new(),
            dpkg: HashMap::new(),
        };
        let written: std::collections::HashSet<&str> = (changed.iter())
            .filter(|c| c.kind == Kind::File)
            .map(|c| c.path.as_str())
            .collect();
        let dpkg_status = written.contains(DPKG_STATUS);
        for c in changed.iter().filter(|c| c.kind == Kind::File) {
            let metadata = || written.contains(format!("{}/METADATA", c.dir()).as_str());
            if c.name() == "RECORD" && c.dir().ends_with(".dist-info") && metadata() {
                let site = c.dir().rsplit_once('/').map_or("/", |(s, _)| s);
                for line in read_head(c, 16 << 20).lines() {
                    let mut f = line.rsplitn(3, ',');
                    let (_, hash, path) = (f.next(), f.next(), f.next());
                    if let (Some(h), Some(p)) = (hash, path) {
                        if let Some(h) = h.strip_prefix("sha256=") {
                            i.pip.insert(normalize(&format!("{site}/{p}")), h.into());
                        }
                    }
                }
            } else if c.dir() == "/var/lib/dpkg/info"
                && c.name().ends_with(".md5sums")
                && dpkg_status
            {
                for line in read_head(c, 16 << 20).lines() {
                    if let Some((h, p)) = line.split_once("  ") {
                        i.dpkg.insert(format!("/{}", p.trim()), h.into());
                    }
                }
            }
        }
        i
    }

    /// Whether `c` is a file with the content a record of the phase names.
    pub(super) fn installed(&self, c: &Changed) -> bool {
        use base64::Engine;
        use sha2::Digest;
        if c.kind != Kind::File {
            return false;
        }
        let content = || std::fs::read(&c.host).ok();
        if let Some(want) = self.pip.get(&c.path) {
            if let Some(b) = content() {
                let got = base64::engine::general_purpose::URL_SAFE_NO_PAD
                    .encode(sha2::Sha256::digest(&b));
                return &got == want;
            }
        }
        if let Some(want) = self.dpkg.get(&c.path) {
            if let Some(b) = content() {
                let got = md5::Md5::digest(&b);
                let hex: String = got.iter().map(|x| format!("{x:02x}")).collect();
                return &hex == want;
            }
        }
        false
    }
}

/// Resolves `.` and `..` lexically in an absolute path (a path with neither, nor an empty
/// segment, as most of a RECORD's are, is returned as it is).
fn normalize(p: &str) -> String {
    let plain = |s: &str| !matches!(s, "" | "." | "..");
    if p.starts_with('/') && p[1..].split('/').all(plain) {
        return p.to_string();
    }
    let mut parts: Vec<&str> = Vec::new();
    for seg in p.split('/') {
        match seg {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            s => parts.push(s),
        }
    }
    format!("/{}", parts.join("/"))
}
