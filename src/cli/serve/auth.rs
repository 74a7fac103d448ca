//! The shared token of `--token-file`: every call must carry `authorization: Bearer TOKEN`.

use tonic::service::Interceptor;
use tonic::{Request, Status};

/// Checks the bearer token of each call (none configured: every call passes).
#[derive(Clone)]
pub struct Bearer {
    /// The token the metadata must carry after `Bearer `.
    expected: Option<Vec<u8>>,
}

/// The scheme before the token, matched without regard to case, as HTTP's schemes are
/// (RFC 7235, section 2.1).
const SCHEME: &[u8] = b"bearer ";

impl Bearer {
    /// The check of `token`, or none.
    pub fn new(token: Option<String>) -> Bearer {
        Bearer {
            expected: token.map(String::into_bytes),
        }
    }
}

impl Interceptor for Bearer {
    fn call(&mut self, request: Request<()>) -> Result<Request<()>, Status> {
        let Some(expected) = &self.expected else {
            return Ok(request);
        };
        let given = request
            .metadata()
            .get("authorization")
            .map(|v| v.as_bytes())
            .unwrap_or_default();
        let scheme =
            given.len() >= SCHEME.len() && given[..SCHEME.len()].eq_ignore_ascii_case(SCHEME);
        if scheme && same(&given[SCHEME.len()..], expected) {
            Ok(request)
        } else {
            Err(Status::unauthenticated(
                "missing or wrong token: send the metadata `authorization: Bearer TOKEN`",
            ))
        }
    }
}

/// Compares in time that depends on the lengths only, not on where the bytes differ.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_right_token_passes() {
        let mut b = Bearer::new(Some("s3cret".into()));
        let with = |v: Option<&str>| {
            let mut r = Request::new(());
            if let Some(v) = v {
                r.metadata_mut().insert("authorization", v.parse().unwrap());
            }
            r
        };
        for good in ["Bearer s3cret", "bearer s3cret", "BEARER s3cret"] {
            assert!(b.call(with(Some(good))).is_ok(), "{good}");
        }
        for bad in [
            None,
            Some("Bearer s3cre"),
            Some("Bearer s3cret2"),
            Some("Bearer S3cret"),
            Some("s3cret"),
            Some("Bearers3cret"),
            Some("Basic s3cret"),
        ] {
            let e = b.call(with(bad)).unwrap_err();
            assert_eq!(e.code(), tonic::Code::Unauthenticated, "{bad:?}");
        }
        let mut open = Bearer::new(None);
        assert!(open.call(with(None)).is_ok());
    }
}
