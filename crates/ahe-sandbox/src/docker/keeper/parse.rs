//! Reading one exec's output out of the keeper's streams: the markers around it and the
//! status after it.

use super::RESTARTED;
use crate::docker::exec::Capture;

/// The first index of `pat` in `hay`.
pub(super) fn find(hay: &[u8], pat: &[u8]) -> Option<usize> {
    hay.windows(pat.len()).position(|w| w == pat)
}

/// Splits one stream into: junk before the start marker, the command's output (capped),
/// the end marker (and, on stdout, the status after it).
pub(super) struct Parser {
    pub(super) start: Vec<u8>,
    pub(super) end: Vec<u8>,
    pub(super) with_status: bool,
    pub(super) phase: Phase,
    pub(super) pending: Vec<u8>,
    pub(super) cap: Capture,
    pub(super) status: Option<String>,
    /// Whether the keeper announced a restart (its bash was killed).
    pub(super) restarted: bool,
}

#[derive(PartialEq)]
pub(super) enum Phase {
    BeforeStart,
    Body,
    Status,
    Done,
}

impl Parser {
    pub(super) fn new(token: &str, with_status: bool) -> Parser {
        Parser {
            start: format!("AHE-START {token}\n").into_bytes(),
            end: if with_status {
                format!("AHE-END {token} ").into_bytes()
            } else {
                format!("AHE-END {token}\n").into_bytes()
            },
            with_status,
            phase: Phase::BeforeStart,
            pending: Vec::new(),
            cap: Capture::default(),
            status: None,
            restarted: false,
        }
    }

    pub(super) fn done(&self) -> bool {
        self.phase == Phase::Done
    }

    pub(super) fn feed(&mut self, data: &[u8]) {
        self.pending.extend_from_slice(data);
        if !self.restarted && self.phase != Phase::Done {
            self.restarted = find(&self.pending, RESTARTED).is_some();
        }
        loop {
            match self.phase {
                Phase::BeforeStart => match find(&self.pending, &self.start) {
                    Some(i) => {
                        self.pending.drain(..i + self.start.len());
                        self.phase = Phase::Body;
                    }
                    None => {
                        let keep = self.start.len() - 1;
                        let cut = self.pending.len().saturating_sub(keep);
                        self.pending.drain(..cut);
                        return;
                    }
                },
                Phase::Body => match find(&self.pending, &self.end) {
                    Some(i) => {
                        self.cap.push(&self.pending[..i]);
                        self.pending.drain(..i + self.end.len());
                        self.phase = if self.with_status {
                            Phase::Status
                        } else {
                            Phase::Done
                        };
                    }
                    None => {
                        let keep = self.end.len() - 1;
                        let cut = self.pending.len().saturating_sub(keep);
                        self.cap.push(&self.pending[..cut]);
                        self.pending.drain(..cut);
                        return;
                    }
                },
                Phase::Status => match self.pending.iter().position(|b| *b == b'\n') {
                    Some(i) => {
                        let s = String::from_utf8_lossy(&self.pending[..i]).into_owned();
                        self.status = Some(s);
                        self.pending.clear();
                        self.phase = Phase::Done;
                    }
                    None => return,
                },
                Phase::Done => {
                    self.pending.clear();
                    return;
                }
            }
        }
    }
}
