//! Registry credentials from the Docker client config (`$DOCKER_CONFIG/config.json`, else
//! `~/.docker/config.json`), `auths` entries only (`auth` = base64 `user:password`, or
//! `username`/`password`, or `identitytoken`). Credential helpers (`credsStore`,
//! `credHelpers`) are not run: such a registry is pulled anonymously, with a warning.
//!
//! Credentials go to the engine in the `X-Registry-Auth` header and nowhere else: no error,
//! log line, trace or file of ahe contains them ([`Credentials`] has no `Debug` that shows
//! them).

use std::collections::HashMap;
use std::path::PathBuf;

use base64::Engine as _;
use bollard::auth::DockerCredentials;
use serde::Deserialize;

/// The key Docker Hub's credentials are stored under.
pub const DOCKER_HUB_KEY: &str = "https://index.docker.io/v1/";

/// Credentials for one registry (kept out of every message: `Debug` prints the server only).
#[derive(Clone)]
pub struct Credentials(DockerCredentials);

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Credentials({})",
            self.0.serveraddress.as_deref().unwrap_or("?")
        )
    }
}

impl Credentials {
    /// What bollard sends to the engine.
    pub(crate) fn into_docker(self) -> DockerCredentials {
        self.0
    }
}

#[derive(Deserialize, Default)]
struct ConfigFile {
    #[serde(default)]
    auths: HashMap<String, AuthEntry>,
    #[serde(default, rename = "credsStore")]
    creds_store: Option<String>,
    #[serde(default, rename = "credHelpers")]
    cred_helpers: HashMap<String, String>,
}

#[derive(Deserialize, Default)]
struct AuthEntry {
    #[serde(default)]
    auth: Option<String>,
    #[serde(default)]
    username: Option<String>,
    #[serde(default)]
    password: Option<String>,
    #[serde(default)]
    identitytoken: Option<String>,
}

/// The Docker client config file: `$DOCKER_CONFIG/config.json`, else `~/.docker/config.json`.
pub fn config_path() -> Option<PathBuf> {
    if let Some(d) = std::env::var_os("DOCKER_CONFIG").filter(|d| !d.is_empty()) {
        return Some(PathBuf::from(d).join("config.json"));
    }
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(|h| PathBuf::from(h).join(".docker/config.json"))
}

/// The registry host an image is pulled from (`docker.io` for Docker Hub names).
pub fn registry_of(image: &str) -> String {
    match image.split_once('/') {
        Some((first, _)) if first.contains('.') || first.contains(':') || first == "localhost" => {
            first.to_string()
        }
        _ => "docker.io".to_string(),
    }
}

/// A config key as a bare host (`https://index.docker.io/v1/` → `index.docker.io`).
fn key_host(key: &str) -> &str {
    let k = key
        .strip_prefix("https://")
        .or_else(|| key.strip_prefix("http://"))
        .unwrap_or(key);
    k.split('/').next().unwrap_or(k)
}

/// Whether a config key names `registry`.
fn key_matches(key: &str, registry: &str) -> bool {
    let host = key_host(key);
    if registry == "docker.io" {
        matches!(
            host,
            "docker.io" | "index.docker.io" | "registry-1.docker.io"
        )
    } else {
        host == registry
    }
}

/// The credentials the Docker client config holds for the registry of `image`, if any.
/// An unreadable or malformed config is warned about (by path, never by content) and ignored.
pub fn credentials_for(image: &str) -> Option<Credentials> {
    let path = config_path()?;
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => {
            tracing::warn!("docker: cannot read {}: {e}", path.display());
            return None;
        }
    };
    let cfg: ConfigFile = match serde_json::from_str(&text) {
        Ok(c) => c,
        Err(e) => {
            // serde_json's message names a line and column, not the content.
            tracing::warn!(
                "docker: {} is not valid JSON ({e}); pulling anonymously",
                path.display()
            );
            return None;
        }
    };
    let registry = registry_of(image);
    let Some((key, entry)) = cfg.auths.iter().find(|(k, _)| key_matches(k, &registry)) else {
        if cfg.creds_store.is_some() || cfg.cred_helpers.keys().any(|k| key_matches(k, &registry)) {
            tracing::warn!(
                "docker: {} names a credential helper for {registry}; ahe reads only `auths` entries, so {image} is pulled anonymously (`docker pull {image}` uses the helper)",
                path.display()
            );
        }
        return None;
    };
    let mut c = DockerCredentials {
        serveraddress: Some(key.clone()),
        ..Default::default()
    };
    if let Some(a) = entry.auth.as_deref().filter(|a| !a.is_empty()) {
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(a.trim())
            .ok()
            .and_then(|b| String::from_utf8(b).ok());
        match decoded.as_deref().and_then(|d| d.split_once(':')) {
            Some((u, p)) => {
                c.username = Some(u.to_string());
                c.password = Some(p.to_string());
            }
            None => {
                tracing::warn!(
                    "docker: {}: auths.{key:?}.auth is not base64 of user:password; ignored",
                    path.display()
                );
                return None;
            }
        }
    } else {
        c.username = entry.username.clone();
        c.password = entry.password.clone();
    }
    c.identitytoken = entry.identitytoken.clone().filter(|t| !t.is_empty());
    if c.username.is_none() && c.identitytoken.is_none() {
        return None;
    }
    Some(Credentials(c))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registries_and_keys() {
        assert_eq!(registry_of("alexgshaw/regex-log:20251031"), "docker.io");
        assert_eq!(registry_of("python:3.13-slim-bookworm"), "docker.io");
        assert_eq!(registry_of("127.0.0.1:5000/a/b:1"), "127.0.0.1:5000");
        assert_eq!(registry_of("ghcr.io/x/y:2.0"), "ghcr.io");
        assert_eq!(registry_of("localhost/y"), "localhost");
        assert!(key_matches(DOCKER_HUB_KEY, "docker.io"));
        assert!(key_matches("http://127.0.0.1:5000/v2/", "127.0.0.1:5000"));
        assert!(!key_matches("127.0.0.1:5001", "127.0.0.1:5000"));
    }

    #[test]
    fn credentials_from_config_and_no_secret_in_debug() {
        let d = tempfile::tempdir().unwrap();
        let auth = base64::engine::general_purpose::STANDARD.encode("alice:s3cr3t-pw");
        std::fs::write(
            d.path().join("config.json"),
            format!(r#"{{"auths":{{"127.0.0.1:5999":{{"auth":"{auth}"}},"ghcr.io":{{"username":"bob","password":"pw2"}}}}}}"#),
        )
        .unwrap();
        // Only this test sets DOCKER_CONFIG in this test binary.
        std::env::set_var("DOCKER_CONFIG", d.path());
        let c = credentials_for("127.0.0.1:5999/t/x:1").expect("creds");
        assert!(!format!("{c:?}").contains("s3cr3t"), "{c:?}");
        let dc = c.into_docker();
        assert_eq!(dc.username.as_deref(), Some("alice"));
        assert_eq!(dc.password.as_deref(), Some("s3cr3t-pw"));
        let g = credentials_for("ghcr.io/x/y:2").unwrap().into_docker();
        assert_eq!(
            (g.username.as_deref(), g.password.as_deref()),
            (Some("bob"), Some("pw2"))
        );
        assert!(credentials_for("alexgshaw/x:1").is_none());
        std::env::remove_var("DOCKER_CONFIG");
    }
}
