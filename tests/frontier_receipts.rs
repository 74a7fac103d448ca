//! Receipts of deliveries: known updates and the note that their delivery was received are
//! durable together or not at all, so that a delivery sent again is recognised and never
//! applied twice.

use std::sync::Arc;

use crivello::queues::ManualClock;
use crivello::storage::SimDisk;
use crivello::{Discovered, Error, Frontier, Known, Options, UrlStatus};

const START: u64 = 5_000_000;

fn opts() -> Options {
    Options::new()
        .slots(16)
        .seed(5)
        .background_flush(false)
        .frontier_low(0)
        .queue_runs(3)
        .journal_bytes(1024)
}

fn open(disk: &SimDisk, clock: &Arc<ManualClock>) -> Result<Frontier, Error> {
    Frontier::open_with(Arc::new(disk.clone()), opts(), clock.clone())
}

fn url(host: u32, i: u32) -> String {
    format!("http://h{host}.test/{i}")
}

fn done(u: &str) -> Known<'_> {
    Known {
        url: u.as_bytes(),
        key: None,
        metadata: b"",
        refetch_ms: 0,
    }
}

fn again(u: &str, at: u64) -> Known<'_> {
    Known {
        refetch_ms: at,
        ..done(u)
    }
}

/// One delivery: its sender, its number, its items and the state each URL has once it is
/// applied.
struct Delivery {
    from: &'static [u8],
    seq: u64,
    items: Vec<(String, u64)>,
}

impl Delivery {
    fn known(&self) -> Vec<Known<'_>> {
        self.items
            .iter()
            .map(|(u, at)| if *at == 0 { done(u) } else { again(u, *at) })
            .collect()
    }

    fn applied(&self, f: &Frontier) -> Vec<bool> {
        self.items
            .iter()
            .map(|(u, at)| {
                let want = if *at == 0 {
                    UrlStatus::Done
                } else {
                    UrlStatus::Refetch { at_ms: *at }
                };
                f.status("", None, u.as_bytes()).unwrap() == want
            })
            .collect()
    }

    /// What a receiving node does: applied unless its receipt says it was received.
    fn deliver(&self, f: &Frontier) -> Result<bool, Error> {
        if f.receipt(self.from)?.is_some_and(|r| r >= self.seq) {
            return Ok(false);
        }
        f.update_receipted("", &self.known(), &[(self.from, self.seq)])?;
        Ok(true)
    }
}

fn deliveries() -> Vec<Delivery> {
    let mut out = Vec::new();
    for d in 0..6u32 {
        let from: &'static [u8] = if d % 2 == 0 { b"b/0" } else { b"c/5" };
        out.push(Delivery {
            from,
            seq: (1 << 40) + u64::from(d),
            // Two pushed URLs, and one the store never saw.
            items: vec![
                (url(d % 3, d), 0),
                (url(d % 3 + 3, d), START + 1_000 * u64::from(d + 1)),
                (url(9, d), START + 500),
            ],
        });
    }
    out
}

fn pushed() -> Vec<String> {
    (0..6)
        .flat_map(|h| (0..6).map(move |i| url(h, i)))
        .collect()
}

/// Pushes, then makes each delivery, noting which were acknowledged.
fn workload(disk: &SimDisk, clock: &Arc<ManualClock>, acked: &mut Vec<bool>) -> Result<(), Error> {
    let f = open(disk, clock)?;
    let urls = pushed();
    let items: Vec<Discovered<'_>> = urls.iter().map(|u| Discovered::url(u.as_bytes())).collect();
    f.push("", &items)?;
    f.flush()?;
    for d in deliveries() {
        d.deliver(&f)?;
        acked.push(true);
    }
    f.close()
}

#[test]
fn a_delivery_counts_once_and_its_receipt_outlives_reopens_and_checkpoints() {
    let disk = SimDisk::new();
    let clock = Arc::new(ManualClock::new(START));
    let mut acked = Vec::new();
    workload(&disk, &clock, &mut acked).unwrap();
    assert_eq!(acked.len(), 6);
    assert!(disk.content("CHECKPOINT").is_some(), "J was checkpointed");
    let f = open(&disk, &clock).unwrap();
    assert_eq!(f.receipt(b"b/0").unwrap(), Some((1 << 40) + 4));
    assert_eq!(f.receipt(b"c/5").unwrap(), Some((1 << 40) + 5));
    assert_eq!(f.receipt(b"d/0").unwrap(), None);
    for d in deliveries() {
        assert!(d.applied(&f).iter().all(|&a| a));
    }
    // A URL to fetch again is served, and done; its delivery sent again changes nothing.
    clock.advance(10_000);
    let first = &deliveries()[0];
    let mut served = Vec::new();
    for _ in 0..20 {
        for l in f.lease(100, Some(1), 60_000).unwrap() {
            assert!(f.done(l.token, 1).unwrap());
            served.push(l.url);
        }
        clock.advance(1_000);
    }
    let refetched = first.items[1].0.as_bytes().to_vec();
    assert!(served.contains(&refetched));
    assert!(!first.deliver(&f).unwrap(), "received before");
    assert_eq!(
        f.status("", None, &refetched).unwrap(),
        UrlStatus::Done,
        "the repeat was not applied"
    );
    // A lower number never lowers a receipt; receipts alone are noted too.
    f.update_receipted("", &[], &[(b"b/0", 3), (b"e/1", 9)])
        .unwrap();
    assert_eq!(f.receipt(b"b/0").unwrap(), Some((1 << 40) + 4));
    assert_eq!(f.receipt(b"e/1").unwrap(), Some(9));
    f.update_receipted("never pushed", &[], &[(b"e/1", 10)])
        .unwrap();
    assert_eq!(f.receipt(b"e/1").unwrap(), Some(10));
    // A sender's name past 1,024 bytes is refused, changing nothing.
    let long = vec![b'x'; 1025];
    let e = f
        .update_receipted("", &[done(&url(8, 1))], &[(&long, 1)])
        .unwrap_err();
    assert!(e.to_string().contains("1025 bytes"), "{e}");
    assert_eq!(
        f.status("", None, url(8, 1).as_bytes()).unwrap(),
        UrlStatus::Unknown
    );
    f.close().unwrap();
    let f = open(&disk, &clock).unwrap();
    assert_eq!(f.receipt(b"e/1").unwrap(), Some(10));
    assert_eq!(f.status("", None, &refetched).unwrap(), UrlStatus::Done);
    f.close().unwrap();
    // An older build refuses the store by its version: the manifest says 11 (or later: 18,
    // this build's) once J holds a receipt.
    assert_eq!(disk.content("MANIFEST").unwrap()[4..8], 18u32.to_le_bytes());
    // The checkpoint keeps them: J's size forces one at every few entries (version 12
    // since its queues' numbers are coded).
    assert_eq!(
        disk.content("CHECKPOINT").unwrap()[4..8],
        12u32.to_le_bytes()
    );
}

#[test]
fn a_crash_at_any_operation_leaves_each_delivery_whole_with_its_receipt_or_absent() {
    use crivello::storage::sim::CrashImage;
    let clean = SimDisk::new();
    let mut acked = Vec::new();
    workload(&clean, &Arc::new(ManualClock::new(START)), &mut acked).unwrap();
    let total = clean.ops();
    let mut checked = 0;
    let mut partial = 0;
    for k in 1..=total {
        let disk = SimDisk::new();
        disk.crash_at(k);
        let mut acked = Vec::new();
        let _ = workload(&disk, &Arc::new(ManualClock::new(START)), &mut acked);
        for image in CrashImage::each_kind(k) {
            let img = disk.crash_image(image);
            match crivello::check_storage(Arc::new(img.crash_image(CrashImage::KillProcess))) {
                Ok(report) => assert!(report.is_sound(), "op {k}, {image:?}: {:?}", report.damage),
                Err(Error::NotASieve { .. }) => {
                    assert!(acked.is_empty());
                    continue;
                }
                Err(e) => panic!("op {k}, {image:?}: check: {e}"),
            }
            let clock = Arc::new(ManualClock::new(START));
            let f = open(&img, &clock).unwrap_or_else(|e| panic!("op {k}, {image:?}: {e}"));
            for (i, d) in deliveries().iter().enumerate() {
                let received = f.receipt(d.from).unwrap().is_some_and(|r| r >= d.seq);
                let applied = d.applied(&f);
                assert!(
                    received || i >= acked.len(),
                    "op {k}, {image:?}: delivery {i} acknowledged, its receipt lost"
                );
                if received {
                    assert!(
                        applied.iter().all(|&a| a),
                        "op {k}, {image:?}: delivery {i} received, not applied: {applied:?}"
                    );
                } else {
                    assert!(
                        applied.iter().all(|&a| !a),
                        "op {k}, {image:?}: delivery {i} applied without its receipt: {applied:?}"
                    );
                    partial += 1;
                }
            }
            // The sender sends everything again: what was received is left as it is, the
            // rest applied, and the end is the clean run's.
            let urls = pushed();
            let items: Vec<Discovered<'_>> =
                urls.iter().map(|u| Discovered::url(u.as_bytes())).collect();
            f.push("", &items).unwrap();
            f.flush().unwrap();
            for d in deliveries() {
                d.deliver(&f).unwrap();
            }
            for (i, d) in deliveries().iter().enumerate() {
                assert!(
                    d.applied(&f).iter().all(|&a| a),
                    "op {k}, {image:?}: delivery {i} after the repeat"
                );
                assert!(!d.deliver(&f).unwrap(), "op {k}, {image:?}: received twice");
            }
            f.close().unwrap();
            checked += 1;
        }
    }
    assert!(partial > 0, "some crash points come before a delivery");
    eprintln!("{total} crash points, {checked} images checked");
}
