//! Queue keys: the default key of a URL, and the id of a queue.
//!
//! The default key is url-frontier's rule (its reference service's `provideMissingKey`): the
//! text after `://` if there is one, cut at the first `:`, then at the first `/`, `?` and `&`.
//! It is the host for `http://host:port/path?query`. A URL whose rule gives an empty key
//! (`http:///x`, `?a`) goes to the queue [`FALLBACK_KEY`].

/// The queue of URLs whose default key is empty.
pub const FALLBACK_KEY: &[u8] = b"_DEFAULT_";

/// The longest queue key accepted, in bytes (url-frontier's limit).
pub const MAX_KEY_LEN: usize = 255;

/// The seed of queue ids: fixed, so that every store and every node of a cluster gives a
/// queue the same id.
const QUEUE_SEED: u64 = 0x6372_6976_656c_6c6f;

/// The default queue key of `url`.
pub fn default_key(url: &[u8]) -> &[u8] {
    let mut host = url;
    // The first `://`: at one of the `:`s, found a byte at a time (a searcher for the
    // three bytes costs more than the short scan).
    let mut from = 0;
    while let Some(i) = memchr::memchr(b':', &host[from..]) {
        let at = from + i;
        if host[at + 1..].starts_with(b"//") {
            host = &host[at + 3..];
            break;
        }
        from = at + 1;
    }
    let end = host
        .iter()
        .position(|&b| matches!(b, b':' | b'/' | b'?' | b'&'))
        .unwrap_or(host.len());
    host = &host[..end];
    if host.is_empty() {
        FALLBACK_KEY
    } else {
        host
    }
}

/// The id of the queue of `key` in crawl `crawl`: a 64-bit hash, the same in every store.
/// (XXH3 of the crawl's id, little-endian, then the key.)
pub(crate) fn queue_id(crawl: u32, key: &[u8]) -> u64 {
    // One call over the bytes gathered on the stack: the streaming state costs more than
    // the hash of a short input, and gives the same value.
    let mut buf = [0u8; 4 + MAX_KEY_LEN];
    if key.len() <= MAX_KEY_LEN {
        buf[..4].copy_from_slice(&crawl.to_le_bytes());
        buf[4..4 + key.len()].copy_from_slice(key);
        return xxhash_rust::xxh3::xxh3_64_with_seed(&buf[..4 + key.len()], QUEUE_SEED);
    }
    let mut h = xxhash_rust::xxh3::Xxh3::with_seed(QUEUE_SEED);
    h.update(&crawl.to_le_bytes());
    h.update(key);
    h.digest()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_key_is_url_frontiers() {
        for (url, key) in [
            (
                &b"http://gac.icann.org?language_id=9"[..],
                &b"gac.icann.org"[..],
            ),
            (b"https://example.com:8080/a/b", b"example.com"),
            (b"http://a.b/c?d&e", b"a.b"),
            (b"example.org/path", b"example.org"),
            (b"http://user@host.com/x", b"user@host.com"),
            (b"http://h&x/y", b"h"),
            (b"mailto:someone@example.com", b"mailto"),
            (b"http:///nohost", FALLBACK_KEY),
            (b"?only", FALLBACK_KEY),
        ] {
            assert_eq!(default_key(url), key, "{}", String::from_utf8_lossy(url));
        }
    }

    /// The rule as url-frontier writes it: the first `://`, then a cut at each separator.
    fn reference_key(url: &[u8]) -> &[u8] {
        let mut host = url;
        if let Some(i) = memchr::memmem::find(host, b"://") {
            host = &host[i + 3..];
        }
        for sep in [b':', b'/', b'?', b'&'] {
            if let Some(i) = memchr::memchr(sep, host) {
                host = &host[..i];
            }
        }
        if host.is_empty() {
            FALLBACK_KEY
        } else {
            host
        }
    }

    #[test]
    fn the_default_key_follows_the_rule_on_every_short_text() {
        // Every text of up to 5 bytes over the bytes that matter, and a few longer ones.
        let alphabet = b":/?&ab";
        let mut texts: Vec<Vec<u8>> = vec![Vec::new()];
        for _ in 0..5 {
            let longer: Vec<Vec<u8>> = texts
                .iter()
                .filter(|t| t.len() == texts.last().map_or(0, Vec::len))
                .flat_map(|t| {
                    alphabet.iter().map(move |&c| {
                        let mut t = t.clone();
                        t.push(c);
                        t
                    })
                })
                .collect();
            texts.extend(longer);
        }
        texts.push(b"a:b://c:d/e".to_vec());
        texts.push(b"::://h/".to_vec());
        texts.push(b"x:/y://z".to_vec());
        for t in &texts {
            assert_eq!(
                default_key(t),
                reference_key(t),
                "{}",
                String::from_utf8_lossy(t)
            );
        }
    }

    #[test]
    fn the_one_call_hash_is_the_streaming_one_at_every_key_length() {
        let key: Vec<u8> = (0..MAX_KEY_LEN + 3).map(|i| (i * 7 + 1) as u8).collect();
        for len in 0..=key.len() {
            let mut h = xxhash_rust::xxh3::Xxh3::with_seed(QUEUE_SEED);
            h.update(&9u32.to_le_bytes());
            h.update(&key[..len]);
            assert_eq!(queue_id(9, &key[..len]), h.digest(), "length {len}");
        }
    }

    #[test]
    fn a_long_key_has_the_id_of_its_bytes() {
        let long = vec![b'k'; MAX_KEY_LEN + 10];
        let mut h = xxhash_rust::xxh3::Xxh3::with_seed(QUEUE_SEED);
        h.update(&7u32.to_le_bytes());
        h.update(&long[..MAX_KEY_LEN]);
        assert_eq!(queue_id(7, &long[..MAX_KEY_LEN]), h.digest());
        assert_ne!(queue_id(7, &long), queue_id(7, &long[..MAX_KEY_LEN]));
    }

    #[test]
    fn queue_ids_are_pinned_and_differ_by_crawl() {
        assert_ne!(queue_id(0, b"example.com"), queue_id(1, b"example.com"));
        assert_ne!(queue_id(0, b"a"), queue_id(0, b"b"));
        // Stable across releases: a cluster's nodes and a store's files rely on it.
        assert_eq!(queue_id(0, b"example.com"), queue_id(0, b"example.com"));
        assert_eq!(queue_id(0, b"example.com"), 0x333b_1ab4_693c_5a6c);
    }
}
