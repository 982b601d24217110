//! The sandbox's writable layer as the host sees it: where the files a sandbox created or
//! changed live on the host, and where the image below them is. Reward-integrity checks read
//! it from the host (no exec, nothing a process in the sandbox can intercept).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Host directories holding a sandbox's file system, for change detection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layer {
    /// Each writable part: (sandbox path it is mounted at, host directory). Docker's overlay2
    /// has one (`/`, the container's upper dir); the local backend one per writable top dir.
    pub upper: Vec<(String, PathBuf)>,
    /// Host directories the image's files are found in, searched in order (a sandbox path
    /// `/a/b` is `dir/a/b`): overlay2's lower dirs; for the local backend `/`.
    pub lower: Vec<PathBuf>,
    /// When set, only these top-level names are looked up in `lower` (the local backend binds
    /// some of the host's top dirs read-only, not all of it).
    pub lower_tops: Option<Vec<String>>,
    /// Whether `upper` holds overlay whiteouts (character devices 0:0 for deleted files).
    pub overlay: bool,
    /// The `PATH` commands in the sandbox run with.
    pub path_env: String,
    /// The image's paths when its files are not on this host (a change set taken inside the
    /// sandbox): [`Layer::image_file`] answers from them, and names a copy in `lower[0]`
    /// (which holds the few image files the checks read, e.g. the loader's cache).
    pub image_paths: Option<Arc<BTreeSet<String>>>,
}

impl Layer {
    /// The host path of the image's file at sandbox path `p` (absolute), when the image has it.
    pub fn image_file(&self, p: &str) -> Option<PathBuf> {
        let rel = p.trim_start_matches('/');
        if let Some(paths) = &self.image_paths {
            let dir = self.lower.first()?;
            return paths.contains(p).then(|| dir.join(rel));
        }
        if let Some(tops) = &self.lower_tops {
            let top = rel.split('/').next().unwrap_or("");
            if !tops.iter().any(|t| t == top) {
                return None;
            }
        }
        self.lower
            .iter()
            .map(|d| d.join(rel))
            .find(|h| std::fs::symlink_metadata(h).is_ok())
    }

    /// Names in the image's directory `dir` (across its layers).
    pub fn image_names(&self, dir: &str) -> Vec<String> {
        let rel = dir.trim_start_matches('/');
        if let Some(paths) = &self.image_paths {
            let prefix = format!("{}/", dir.trim_end_matches('/'));
            return (paths.range(prefix.clone()..))
                .take_while(|p| p.starts_with(&prefix))
                .map(|p| &p[prefix.len()..])
                .filter(|n| !n.contains('/'))
                .map(String::from)
                .collect();
        }
        if let Some(tops) = &self.lower_tops {
            let top = rel.split('/').next().unwrap_or("");
            if !tops.iter().any(|t| t == top) {
                return Vec::new();
            }
        }
        let mut out = Vec::new();
        for l in &self.lower {
            if let Ok(rd) = std::fs::read_dir(l.join(rel)) {
                out.extend(
                    rd.flatten()
                        .map(|e| e.file_name().to_string_lossy().into_owned()),
                );
            }
        }
        out
    }

    /// The host path of sandbox path `p` in the writable layer (it may not exist).
    pub fn upper_file(&self, p: &str) -> Option<PathBuf> {
        self.upper.iter().find_map(|(mount, host)| {
            let m = mount.trim_end_matches('/');
            let rest = p.strip_prefix(m)?;
            if !(rest.is_empty() || rest.starts_with('/')) {
                return None;
            }
            Some(host.join(rest.trim_start_matches('/')))
        })
    }

    /// The file at sandbox path `p` as the sandbox sees it: the writable layer's copy, else
    /// the image's (an overlay whiteout hides the image's).
    pub fn visible_file(&self, p: &str) -> Option<PathBuf> {
        if let Some(u) = self.upper_file(p) {
            if let Ok(md) = std::fs::symlink_metadata(&u) {
                return (!is_whiteout(&md)).then_some(u);
            }
        }
        self.image_file(p)
    }

    /// Whether every host dir of the layer can be read by this process.
    pub fn readable(&self) -> bool {
        self.upper.iter().all(|(_, h)| readable_dir(h))
            && self.lower.iter().all(|h| readable_dir(h))
    }
}

/// Whether `md` is an overlay whiteout (a character device numbered 0:0).
pub fn is_whiteout(md: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    md.file_type().is_char_device() && md.rdev() == 0
}

fn readable_dir(p: &Path) -> bool {
    std::fs::read_dir(p).is_ok()
}
