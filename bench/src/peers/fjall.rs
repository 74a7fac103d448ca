//! fjall: a "NoSQL sieve" on the fjall LSM-tree store: one `get` per URL and, if absent, one
//! `insert`, keyed by the 8-byte signature; new URLs are appended to a frontier file.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::time::Instant;

use fjall::{Database, KeyspaceCreateOptions, PersistMode};
use xxhash_rust::xxh3::xxh3_64;

use super::PeerArgs;
use crate::record::{hex, Record, Result};
use crate::stream::digest_step;

/// Runs the store on the stream.
pub fn run(args: &PeerArgs) -> Result<Record> {
    let dir = args.tempdir("fjall")?;
    let db_dir = dir.path().join("db");
    let db = Database::builder(&db_dir)
        .cache_size(args.memory_mib << 20)
        .open()?;
    let seen = db.keyspace("seen", KeyspaceCreateOptions::default)?;
    let f_path = dir.path().join("frontier.txt");
    let mut frontier = BufWriter::with_capacity(1 << 20, File::create(&f_path)?);
    let mut feed = args.feed()?;
    let (mut emitted, mut digest) = (0u64, 0u64);
    let start = Instant::now();
    for i in 0..args.pushes {
        let buf = feed.next_url();
        let key = xxh3_64(buf).to_be_bytes();
        if seen.get(key)?.is_none() {
            seen.insert(key, [])?;
            frontier.write_all(buf)?;
            frontier.write_all(b"\n")?;
            emitted += 1;
            digest = digest_step(digest, buf);
        }
        super::progress("fjall", i, args.pushes, start);
    }
    frontier.flush()?;
    frontier.get_ref().sync_all()?;
    db.persist(PersistMode::SyncAll)?;
    let mut r = args.record("fjall", &feed, start, emitted);
    r.digest = hex(digest);
    let db_bytes = super::dir_size(&db_dir);
    r.z_bytes = Some(db_bytes);
    r.disk_bytes = Some(db_bytes + std::fs::metadata(&f_path)?.len());
    r.notes.push(
        "fjall 3, default options, block cache = the memory budget; journal persisted once \
         at the end"
            .into(),
    );
    if args.pushes < args.requested {
        r.notes
            .push(format!("capped at {} pushes (slow)", args.pushes));
    }
    Ok(r)
}
