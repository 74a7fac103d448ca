//! The bytes the service keeps with each URL: url-frontier's metadata (a map of strings to
//! lists of strings) and the instant the service first stored the URL, encoded as protobuf.
//!
//! ```text
//! message Stored {
//!   map<string, urlfrontier.StringList> metadata = 1;
//!   uint64 created = 2;   // seconds since the epoch
//! }
//! ```

use std::collections::HashMap;

use prost::Message as _;

use super::pb;

/// What the service keeps with a URL.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Stored {
    /// url-frontier's metadata.
    #[prost(map = "string, message", tag = "1")]
    pub metadata: HashMap<String, pb::StringList>,
    /// When the service first stored the URL, in seconds since the epoch.
    #[prost(uint64, tag = "2")]
    pub created: u64,
}

/// Encodes metadata and a creation instant.
pub fn encode(metadata: HashMap<String, pb::StringList>, created: u64) -> Vec<u8> {
    Stored { metadata, created }.encode_to_vec()
}

/// Decodes what [`encode`] wrote; bytes that are not (a URL pushed through the library or
/// the command line with metadata of its own) give no metadata and no instant.
pub fn decode(bytes: &[u8]) -> Stored {
    Stored::decode(bytes).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_round_trips_and_foreign_bytes_give_none() {
        let mut m = HashMap::new();
        m.insert(
            "source".to_owned(),
            pb::StringList {
                values: vec!["seed".into(), "x".into()],
            },
        );
        let bytes = encode(m.clone(), 1_700_000_000);
        let back = decode(&bytes);
        assert_eq!(back.metadata, m);
        assert_eq!(back.created, 1_700_000_000);
        assert_eq!(decode(b"").created, 0);
        assert!(decode(&[0xff, 0xff, 0xff]).metadata.is_empty());
    }
}
