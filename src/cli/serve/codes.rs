//! The gRPC status of a message the service cannot take: INVALID_ARGUMENT for one that does
//! not decode, RESOURCE_EXHAUSTED for one over the size limit (tonic answers INTERNAL and
//! OUT_OF_RANGE). A unary call's error is in the response's headers, rewritten here by a
//! layer; a stream's is mapped where the stream reads it ([`map_status`]).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use http::HeaderValue;
use tonic::{Code, Status};

/// What tonic's message starts with when a message does not decode.
const UNDECODABLE: &str = "failed to decode Protobuf message";
/// What tonic's message starts with when a message is over the limit.
const TOO_LARGE: &str = "Error, decoded message length too large";

/// A stream's error as the service reports it.
pub fn map_status(s: Status) -> Status {
    match s.code() {
        Code::Internal if s.message().starts_with(UNDECODABLE) => {
            Status::invalid_argument(s.message())
        }
        Code::OutOfRange if s.message().starts_with(TOO_LARGE) => {
            Status::resource_exhausted(s.message())
        }
        _ => s,
    }
}

/// The layer that rewrites the status of unary calls.
#[derive(Debug, Clone, Copy, Default)]
pub struct StatusLayer;

impl<S> tower_layer::Layer<S> for StatusLayer {
    type Service = StatusCodes<S>;

    fn layer(&self, inner: S) -> StatusCodes<S> {
        StatusCodes(inner)
    }
}

/// A service whose responses' status is rewritten as [`map_status`] does.
#[derive(Debug, Clone)]
pub struct StatusCodes<S>(S);

impl<S, Req, B> tower_service::Service<Req> for StatusCodes<S>
where
    S: tower_service::Service<Req, Response = http::Response<B>>,
    S::Future: Send + 'static,
{
    type Response = http::Response<B>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<http::Response<B>, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, req: Req) -> Self::Future {
        let fut = self.0.call(req);
        Box::pin(async move {
            let mut resp = fut.await?;
            rewrite(resp.headers_mut());
            Ok(resp)
        })
    }
}

/// Rewrites a trailers-only response's `grpc-status`.
fn rewrite(h: &mut http::HeaderMap) {
    let Some(code) = h.get("grpc-status").and_then(|v| v.to_str().ok()) else {
        return;
    };
    let message = h
        .get("grpc-message")
        .and_then(|v| v.to_str().ok())
        .map(|m| m.replace("%20", " "))
        .unwrap_or_default();
    let new = match code.parse::<i32>().map(Code::from) {
        Ok(Code::Internal) if message.starts_with(UNDECODABLE) => Code::InvalidArgument,
        Ok(Code::OutOfRange) if message.starts_with(TOO_LARGE) => Code::ResourceExhausted,
        _ => return,
    };
    h.insert("grpc-status", HeaderValue::from(new as i32));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn undecodable_and_oversized_messages_get_their_codes() {
        let s = map_status(Status::internal("failed to decode Protobuf message: x"));
        assert_eq!(s.code(), Code::InvalidArgument);
        let s = map_status(Status::out_of_range(
            "Error, decoded message length too large: found 9 bytes, the limit is: 8 bytes",
        ));
        assert_eq!(s.code(), Code::ResourceExhausted);
        assert_eq!(map_status(Status::internal("disk")).code(), Code::Internal);

        let mut h = http::HeaderMap::new();
        h.insert("grpc-status", HeaderValue::from(13));
        h.insert(
            "grpc-message",
            HeaderValue::from_static("failed%20to%20decode%20Protobuf%20message:%20x"),
        );
        rewrite(&mut h);
        assert_eq!(h["grpc-status"], "3");
        h.insert("grpc-status", HeaderValue::from(2));
        rewrite(&mut h);
        assert_eq!(h["grpc-status"], "2");
    }
}
