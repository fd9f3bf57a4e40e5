//! Refusals a gRPC client understands: for a request whose `content-type`
//! is `application/grpc` (or `application/grpc+proto`, `application/grpc-web`
//! and the like), the layer answers as a gRPC server does, with HTTP `200`
//! and the status in the headers (a "trailers-only" response): `grpc-status`,
//! a percent-encoded `grpc-message`, and `grpc-status-details-bin`, a
//! `google.rpc.Status` carrying `google.rpc.RetryInfo` (when to retry) and
//! `google.rpc.QuotaFailure` (which quota ran out). The few protobuf fields
//! are written here by hand rather than with a protobuf library.
//! [`Refusal::default_response`] is here too, above both of its answers:
//! this one, or `refusal`'s problem body.

use core::time::Duration;

use http::header::{CACHE_CONTROL, CONTENT_TYPE};
use http::request::Parts;
use http::{HeaderMap, HeaderName, HeaderValue, Method, Response, StatusCode};

use super::refusal::{problem, set_challenge, Refusal};
use super::sf::{base64, base64_decode};

const STATUS: HeaderName = HeaderName::from_static("grpc-status");
const MESSAGE: HeaderName = HeaderName::from_static("grpc-message");
/// The `google.rpc.Status` of a refusal, base64.
pub(super) const STATUS_DETAILS: HeaderName = HeaderName::from_static("grpc-status-details-bin");
/// When a client with a retry policy may try again, in milliseconds.
pub(super) const RETRY_PUSHBACK: HeaderName = HeaderName::from_static("grpc-retry-pushback-ms");

/// `Cache-Control` of every refusal in gRPC's form.
pub(super) const NO_STORE: HeaderValue = HeaderValue::from_static("no-store");

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

/// Whether `request` is a gRPC call: a `POST` (gRPC sends no other
/// method) whose `content-type` is `application/grpc`, alone or followed
/// by `+`, `-` or `;` (any case). Any other request is answered in HTTP's
/// form: a `GET` with a gRPC content type answered `200`, as a gRPC
/// refusal is, would be a response a cache may store.
pub(super) fn is_grpc(request: &Parts) -> bool {
    const GRPC: &[u8] = b"application/grpc";
    request.method == Method::POST
        && request.headers.get(CONTENT_TYPE).is_some_and(|value| {
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
    // A refusal in a `200`: no cache may keep it for another request.
    headers.insert(CACHE_CONTROL, NO_STORE);
    headers.insert(STATUS, HeaderValue::from(code));
    headers.insert(MESSAGE, percent_encoded(message));
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
        let mut violate = |id: &str, limit: u64, window: Duration| {
            failure.bytes(1, &violation(id, limit, window));
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
        headers.insert(RETRY_PUSHBACK, pushback(retry_after.as_secs()));
    }
    headers.insert(STATUS_DETAILS, details(&status.0));
    response
}

impl Refusal<'_> {
    /// The response the layer sends by default for this refusal of
    /// `request`: an `application/problem+json` body with the
    /// [`status`](Refusal::status); or, for a gRPC call (a `POST` with
    /// `content-type: application/grpc*`), HTTP `200` with the gRPC status
    /// in the headers and `Cache-Control: no-store` (see [the module
    /// docs](super#grpc)). The layer adds the rate-limit
    /// headers and `Retry-After` to it (as to any response
    /// [`respond_with`](super::RateLimitLayer::respond_with) builds) when the
    /// limiter refused.
    #[must_use]
    pub fn default_response(&self, request: &Parts) -> Response<String> {
        if is_grpc(request) {
            return response(self, request, &self.detail());
        }
        let mut response = problem(self.status(), &self.detail());
        set_challenge(self, &mut response);
        response
    }
}

/// `grpc-retry-pushback-ms` for a wait of `secs` seconds (at most what a
/// signed 32-bit count of milliseconds holds).
fn pushback(secs: u64) -> HeaderValue {
    HeaderValue::from(secs.saturating_mul(1000).min(i32::MAX as u64))
}

/// `grpc-status-details-bin` for the encoded `google.rpc.Status`.
fn details(status: &[u8]) -> HeaderValue {
    let mut details = String::new();
    base64(status, false, &mut details);
    HeaderValue::try_from(details).expect("base64 is a valid header value")
}

/// A `google.rpc.QuotaFailure.Violation` for the limit `id` of `limit`
/// requests per `window`.
fn violation(id: &str, limit: u64, window: Duration) -> Vec<u8> {
    let mut violation = Message::default();
    let quota = format!(
        "{limit} requests per {} s",
        super::sf::window_seconds(window)
    );
    violation.bytes(2, quota.as_bytes());
    violation.bytes(5, id.as_bytes());
    violation.varint(7, limit.min(i64::MAX as u64));
    violation.0
}

const RETRY_INFO: &[u8] = b"type.googleapis.com/google.rpc.RetryInfo";
const QUOTA_FAILURE: &[u8] = b"type.googleapis.com/google.rpc.QuotaFailure";

/// Holds an inner layer's gRPC refusal in `headers` to an outer layer's
/// wait: `grpc-retry-pushback-ms` and the `RetryInfo` in
/// `grpc-status-details-bin` no earlier than `secs` seconds (the refusal's
/// `Retry-After`, raised), and its `QuotaFailure` naming each of
/// `exhausted` (the outer layer's items with nothing left: their names,
/// `q` and window) after its own. A header that is not what the layer
/// writes is left as it is.
pub(super) fn hold(headers: &mut HeaderMap, secs: u64, exhausted: &[(String, u64, Duration)]) {
    let raise = headers
        .get(RETRY_PUSHBACK)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
        .is_some_and(|millis| millis < secs.saturating_mul(1000).min(i32::MAX as u64));
    if raise {
        headers.insert(RETRY_PUSHBACK, pushback(secs));
    }
    let Some(status) = headers
        .get(STATUS_DETAILS)
        .and_then(|v| base64_decode(v.as_bytes()))
    else {
        return;
    };
    if let Some(status) = held_status(&status, secs, exhausted) {
        headers.insert(STATUS_DETAILS, details(&status));
    }
}

/// The `google.rpc.Status` `status` with its `RetryInfo` raised to `secs`
/// and `exhausted` added to its `QuotaFailure`; `None` if it does not
/// parse.
fn held_status(status: &[u8], secs: u64, exhausted: &[(String, u64, Duration)]) -> Option<Vec<u8>> {
    let mut out = Message::default();
    for field in Fields(status) {
        let (number, value, raw) = field?;
        let (3, Value::Bytes(any)) = (number, value) else {
            out.0.extend_from_slice(raw);
            continue;
        };
        // An `Any`: the type's URL (1) and the message (2).
        let mut url = None;
        let mut message = None;
        for field in Fields(any) {
            match field? {
                (1, Value::Bytes(bytes), _) => url = Some(bytes),
                (2, Value::Bytes(bytes), _) => message = Some(bytes),
                _ => {}
            }
        }
        let held = match (url, message.unwrap_or_default()) {
            (Some(RETRY_INFO), retry) => {
                // RetryInfo { retry_delay (1): Duration { seconds (1) } }.
                let mut delay = 0;
                for field in Fields(retry) {
                    if let (1, Value::Bytes(duration), _) = field? {
                        for field in Fields(duration) {
                            if let (1, Value::Varint(seconds), _) = field? {
                                delay = seconds;
                            }
                        }
                    }
                }
                (delay < secs).then(|| {
                    let mut duration = Message::default();
                    duration.varint(1, secs);
                    let mut retry = Message::default();
                    retry.bytes(1, &duration.0);
                    retry.0
                })
            }
            (Some(QUOTA_FAILURE), failure) => {
                // Repeated fields concatenate: the inner layer's
                // violations, then these.
                let mut failure = Message(failure.to_vec());
                for (id, limit, window) in exhausted {
                    failure.bytes(1, &violation(id, *limit, *window));
                }
                Some(failure.0)
            }
            _ => None,
        };
        match (held, url) {
            (Some(held), Some(url)) => {
                let mut any = Message::default();
                any.bytes(1, url);
                any.bytes(2, &held);
                out.bytes(3, &any.0);
            }
            _ => out.0.extend_from_slice(raw),
        }
    }
    Some(out.0)
}

/// A protobuf field's value, as far as the layer reads one.
#[derive(Clone, Copy)]
enum Value<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
    /// A fixed-width field, kept as it is.
    Fixed,
}

/// The fields of a protobuf message: each its number, its value and its
/// bytes as they stand (key included); `None` where the message does not
/// parse, and the end there.
struct Fields<'a>(&'a [u8]);

impl<'a> Fields<'a> {
    fn varint(&mut self) -> Option<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let (&byte, rest) = self.0.split_first()?;
            self.0 = rest;
            v |= u64::from(byte & 0x7f) << shift;
            if byte < 0x80 {
                return Some(v);
            }
        }
        None
    }

    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if n > self.0.len() {
            return None;
        }
        let (taken, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(taken)
    }

    fn field(&mut self) -> Option<(u64, Value<'a>)> {
        let key = self.varint()?;
        let value = match key & 7 {
            0 => Value::Varint(self.varint()?),
            1 => {
                self.take(8)?;
                Value::Fixed
            }
            2 => {
                let len = usize::try_from(self.varint()?).ok()?;
                Value::Bytes(self.take(len)?)
            }
            5 => {
                self.take(4)?;
                Value::Fixed
            }
            _ => return None,
        };
        Some((key >> 3, value))
    }
}

impl<'a> Iterator for Fields<'a> {
    type Item = Option<(u64, Value<'a>, &'a [u8])>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.0.is_empty() {
            return None;
        }
        let start = self.0;
        let field = self.field();
        let raw = &start[..start.len() - self.0.len()];
        if field.is_none() {
            // Nothing after a field that does not parse can be read.
            self.0 = &[];
        }
        Some(field.map(|(number, value)| (number, value, raw)))
    }
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
        // gRPC is POST only: another method is answered in HTTP's form.
        for method in [Method::GET, Method::HEAD, Method::PUT, Method::OPTIONS] {
            let (request, ()) = http::Request::builder()
                .method(method.clone())
                .header(CONTENT_TYPE, "application/grpc")
                .body(())
                .unwrap()
                .into_parts();
            assert!(!is_grpc(&request), "{method}");
        }
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
