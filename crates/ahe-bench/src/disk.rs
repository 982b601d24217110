//! The host reserve (`[sandbox] min_free_disk`): while the file system of the run directory
//! or of the sandboxes' data (the docker engine's data root, the local backend's temp dir)
//! has less free space than the reserve, no trial starts, the largest running trial is
//! stopped (an infra error, re-run once space returns, never scored), and the run says so.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ahe_sandbox::storage::{Meter, Stop};
use serde::{Deserialize, Serialize};

/// The default reserve: 4 GiB.
pub const DEFAULT_MIN_FREE: u64 = 4 << 30;

/// How often the free space is read.
pub const POLL: Duration = Duration::from_millis(500);
/// The least time between two trials stopped for the reserve (the first one's sandbox must
/// be removed before the space it held shows as free).
pub const STOP_GAP: Duration = Duration::from_secs(2);
/// How often one attempt may be stopped for the reserve and re-run; after that it is an
/// infra error (reported apart, never scored as the harness's failure).
pub const MAX_STOPS: u32 = 3;
/// A trial smaller than this is not worth stopping for the reserve.
pub const MIN_STOP_BYTES: u64 = 1 << 20;

/// A change of the host reserve's state, for the live display and the run's journal.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DiskEvent {
    /// `low` (no new trial starts), `stop` (a running trial was stopped) or `ok` (resumed).
    pub state: String,
    /// Free bytes on the fullest watched file system.
    pub free_bytes: u64,
    /// The reserve.
    pub min_free_bytes: u64,
    /// The path whose file system was fullest.
    pub path: String,
    /// The trial stopped (`stop` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trial: Option<String>,
    /// Bytes the stopped trial's sandbox held (`stop` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trial_bytes: Option<u64>,
}

impl DiskEvent {
    /// One line for the researcher.
    pub fn text(&self) -> String {
        let (free, min) = (gib(self.free_bytes), gib(self.min_free_bytes));
        match self.state.as_str() {
            "low" => format!(
                "disk: {free} free on {} is below [sandbox] min_free_disk ({min}): no new trial starts until space returns",
                self.path
            ),
            "stop" => format!(
                "disk: {free} free on {} (reserve {min}): stopped the largest running trial {} ({}); it is re-run later",
                self.path,
                self.trial.as_deref().unwrap_or("?"),
                gib(self.trial_bytes.unwrap_or(0))
            ),
            _ => format!(
                "disk: {free} free on {} again (reserve {min}): trials start again",
                self.path
            ),
        }
    }
}

/// `1.2 GiB`, `300.0 MiB`.
pub fn gib(b: u64) -> String {
    if b >= 1 << 30 {
        format!("{:.1} GiB", b as f64 / (1u64 << 30) as f64)
    } else {
        format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64)
    }
}

/// Parses `4G`, `500M`, `1.5GiB`, `1024` (bytes), `0` (off).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a size; use e.g. \"4G\", \"500M\" or 0"))?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        "t" | "tb" | "tib" => 1 << 40,
        _ => return Err(format!("{s:?}: unknown unit; use K, M, G or T")),
    };
    Ok((n * mult as f64) as u64)
}

/// The host reserve of one evaluation (shared by its trials).
pub struct DiskReserve {
    min_free: u64,
    /// `Some(event)` while low.
    low: tokio::sync::watch::Sender<Option<DiskEvent>>,
    running: Mutex<Vec<(u64, String, Arc<Meter>)>>,
    next: AtomicU64,
    stops: AtomicU64,
    pauses: AtomicU64,
}

/// A running trial known to the reserve; forgotten when dropped.
pub struct Registration {
    reserve: Arc<DiskReserve>,
    id: u64,
}

impl Drop for Registration {
    fn drop(&mut self) {
        let mut r = self.reserve.running.lock().unwrap();
        r.retain(|(id, _, _)| *id != self.id);
    }
}

impl DiskReserve {
    /// A reserve of `min_free` bytes; `None` for 0 (off).
    pub fn new(min_free: u64) -> Option<Arc<DiskReserve>> {
        (min_free > 0).then(|| {
            Arc::new(DiskReserve {
                min_free,
                low: tokio::sync::watch::channel(None).0,
                running: Mutex::new(Vec::new()),
                next: AtomicU64::new(0),
                stops: AtomicU64::new(0),
                pauses: AtomicU64::new(0),
            })
        })
    }

    /// The reserve in bytes.
    pub fn min_free(&self) -> u64 {
        self.min_free
    }

    /// Trials stopped for the reserve so far.
    pub fn stops(&self) -> u64 {
        self.stops.load(Ordering::SeqCst)
    }

    /// Times the reserve paused the starting of trials.
    pub fn pauses(&self) -> u64 {
        self.pauses.load(Ordering::SeqCst)
    }

    /// Whether trials are held back now.
    pub fn is_low(&self) -> bool {
        self.low.borrow().is_some()
    }

    /// Resolves when a trial may start (at once unless the host is low).
    pub async fn wait_room(&self) {
        let mut rx = self.low.subscribe();
        let _ = rx.wait_for(|l| l.is_none()).await;
    }

    /// Makes a running trial's meter a candidate for stopping.
    pub fn register(self: &Arc<Self>, trial: &str, meter: Arc<Meter>) -> Registration {
        let id = self.next.fetch_add(1, Ordering::SeqCst);
        self.running
            .lock()
            .unwrap()
            .push((id, trial.to_string(), meter));
        Registration {
            reserve: self.clone(),
            id,
        }
    }

    /// The fullest watched file system: (free bytes, path).
    fn fullest(paths: &[PathBuf]) -> Option<(u64, PathBuf)> {
        paths
            .iter()
            .filter_map(|p| ahe_sandbox::docker::free_bytes(p).map(|f| (f, p.clone())))
            .min_by_key(|(f, _)| *f)
    }

    /// Watches the free space of `paths` until the future is dropped, pausing and resuming
    /// trials and stopping the largest running one while below the reserve; reports every
    /// change to `on_event`.
    pub async fn monitor(
        self: Arc<Self>,
        paths: Vec<PathBuf>,
        on_event: Arc<dyn Fn(DiskEvent) + Send + Sync>,
    ) {
        // Trials start again only with a margin above the reserve (no flapping), and with
        // room for the largest trial stopped meanwhile while others still run (so that it
        // does not start again only to be stopped again).
        let margin = (self.min_free / 8).max(16 << 20);
        let mut last_stop: Option<Instant> = None;
        let mut stopped_bytes = 0u64;
        loop {
            let running = self.running.lock().unwrap().len();
            let resume_at = if running > 0 {
                self.min_free + margin.max(stopped_bytes)
            } else {
                self.min_free + margin
            };
            if let Some((free, path)) = Self::fullest(&paths) {
                let event = |state: &str| DiskEvent {
                    state: state.into(),
                    free_bytes: free,
                    min_free_bytes: self.min_free,
                    path: path.display().to_string(),
                    trial: None,
                    trial_bytes: None,
                };
                let was_low = self.is_low();
                if !was_low && free < self.min_free {
                    let e = event("low");
                    self.pauses.fetch_add(1, Ordering::SeqCst);
                    tracing::warn!("{}", e.text());
                    self.low.send_replace(Some(e.clone()));
                    on_event(e);
                } else if was_low && free >= resume_at {
                    let e = event("ok");
                    tracing::info!("{}", e.text());
                    self.low.send_replace(None);
                    stopped_bytes = 0;
                    on_event(e);
                }
                let due = !matches!(last_stop, Some(t) if t.elapsed() < STOP_GAP);
                if free < self.min_free && due {
                    if let Some(mut e) = self.stop_largest(free, &path) {
                        last_stop = Some(Instant::now());
                        stopped_bytes = stopped_bytes.max(e.trial_bytes.unwrap_or(0));
                        e.free_bytes = free;
                        tracing::warn!("{}", e.text());
                        on_event(e);
                    }
                }
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Stops the running trial holding the most bytes (at least [`MIN_STOP_BYTES`]).
    fn stop_largest(&self, free: u64, path: &std::path::Path) -> Option<DiskEvent> {
        let running = self.running.lock().unwrap();
        let (_, trial, meter) = running
            .iter()
            .filter(|(_, _, m)| m.stopped().is_none() && m.bytes() >= MIN_STOP_BYTES)
            .max_by_key(|(_, _, m)| m.bytes())?;
        let bytes = meter.bytes();
        meter.stop_with(Stop::HostReserve(format!(
            "stopped for the host's disk reserve: {} free on {} is below [sandbox] min_free_disk ({}), and this trial held the most ({}); re-run when space returns",
            gib(free),
            path.display(),
            gib(self.min_free),
            gib(bytes)
        )));
        self.stops.fetch_add(1, Ordering::SeqCst);
        Some(DiskEvent {
            state: "stop".into(),
            free_bytes: free,
            min_free_bytes: self.min_free,
            path: path.display().to_string(),
            trial: Some(trial.clone()),
            trial_bytes: Some(bytes),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_size("4G"), Ok(4 << 30));
        assert_eq!(parse_size("500M"), Ok(500 << 20));
        assert_eq!(parse_size("1.5GiB"), Ok(3 << 29));
        assert_eq!(parse_size("0"), Ok(0));
        assert_eq!(parse_size("1024"), Ok(1024));
        assert!(parse_size("lots").is_err());
        assert!(parse_size("4X").is_err());
    }

    #[tokio::test]
    async fn a_reserve_above_the_free_space_pauses_and_stops_the_largest() {
        let t = tempfile::tempdir().unwrap();
        let free = ahe_sandbox::docker::free_bytes(t.path()).unwrap();
        let r = DiskReserve::new(free + (1 << 40)).unwrap();
        let (small, big) = (t.path().join("small"), t.path().join("big"));
        std::fs::create_dir(&small).unwrap();
        std::fs::create_dir(&big).unwrap();
        std::fs::write(small.join("f"), vec![1u8; 2 << 20]).unwrap();
        std::fs::write(big.join("f"), vec![1u8; 8 << 20]).unwrap();
        let (ms, mb) = (
            Meter::start(vec![small], None),
            Meter::start(vec![big], None),
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
        let _a = r.register("small", ms.clone());
        let _b = r.register("big", mb.clone());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s2 = seen.clone();
        let mon = tokio::spawn(r.clone().monitor(
            vec![t.path().to_path_buf()],
            Arc::new(move |e| s2.lock().unwrap().push(e.state)),
        ));
        let stop = tokio::time::timeout(Duration::from_secs(3), mb.wait_stop())
            .await
            .unwrap();
        assert!(matches!(stop, Stop::HostReserve(_)), "{stop:?}");
        assert!(r.is_low());
        assert!(
            ms.stopped().is_none(),
            "the smaller trial was stopped first"
        );
        assert!(
            tokio::time::timeout(Duration::from_millis(300), r.wait_room())
                .await
                .is_err(),
            "a trial could start below the reserve"
        );
        mon.abort();
        assert_eq!(*seen.lock().unwrap(), ["low", "stop"]);
    }
}
