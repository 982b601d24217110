//! The files of one exec: its output FIFOs (made, captured, poked awake) and its stdin file.

use std::ffi::CString;
use std::future::Future;
use std::path::{Path, PathBuf};

use tokio::net::unix::pipe;
use tokio::sync::{oneshot, watch};

use super::super::owner::Owner;
use super::super::process::{self, Captured};
use super::{backend, EXEC_DIR};
use crate::Result;

/// Reads a FIFO in a task (capped); resolves when it hits EOF or `stop` fires. The task
/// then keeps draining (and discarding) so background writers do not get SIGPIPE.
pub(super) fn capture(
    mut fifo: pipe::Receiver,
    stop: watch::Receiver<bool>,
) -> impl Future<Output = Captured> {
    let (tx, result) = oneshot::channel();
    tokio::spawn(async move {
        let _ = tx.send(process::read_capped(&mut fifo, stop).await);
        let _ = tokio::io::copy(&mut fifo, &mut tokio::io::sink()).await;
    });
    async move { result.await.unwrap_or_default() }
}

/// The FIFOs of an exec whose job has ended (or never will start): opening one for writing
/// and closing it makes its reader see EOF unless another writer (a background process)
/// still holds it; so the capture tasks never wait for a writer that never comes.
/// Done by `now` or on drop.
pub(super) struct Poke(pub(super) [Option<PathBuf>; 2]);

impl Poke {
    pub(super) fn now(&mut self) {
        use std::os::unix::fs::OpenOptionsExt;
        for p in self.0.iter_mut().filter_map(Option::take) {
            // Fails (ENXIO) when there is no reader: then there is nothing to wake.
            let _ = std::fs::OpenOptions::new()
                .write(true)
                .custom_flags(libc::O_NONBLOCK)
                .open(p);
        }
    }
}

impl Drop for Poke {
    fn drop(&mut self) {
        self.now();
    }
}

/// An exec's stdin: the file `<id>.in` (removed on drop) or `/dev/null`.
pub(super) struct StdinFile {
    host: Option<PathBuf>,
    /// The path inside the sandbox.
    pub(super) inside: String,
}

impl StdinFile {
    pub(super) fn new(
        dir: &Path,
        id: u64,
        data: Option<Vec<u8>>,
        owner: Option<Owner>,
    ) -> Result<StdinFile> {
        let Some(data) = data else {
            return Ok(StdinFile {
                host: None,
                inside: "/dev/null".into(),
            });
        };
        let host = dir.join(format!("{id}.in"));
        std::fs::write(&host, data)?;
        if let Some(o) = owner {
            o.chown(&host)?;
        }
        Ok(StdinFile {
            host: Some(host),
            inside: format!("{EXEC_DIR}/{id}.in"),
        })
    }
}

impl Drop for StdinFile {
    fn drop(&mut self) {
        if let Some(p) = &self.host {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// Creates a FIFO (mode 0600), owned by the sandbox's identity when it has one.
pub(super) fn mkfifo(path: &Path, owner: Option<Owner>) -> Result<()> {
    let c = CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|e| backend(&format!("bad exec dir path: {e}")))?;
    // SAFETY: mkfifo(3) reads a valid NUL-terminated path.
    if unsafe { libc::mkfifo(c.as_ptr(), 0o600) } != 0 {
        return Err(std::io::Error::last_os_error().into());
    }
    if let Some(o) = owner {
        o.chown(path)?;
    }
    Ok(())
}
