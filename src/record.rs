//! The records of A and F in a frontier store: a URL with its crawl, its queue key and its
//! metadata. (A plain sieve's records are the URLs themselves.)
//!
//! ```text
//! record := flags u8 | crawl varint      (if flags & CRAWL)
//!                    | key_len varint | key        (if flags & KEY)
//!                    | meta_len varint | metadata  (if flags & META)
//!                    | url                          (the rest, at least 1 byte)
//! flags: CRAWL 0x01, KEY 0x02, META 0x04, IMPORTED 0x08; the other bits are 0
//! varint: LEB128, at most 10 bytes, the shortest form
//! ```
//!
//! Without `CRAWL` the crawl is 0 (`DEFAULT`); without `KEY` the queue key is derived from the
//! URL ([`crate::queues::key`]); without `META` the metadata is empty. A URL of the default
//! crawl with nothing else costs one byte more than in a plain sieve. `IMPORTED` marks a
//! record that only makes its URL known to the sieve: an import from another frontier put the
//! URL in its queue already, so the mover passes over it in F.
//!
//! The signature of a record is the signature of its URL under its crawl's seed
//! ([`crawl_seed`]): crawl 0 uses the store's seed itself, so that a URL pushed to a plain
//! sieve and the same URL of the default crawl are one. Two crawls never share a signature
//! but by a 64-bit collision, so a URL is unique per crawl.

use crate::error::Corruption;
use crate::signature::signature;

/// The flag of a crawl id.
const CRAWL: u8 = 0x01;
/// The flag of a queue key.
const KEY: u8 = 0x02;
/// The flag of metadata.
const META: u8 = 0x04;
/// The flag of a record pushed by an import: its URL is in a queue already.
const IMPORTED: u8 = 0x08;

/// Whether the record `bytes` (not empty) was pushed by an import ([`mark_imported`]).
pub(crate) fn is_imported(bytes: &[u8]) -> bool {
    bytes.first().is_some_and(|&f| f & IMPORTED != 0)
}

/// Marks the record `bytes` (as [`encode`] made it) as pushed by an import.
pub(crate) fn mark_imported(bytes: &mut [u8]) {
    bytes[0] |= IMPORTED;
}

/// A record decoded: borrowed from its bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Record<'a> {
    /// The crawl's id (0: `DEFAULT`).
    pub crawl: u32,
    /// The queue key the caller gave, if any.
    pub key: Option<&'a [u8]>,
    /// The metadata (empty if none).
    pub meta: &'a [u8],
    /// The URL.
    pub url: &'a [u8],
}

/// The seed of the signatures of crawl `crawl` in a store of seed `seed`.
pub(crate) fn crawl_seed(seed: u64, crawl: u32) -> u64 {
    if crawl == 0 {
        return seed;
    }
    // A bijective mix of the crawl id (splitmix64's finaliser), never 0 for crawl > 0.
    let mut x = u64::from(crawl).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    x ^= x >> 30;
    x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x ^= x >> 27;
    x = x.wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^= x >> 31;
    seed ^ x
}

/// Appends the record of `r` to `out`.
pub(crate) fn encode(out: &mut Vec<u8>, r: &Record<'_>) {
    let mut flags = 0;
    if r.crawl != 0 {
        flags |= CRAWL;
    }
    if r.key.is_some() {
        flags |= KEY;
    }
    if !r.meta.is_empty() {
        flags |= META;
    }
    out.push(flags);
    if r.crawl != 0 {
        put_varint(out, u64::from(r.crawl));
    }
    if let Some(key) = r.key {
        put_varint(out, key.len() as u64);
        out.extend_from_slice(key);
    }
    if !r.meta.is_empty() {
        put_varint(out, r.meta.len() as u64);
        out.extend_from_slice(r.meta);
    }
    out.extend_from_slice(r.url);
}

/// The bytes `encode` adds to the URL.
#[cfg(test)]
fn overhead(r: &Record<'_>) -> usize {
    let mut n = 1;
    if r.crawl != 0 {
        n += varint_len(u64::from(r.crawl));
    }
    if let Some(key) = r.key {
        n += varint_len(key.len() as u64) + key.len();
    }
    if !r.meta.is_empty() {
        n += varint_len(r.meta.len() as u64) + r.meta.len();
    }
    n
}

/// Decodes a record; what a well-formed record never holds is corruption.
pub(crate) fn decode(bytes: &[u8]) -> Result<Record<'_>, Corruption> {
    let (&flags, mut rest) = bytes.split_first().ok_or(Corruption::Truncated {
        needed: 2,
        available: 0,
    })?;
    if flags & !(CRAWL | KEY | META | IMPORTED) != 0 {
        return Err(Corruption::Invalid {
            field: "record flags",
            expected: "only the bits of crawl, key, metadata and import",
            found: u64::from(flags),
        });
    }
    let mut crawl = 0;
    if flags & CRAWL != 0 {
        let (v, r) = varint(rest)?;
        crawl = u32::try_from(v)
            .ok()
            .filter(|&c| c != 0)
            .ok_or(Corruption::Invalid {
                field: "record crawl id",
                expected: "1 to 2^32 - 1",
                found: v,
            })?;
        rest = r;
    }
    let mut key = None;
    if flags & KEY != 0 {
        let (k, r) = sized(rest, "record key length")?;
        key = Some(k);
        rest = r;
    }
    let mut meta: &[u8] = &[];
    if flags & META != 0 {
        let (m, r) = sized(rest, "record metadata length")?;
        if m.is_empty() {
            return Err(Corruption::Invalid {
                field: "record metadata length",
                expected: "at least 1 when its flag is set",
                found: 0,
            });
        }
        meta = m;
        rest = r;
    }
    if rest.is_empty() {
        return Err(Corruption::Truncated {
            needed: 1,
            available: 0,
        });
    }
    Ok(Record {
        crawl,
        key,
        meta,
        url: rest,
    })
}

/// The signature of a record under the store's `seed`.
pub(crate) fn signature_of(bytes: &[u8], seed: u64) -> Result<u64, Corruption> {
    let r = decode(bytes)?;
    Ok(signature(r.url, crawl_seed(seed, r.crawl)))
}

/// A length-prefixed field: the field and what follows it.
fn sized<'a>(bytes: &'a [u8], field: &'static str) -> Result<(&'a [u8], &'a [u8]), Corruption> {
    let (len, rest) = varint(bytes)?;
    if len >= rest.len() as u64 {
        // The URL must follow, at least one byte of it.
        return Err(Corruption::OutOfRange {
            field,
            found: len,
            limit: rest.len() as u64,
        });
    }
    Ok(rest.split_at(len as usize))
}

/// Appends `v` as a LEB128 varint.
pub(crate) fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// The bytes of `v` as a varint.
#[cfg(test)]
fn varint_len(v: u64) -> usize {
    (64 - (v | 1).leading_zeros() as usize).div_ceil(7)
}

/// Reads a LEB128 varint in its shortest form at `*pos` of `b` and moves `*pos` past it;
/// `None` (and `*pos` unmoved) when there is none: [`varint`] for the decoders' inner loops,
/// which make their own error.
#[inline]
pub(crate) fn varint_at(b: &[u8], pos: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    let mut i = *pos;
    for k in 0..10 {
        let byte = *b.get(i)?;
        i += 1;
        if k == 9 && byte > 1 {
            return None;
        }
        v |= u64::from(byte & 0x7f) << (7 * k);
        if byte & 0x80 == 0 {
            if k > 0 && byte == 0 {
                return None;
            }
            *pos = i;
            return Some(v);
        }
    }
    None
}

/// Reads a LEB128 varint in its shortest form; returns it and what follows.
pub(crate) fn varint(bytes: &[u8]) -> Result<(u64, &[u8]), Corruption> {
    let mut v = 0u64;
    for (i, &b) in bytes.iter().enumerate().take(10) {
        let bits = u64::from(b & 0x7f);
        if i == 9 && b > 1 {
            break;
        }
        v |= bits << (7 * i);
        if b & 0x80 == 0 {
            if i > 0 && b == 0 {
                return Err(Corruption::Invalid {
                    field: "varint",
                    expected: "the shortest form",
                    found: v,
                });
            }
            return Ok((v, &bytes[i + 1..]));
        }
    }
    Err(Corruption::Invalid {
        field: "varint",
        expected: "at most 10 bytes, the last one ending it",
        found: bytes.len().min(10) as u64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_their_overhead_is_exact() {
        let cases = [
            Record {
                crawl: 0,
                key: None,
                meta: b"",
                url: b"http://a/",
            },
            Record {
                crawl: 7,
                key: Some(b"example.com"),
                meta: b"depth=3",
                url: b"x",
            },
            Record {
                crawl: u32::MAX,
                key: Some(b""),
                meta: b"",
                url: b"http://b/c?d",
            },
        ];
        for r in cases {
            let mut b = Vec::new();
            encode(&mut b, &r);
            assert_eq!(b.len(), r.url.len() + overhead(&r));
            assert_eq!(decode(&b).unwrap(), r);
        }
        let mut plain = Vec::new();
        encode(&mut plain, &cases[0]);
        assert_eq!(plain, b"\0http://a/");
    }

    #[test]
    fn a_record_of_the_default_crawl_has_the_plain_signature_and_crawls_differ() {
        let seed = 0x1234;
        let r = |crawl| {
            let mut b = Vec::new();
            encode(
                &mut b,
                &Record {
                    crawl,
                    key: Some(b"k"),
                    meta: b"m",
                    url: b"http://a/",
                },
            );
            signature_of(&b, seed).unwrap()
        };
        assert_eq!(r(0), signature(b"http://a/", seed));
        assert_ne!(r(1), r(0));
        assert_ne!(r(1), r(2));
    }

    #[test]
    fn the_import_flag_changes_nothing_else_of_a_record() {
        let r = Record {
            crawl: 7,
            key: Some(b"k"),
            meta: b"m",
            url: b"http://a/",
        };
        let mut b = Vec::new();
        encode(&mut b, &r);
        assert!(!is_imported(&b));
        mark_imported(&mut b);
        assert!(is_imported(&b));
        assert_eq!(decode(&b).unwrap(), r);
        assert_eq!(
            signature_of(&b, 5).unwrap(),
            signature(r.url, crawl_seed(5, 7))
        );
    }

    #[test]
    fn malformed_records_are_corruption_never_a_panic() {
        for bad in [
            &b""[..],
            b"\x10url",
            b"\x01\x00url",
            b"\x01\x80\x00url",
            b"\x02\x05abc",
            b"\x04\x00url",
            b"\x00",
            b"\x01\xff\xff\xff\xff\xff\xff\xff\xff\xff\x7furl",
        ] {
            assert!(decode(bad).is_err(), "{bad:?}");
        }
        // Every prefix of a valid record either decodes to another valid record or fails.
        let mut b = Vec::new();
        encode(
            &mut b,
            &Record {
                crawl: 300,
                key: Some(b"host"),
                meta: b"meta",
                url: b"u",
            },
        );
        for len in 0..b.len() {
            let _ = decode(&b[..len]);
        }
    }

    #[test]
    fn varints_round_trip_in_their_shortest_form() {
        for v in [
            0,
            1,
            127,
            128,
            16_383,
            16_384,
            u64::from(u32::MAX),
            u64::MAX,
        ] {
            let mut b = Vec::new();
            put_varint(&mut b, v);
            assert_eq!(b.len(), varint_len(v));
            assert_eq!(varint(&b).unwrap(), (v, &b""[..]));
            b.push(7);
            let mut pos = 0;
            assert_eq!(varint_at(&b, &mut pos), Some(v));
            assert_eq!(pos, b.len() - 1);
        }
        // Not in the shortest form, longer than 10 bytes, past 2^64, cut: none, as `varint`.
        let bad: [&[u8]; 5] = [
            &[0x80, 0x00],
            &[0xff; 11],
            &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02],
            &[0x80],
            &[],
        ];
        for b in bad {
            let mut pos = 0;
            assert_eq!(varint_at(b, &mut pos), None, "{b:?}");
            assert_eq!(pos, 0);
            assert!(varint(b).is_err(), "{b:?}");
        }
    }
}
