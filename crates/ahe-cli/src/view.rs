//! `ahe view [DIR…]`: a local, read-only web server over run, evaluation and matrix
//! directories (default `runs/`): a list of them, each one's report page (the page `ahe
//! report` writes, rendered from the same view model) kept live while the run goes, trial
//! pages, and the files the report links to. Binds 127.0.0.1 unless `--host` says
//! otherwise; serves nothing outside the directories given.

mod live;
mod pages;
mod server;
mod site;

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

use clap::Args;

use crate::CliError;

/// Arguments of `ahe view`.
#[derive(Args)]
pub struct ViewArgs {
    /// Run, evaluation or matrix directories, or folders of them (default: runs/).
    dirs: Vec<PathBuf>,
    /// Address to bind. The default, 127.0.0.1, is reachable from this machine only (use an
    /// SSH tunnel from elsewhere: docs/view.md); another address serves the runs, without
    /// authentication, to whoever can reach it.
    #[arg(long, default_value = "127.0.0.1")]
    host: IpAddr,
    /// Port (default 0: a free port, printed).
    #[arg(long, default_value_t = 0)]
    port: u16,
}

/// Runs `ahe view` until interrupted (Ctrl-C).
pub fn run(a: ViewArgs) -> Result<(), CliError> {
    let dirs = if a.dirs.is_empty() {
        vec![PathBuf::from("runs")]
    } else {
        a.dirs
    };
    let site = site::Site::new(&dirs).map_err(CliError::usage)?;
    let rt = tokio::runtime::Runtime::new().map_err(CliError::failed)?;
    rt.block_on(serve(site, SocketAddr::new(a.host, a.port)))
}

async fn serve(site: site::Site, addr: SocketAddr) -> Result<(), CliError> {
    let listener = tokio::net::TcpListener::bind(addr).await.map_err(|e| {
        CliError::usage(anyhow::anyhow!(
            "cannot listen on {addr}: {e} (choose another --port, or 0 for a free one)"
        ))
    })?;
    let local = listener.local_addr().map_err(CliError::failed)?;
    let n = site.entries().len();
    {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "ahe view: http://{local}/");
        let _ = writeln!(
            out,
            "serving {n} run, evaluation or matrix director{} from {} (read-only; Ctrl-C stops)",
            if n == 1 { "y" } else { "ies" },
            site.roots
                .iter()
                .map(|r| r.label.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        );
        let _ = out.flush();
    }
    if !local.ip().is_loopback() {
        eprintln!(
            "warning: {local} is not a loopback address: anyone who can reach it can read these runs (no authentication)"
        );
    }
    let app = server::app(site);
    let w = app.clone();
    tokio::task::spawn_blocking(move || server::warm(&w));
    axum::serve(listener, server::router(app))
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await
        .map_err(CliError::failed)
}
