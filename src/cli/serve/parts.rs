//! `GetURLs` in parts: a hand-out of many queues is leased a part at a time
//! ([`Frontier::lease_part`]), each part durable before it is sent, and the next part is
//! leased while the client reads the one before. The first URLs go out after the first
//! part's commit rather than after the whole hand-out's, the server and the client work at
//! once, and the server holds two or three parts, not every URL of the call.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use crivello::{Frontier, Handout, LeasedBatch, LeasedRef};
use tokio::sync::{mpsc, watch};
use tokio_stream::Stream;
use tonic::Status;

use super::log::{log, Log};
use super::meta;
use super::pb;

/// Queues of the first part: small, so that the first URLs go out soon.
pub const FIRST_PART_QUEUES: usize = 1024;

/// Queues of a part at most: each part after the first is twice the one before, up to this.
/// A part is one commit (one fsync); larger parts cost fewer of them and more memory.
const PART_QUEUES: usize = 4096;

/// The URLs of a hand-out as `UrlInfo` messages, made from each part as the client reads.
pub struct Parts {
    /// The parts after the first, from the task that leases them.
    rx: Option<mpsc::Receiver<Result<LeasedBatch, Status>>>,
    part: LeasedBatch,
    /// The next URL of `part` to send.
    next: usize,
}

impl Parts {
    /// A hand-out of no URL.
    pub fn empty() -> Parts {
        Parts {
            rx: None,
            part: LeasedBatch::default(),
            next: 0,
        }
    }
}

/// The hand-out `handout` as a stream: `first` (its first part, leased already), then the
/// next parts, leased one ahead of the client on the blocking pool, until the hand-out is
/// finished, the client goes, or the server stops (`stopping`): then no more is leased.
pub fn stream(
    frontier: Arc<Frontier>,
    mut handout: Handout,
    first: LeasedBatch,
    stopping: watch::Receiver<bool>,
    log: Arc<Log>,
) -> Parts {
    if handout.is_finished() {
        handed_out(&log, &handout);
        return Parts {
            rx: None,
            part: first,
            next: 0,
        };
    }
    // One part waits in the channel while the client reads another and the next is leased.
    let (tx, rx) = mpsc::channel(1);
    tokio::spawn(async move {
        let mut size = FIRST_PART_QUEUES;
        while !handout.is_finished() && !*stopping.borrow() {
            size = (size * 2).min(PART_QUEUES);
            let f = frontier.clone();
            let leased = tokio::task::spawn_blocking(move || {
                let part = f.lease_part(&mut handout, size);
                (handout, part)
            })
            .await;
            let (h, part) = match leased {
                Ok(v) => v,
                Err(e) => {
                    log!(log, Error, "GetURLs: {e}");
                    let _ = tx
                        .send(Err(Status::internal("GetURLs: internal error")))
                        .await;
                    return;
                }
            };
            handout = h;
            let part = part.map_err(|e| super::service::status_of(&log, "GetURLs", &e));
            let failed = part.is_err();
            if let Ok(p) = &part {
                if p.is_empty() {
                    continue;
                }
            }
            // A client gone: its channel is closed, and nothing more is leased for it (the
            // URLs of the parts sent stay in transit until their deadline, as they would had
            // it read them and gone).
            if tx.send(part).await.is_err() || failed {
                break;
            }
        }
        handed_out(&log, &handout);
    });
    Parts {
        rx: Some(rx),
        part: first,
        next: 0,
    }
}

/// Logs what a hand-out gave, once it ends.
fn handed_out(log: &Log, handout: &Handout) {
    log!(
        log,
        Trace,
        "GetURLs: {} URLs of {} queues handed out",
        handout.urls(),
        handout.queues()
    );
}

/// One URL handed out as url-frontier's message.
fn info(l: LeasedRef<'_>) -> pb::UrlInfo {
    pb::UrlInfo {
        metadata: meta::decode(l.metadata).metadata,
        url: text(l.url),
        key: text(l.key),
        crawl_id: text(l.crawl),
    }
}

/// Bytes as a string (URLs, keys and crawls are UTF-8 when they come in through the service;
/// others pushed through the library are shown lossily).
fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

impl Stream for Parts {
    type Item = Result<pb::UrlInfo, Status>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        loop {
            let this = &mut *self;
            if let Some(l) = this.part.get(this.next) {
                this.next += 1;
                return Poll::Ready(Some(Ok(info(l))));
            }
            let Some(rx) = this.rx.as_mut() else {
                return Poll::Ready(None);
            };
            match rx.poll_recv(cx) {
                Poll::Ready(Some(Ok(part))) => {
                    this.part = part;
                    this.next = 0;
                }
                Poll::Ready(Some(Err(status))) => {
                    this.rx = None;
                    return Poll::Ready(Some(Err(status)));
                }
                Poll::Ready(None) => {
                    this.rx = None;
                    return Poll::Ready(None);
                }
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}
