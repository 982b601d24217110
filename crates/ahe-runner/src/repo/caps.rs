//! What a harness commit may hold: no git metadata and files within the size caps
//! (`[evolve] max_file_bytes`, `max_harness_bytes`). The repository's guard enforces them
//! before a commit; the evolve agent's write jail (`ahe-evolve`) refuses writes that break them.

use crate::config::EvolveConfig;

/// The file names that steer git (ignore rules, attributes, submodules): never written.
pub const GIT_FILES: [&str; 3] = [".gitignore", ".gitattributes", ".gitmodules"];

/// Whether a root-relative path is git metadata: a `.git` component anywhere (a nested
/// repository or its config) or a file of [`GIT_FILES`] (case-insensitive, as git on a
/// case-insensitive file system would read them).
pub fn is_git_meta(rel: &str) -> bool {
    rel.split('/').any(|c| {
        c.eq_ignore_ascii_case(".git") || GIT_FILES.iter().any(|g| c.eq_ignore_ascii_case(g))
    })
}

/// Size limits of a writable root (`[evolve] max_file_bytes`, `max_harness_bytes`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteCaps {
    /// Largest file a write may leave.
    pub max_file_bytes: u64,
    /// Largest total of all files under the root (its `.git` excluded).
    pub max_total_bytes: u64,
}

impl WriteCaps {
    /// The caps a run config sets for the harness.
    pub fn of(cfg: &EvolveConfig) -> WriteCaps {
        WriteCaps {
            max_file_bytes: cfg.max_file_bytes,
            max_total_bytes: cfg.max_harness_bytes,
        }
    }
}
