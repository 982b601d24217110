//! The one start-up of every server in this crate: bind `127.0.0.1:0`, serve an axum
//! router on a thread of its own with its own runtime, stop on drop; and the request record
//! both kinds of server keep.

use std::collections::BTreeMap;

use axum::body::Bytes;
use axum::http::{HeaderMap, Uri};
use axum::Router;
use serde_json::Value;

/// One request a server received.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedRequest {
    /// Request path, e.g. `/v1/chat/completions`.
    pub path: String,
    /// Headers, names lower-cased.
    pub headers: BTreeMap<String, String>,
    /// Body as JSON (`Value::String(raw)` when it is not JSON).
    pub body: Value,
}

impl RecordedRequest {
    /// The record of a request as axum hands it over: path, headers, body parsed as JSON
    /// when it is JSON.
    pub fn new(uri: &Uri, headers: &HeaderMap, body: &Bytes) -> RecordedRequest {
        let text = String::from_utf8_lossy(body).into_owned();
        RecordedRequest {
            path: uri.path().to_string(),
            headers: headers
                .iter()
                .map(|(k, v)| {
                    let v = String::from_utf8_lossy(v.as_bytes()).into_owned();
                    (k.as_str().to_ascii_lowercase(), v)
                })
                .collect(),
            body: serde_json::from_str(&text).unwrap_or(Value::String(text)),
        }
    }

    /// A header's value by (case-insensitive) name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .get(&name.to_ascii_lowercase())
            .map(String::as_str)
    }
}

/// A running HTTP server on `127.0.0.1` (a free port, on its own thread and runtime); it
/// stops when dropped.
pub struct Server {
    port: u16,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server").field("port", &self.port).finish()
    }
}

impl Server {
    /// Serves `app` on `127.0.0.1` at a port the system picks, from a thread named
    /// `NAME-PORT` running a current-thread runtime (a handler's slow part goes to
    /// `spawn_blocking`). The port is bound before this returns: a client may connect at once.
    pub fn start(name: &str, app: Router) -> Server {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        listener.set_nonblocking(true).expect("set_nonblocking");
        let port = listener.local_addr().expect("local_addr").port();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        std::thread::Builder::new()
            .name(format!("{name}-{port}"))
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("test server runtime");
                rt.block_on(async move {
                    let listener =
                        tokio::net::TcpListener::from_std(listener).expect("tokio listener");
                    tokio::select! {
                        _ = axum::serve(listener, app) => {}
                        _ = stop_rx => {}
                    }
                });
            })
            .expect("spawn test server thread");
        Server {
            port,
            stop: Some(stop_tx),
        }
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `http://127.0.0.1:PORT` followed by `path` (`""`, `"/v1"`, …).
    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::routing::get;

    #[test]
    fn serves_at_once_and_stops_on_drop() {
        let app = Router::new().route("/hi", get(|| async { "hello" }));
        let server = Server::start("ahe-test", app);
        let addr = format!("127.0.0.1:{}", server.port());
        let get = |addr: &str| -> std::io::Result<String> {
            use std::io::{Read, Write};
            let mut s = std::net::TcpStream::connect(addr)?;
            s.write_all(b"GET /hi HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")?;
            let mut out = String::new();
            s.read_to_string(&mut out)?;
            Ok(out)
        };
        let answer = get(&addr).unwrap();
        assert!(
            answer.starts_with("HTTP/1.1 200") && answer.ends_with("hello"),
            "{answer}"
        );
        assert_eq!(server.url("/v1"), format!("http://{addr}/v1"));
        drop(server);
        // The listener closes once the runtime has seen the stop: connections are refused.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while std::net::TcpStream::connect(&addr).is_ok() {
            assert!(std::time::Instant::now() < deadline, "still listening");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}
