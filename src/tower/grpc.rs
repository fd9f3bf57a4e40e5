//! Refusals a gRPC client understands: for a request whose `content-type`
//! is `application/grpc` (or `application/grpc+proto`, `application/grpc-web`
//! and the like), the layer answers as a gRPC server does, with HTTP `200`
//! and the status in the headers (a "trailers-only" response): `grpc-status`,
//! a percent-encoded `grpc-message`, and `grpc-status-details-bin`, a
//! `google.rpc.Status` carrying `google.rpc.RetryInfo` (when to retry) and
//! `google.rpc.QuotaFailure` (which quota ran out). The few protobuf fields
//! are written here by hand rather than with a protobuf library.

use http::header::CONTENT_TYPE;
use http::request::Parts;
use http::{HeaderValue, Response, StatusCode};

use super::refusal::Refusal;
use super::sf::base64;

/// gRPC status codes the layer answers with.
mod code {
    pub(super) const INVALID_ARGUMENT: u64 = 3;
    pub(super) const PERMISSION_DENIED: u64 = 7;
    pub(super) const RESOURCE_EXHAUSTED: u64 = 8;
    pub(super) const UNKNOWN: u64 = 2;
    pub(super) const INTERNAL: u64 = 13;
    pub(super) const UNAVAILABLE: u64 = 14;
    pub(super) const UNAUTHENTICATED: u64 = 16;
}

/// Whether `request` is a gRPC call: its `content-type` is
/// `application/grpc`, alone or followed by `+`, `-` or `;` (any case).
pub(super) fn is_grpc(request: &Parts) -> bool {
    const GRPC: &[u8] = b"application/grpc";
    request.headers.get(CONTENT_TYPE).is_some_and(|value| {
        let value = value.as_bytes();
        value.len() >= GRPC.len()
            && value[..GRPC.len()].eq_ignore_ascii_case(GRPC)
            && matches!(value.get(GRPC.len()), None | Some(b'+' | b'-' | b';'))
    })
}

/// The gRPC status for an HTTP status the layer would have sent.
fn code_for(status: StatusCode) -> u64 {
    match status {
        StatusCode::TOO_MANY_REQUESTS => code::RESOURCE_EXHAUSTED,
        StatusCode::SERVICE_UNAVAILABLE => code::UNAVAILABLE,
        StatusCode::UNAUTHORIZED => code::UNAUTHENTICATED,
        StatusCode::FORBIDDEN => code::PERMISSION_DENIED,
        StatusCode::BAD_REQUEST | StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE => {
            code::INVALID_ARGUMENT
        }
        StatusCode::INTERNAL_SERVER_ERROR => code::INTERNAL,
        _ => code::UNKNOWN,
    }
}

/// The trailers-only gRPC response for `refusal` of `request`, whose
/// status message is `message`.
pub(super) fn response(refusal: &Refusal<'_>, request: &Parts, message: &str) -> Response<String> {
    let code = code_for(refusal.status());
    let mut response = Response::new(String::new());
    let headers = response.headers_mut();
    // The request's own gRPC content type, which the client expects back.
    let content_type = request
        .headers
        .get(CONTENT_TYPE)
        .cloned()
        .unwrap_or(HeaderValue::from_static("application/grpc"));
    headers.insert(CONTENT_TYPE, content_type);
    headers.insert("grpc-status", HeaderValue::from(code));
    headers.insert("grpc-message", percent_encoded(message));
    let mut status = Message::default();
    status.varint(1, code);
    status.bytes(2, message.as_bytes());
    if let Refusal::Limited {
        decision,
        retry_after,
        policy,
    } = refusal
    {
        // RetryInfo { retry_delay: Duration { seconds } }.
        let mut delay = Message::default();
        delay.varint(1, retry_after.as_secs());
        let mut retry = Message::default();
        retry.bytes(1, &delay.0);
        status.any(3, "google.rpc.RetryInfo", &retry.0);
        // QuotaFailure: a violation for each limit with nothing left.
        let mut failure = Message::default();
        let mut violate = |id: &str, limit: u64, window: core::time::Duration| {
            let mut violation = Message::default();
            let quota = format!(
                "{limit} requests per {} s",
                super::sf::window_seconds(window)
            );
            violation.bytes(2, quota.as_bytes());
            violation.bytes(5, id.as_bytes());
            violation.varint(7, limit.min(i64::MAX as u64));
            failure.bytes(1, &violation.0);
        };
        match decision.pair_limits() {
            Some(pair) => {
                for (i, limit) in pair.iter().enumerate() {
                    if limit.remaining() == 0 {
                        violate(
                            &format!("{policy}-{}", i + 1),
                            limit.limit(),
                            limit.window(),
                        );
                    }
                }
            }
            None => violate(policy, decision.limit(), decision.window()),
        }
        status.any(3, "google.rpc.QuotaFailure", &failure.0);
        // For clients with a retry policy (gRPC's retry design, A6): when
        // to try again, in milliseconds.
        let millis = retry_after.as_millis().min(u128::from(i32::MAX as u32));
        headers.insert(
            "grpc-retry-pushback-ms",
            HeaderValue::from(u64::try_from(millis).unwrap_or(u64::MAX)),
        );
    }
    let mut details = String::new();
    base64(&status.0, false, &mut details);
    headers.insert(
        "grpc-status-details-bin",
        HeaderValue::try_from(details).expect("base64 is a valid header value"),
    );
    response
}

/// `message` percent-encoded as gRPC says: every byte outside printable
/// ASCII, and `%` itself, as `%XX`.
fn percent_encoded(message: &str) -> HeaderValue {
    let mut out = String::with_capacity(message.len());
    for &b in message.as_bytes() {
        if (0x20..0x7f).contains(&b) && b != b'%' {
            out.push(char::from(b));
        } else {
            out.push('%');
            out.push(char::from(b"0123456789ABCDEF"[usize::from(b >> 4)]));
            out.push(char::from(b"0123456789ABCDEF"[usize::from(b & 15)]));
        }
    }
    HeaderValue::try_from(out).expect("printable ASCII is a valid header value")
}

/// A protobuf message being written, field by field.
#[derive(Default)]
struct Message(Vec<u8>);

impl Message {
    fn key(&mut self, field: u64, wire_type: u64) {
        self.raw_varint(field << 3 | wire_type);
    }

    fn raw_varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.0.push((v as u8 & 0x7f) | 0x80);
            v >>= 7;
        }
        self.0.push(v as u8);
    }

    /// An integer field (`int32`, `int64`, `uint64` of a non-negative
    /// value): skipped when 0, as proto3 does.
    fn varint(&mut self, field: u64, v: u64) {
        if v != 0 {
            self.key(field, 0);
            self.raw_varint(v);
        }
    }

    /// A length-delimited field: a string, bytes, or a message.
    fn bytes(&mut self, field: u64, bytes: &[u8]) {
        self.key(field, 2);
        self.raw_varint(bytes.len() as u64);
        self.0.extend_from_slice(bytes);
    }

    /// A `google.protobuf.Any` field holding the message `value` of
    /// `type_name`.
    fn any(&mut self, field: u64, type_name: &str, value: &[u8]) {
        let mut any = Message::default();
        let url = format!("type.googleapis.com/{type_name}");
        any.bytes(1, url.as_bytes());
        any.bytes(2, value);
        self.bytes(field, &any.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(content_type: Option<&str>) -> Parts {
        let mut request = http::Request::post("/pkg.Svc/Call");
        if let Some(ct) = content_type {
            request = request.header(CONTENT_TYPE, ct);
        }
        request.body(()).unwrap().into_parts().0
    }

    #[test]
    fn grpc_requests_are_told_by_their_content_type() {
        for grpc in [
            "application/grpc",
            "application/grpc+proto",
            "Application/GRPC+json",
            "application/grpc-web",
            "application/grpc-web-text+proto",
            "application/grpc;charset=utf-8",
        ] {
            assert!(is_grpc(&parts(Some(grpc))), "{grpc}");
        }
        for other in ["application/json", "application/grpcx", "text/plain", ""] {
            assert!(!is_grpc(&parts(Some(other))), "{other}");
        }
        assert!(!is_grpc(&parts(None)));
    }

    #[test]
    fn varints_and_messages_are_protobuf() {
        let mut m = Message::default();
        m.varint(1, 300);
        assert_eq!(m.0, [0x08, 0xac, 0x02]);
        let mut m = Message::default();
        m.varint(1, 0);
        assert!(m.0.is_empty());
        m.bytes(2, b"hi");
        assert_eq!(m.0, [0x12, 2, b'h', b'i']);
        let mut m = Message::default();
        m.varint(7, u64::from(u32::MAX));
        assert_eq!(m.0, [0x38, 0xff, 0xff, 0xff, 0xff, 0x0f]);
    }

    #[test]
    fn messages_are_percent_encoded() {
        assert_eq!(percent_encoded("a b%c"), "a b%25c");
        assert_eq!(percent_encoded("é\n"), "%C3%A9%0A");
    }
}
