//! The responses and headers the layer writes: draft-ietf-httpapi-ratelimit-
//! headers-11's `RateLimit-Policy` and `RateLimit` (RFC 9651 structured
//! fields), `Retry-After`, and RFC 9457 problem bodies.

use core::fmt::Write as _;
use core::time::Duration;

use http::header::{CONTENT_TYPE, RETRY_AFTER};
use http::{HeaderMap, HeaderName, HeaderValue, Response, StatusCode};

use crate::check::Quota;
use crate::decision::Decision;
use crate::error::ConfigError;

/// When admitted responses carry the `RateLimit` and `RateLimit-Policy`
/// headers. A `429` always carries them.
///
/// # Examples
///
/// ```
/// use tollgate::tower::AdmittedHeaders;
///
/// assert_eq!(AdmittedHeaders::default(), AdmittedHeaders::Always);
/// // Only once a client is down to its last 10 requests.
/// let near = AdmittedHeaders::NearLimit(10);
/// # let _ = near;
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AdmittedHeaders {
    /// On every admitted response (the default).
    #[default]
    Always,
    /// On no admitted response.
    Never,
    /// When at most this many requests remain after the admission.
    NearLimit(u64),
}

/// The largest integer an RFC 9651 structured field holds.
const SF_INTEGER_MAX: u64 = 999_999_999_999_999;

pub(super) const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");
pub(super) const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
const X_LIMIT: HeaderName = HeaderName::from_static("x-ratelimit-limit");
const X_REMAINING: HeaderName = HeaderName::from_static("x-ratelimit-remaining");
const X_RESET: HeaderName = HeaderName::from_static("x-ratelimit-reset");
const PROBLEM_JSON: HeaderValue = HeaderValue::from_static("application/problem+json");

/// `d` in whole seconds, rounded up, at most [`SF_INTEGER_MAX`]: a client
/// that waits this long has waited at least `d`.
pub(super) fn seconds_up(d: Duration) -> u64 {
    let whole = d.as_secs().saturating_add(u64::from(d.subsec_nanos() > 0));
    whole.min(SF_INTEGER_MAX)
}

/// The `RateLimit-Policy` window: the quota's window to the nearest second,
/// at least 1.
fn window_seconds(window: Duration) -> u64 {
    let rounded = window.saturating_add(Duration::from_millis(500)).as_secs();
    rounded.clamp(1, SF_INTEGER_MAX)
}

/// `name` as an RFC 9651 String: quoted, `"` and `\` escaped.
pub(super) fn sf_string(name: &str) -> Result<String, ConfigError> {
    let mut out = String::with_capacity(name.len() + 2);
    out.push('"');
    for c in name.chars() {
        if !(' '..='~').contains(&c) {
            return Err(ConfigError::OutOfRange {
                field: "policy_name",
                value: u128::from(u32::from(c)),
                min: 0x20,
                max: 0x7e,
                unit: "character code",
                reason: "a structured-field string holds printable ASCII only",
            });
        }
        if c == '"' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    Ok(out)
}

/// RFC 9651 Byte Sequence: `:base64:`, padded.
pub(super) fn sf_bytes(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4 + 2);
    out.push(':');
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = u32::from(b[0]) << 16 | u32::from(b[1]) << 8 | u32::from(b[2]);
        for (i, shift) in [18, 12, 6, 0].into_iter().enumerate() {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[(n >> shift) as usize & 63]));
            } else {
                out.push('=');
            }
        }
    }
    out.push(':');
    out
}

/// `n` in decimal, on the stack.
struct Decimal {
    digits: [u8; 20],
    start: usize,
}

impl Decimal {
    fn new(mut n: u64) -> Self {
        let mut digits = [0; 20];
        let mut start = digits.len();
        loop {
            start -= 1;
            digits[start] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                return Self { digits, start };
            }
        }
    }

    fn as_bytes(&self) -> &[u8] {
        &self.digits[self.start..]
    }
}

/// One header value made of `parts`, in a single allocation of exactly
/// its length (a `format!`ed `String` grows several times, and one with
/// spare capacity costs `Bytes` a second allocation).
fn value(parts: &[&[u8]]) -> HeaderValue {
    let mut bytes = Vec::with_capacity(parts.iter().map(|p| p.len()).sum());
    for part in parts {
        bytes.extend_from_slice(part);
    }
    // Every header this module writes is printable ASCII: quoted names are
    // checked by `sf_string`, the rest are digits and base64.
    HeaderValue::try_from(bytes).expect("rate-limit headers are printable ASCII")
}

/// `RateLimit-Policy` without a partition key: `name;q=..;w=..`.
fn policy(name: &str, quota: Quota) -> Vec<u8> {
    let q = Decimal::new(quota.limit());
    let w = Decimal::new(window_seconds(quota.window()));
    let parts: [&[u8]; 5] = [name.as_bytes(), b";q=", q.as_bytes(), b";w=", w.as_bytes()];
    parts.concat()
}

/// Everything the layer needs to write its responses; one per layer,
/// shared by its services and their futures.
#[derive(Debug, Clone)]
pub(super) struct Respond {
    /// The policy's name as an RFC 9651 String.
    name: String,
    pub(super) quota: Quota,
    pub(super) admitted: AdmittedHeaders,
    pub(super) legacy: bool,
    /// `RateLimit-Policy` without a partition key: the same on every
    /// response, so written when the name is set.
    policy: Box<[u8]>,
}

/// The headers for one decision, made before the inner service runs and
/// set on its response.
#[derive(Debug)]
pub(super) struct Stamp {
    policy: HeaderValue,
    limit: HeaderValue,
    legacy: Option<[HeaderValue; 3]>,
}

impl Stamp {
    pub(super) fn apply(self, headers: &mut HeaderMap) {
        headers.insert(RATELIMIT_POLICY, self.policy);
        headers.insert(RATELIMIT, self.limit);
        if let Some([limit, remaining, reset]) = self.legacy {
            headers.insert(X_LIMIT, limit);
            headers.insert(X_REMAINING, remaining);
            headers.insert(X_RESET, reset);
        }
    }
}

impl Respond {
    /// The responses for `quota`: policy `"default"`, headers on every
    /// admitted response, no legacy headers.
    pub(super) fn new(quota: Quota) -> Self {
        let mut respond = Self {
            name: String::new(),
            quota,
            admitted: AdmittedHeaders::Always,
            legacy: false,
            policy: Box::default(),
        };
        respond.set_name("\"default\"".to_owned());
        respond
    }

    /// The policy's name as an RFC 9651 String.
    pub(super) fn name(&self) -> &str {
        &self.name
    }

    /// Sets the name, an RFC 9651 String (from [`sf_string`]).
    pub(super) fn set_name(&mut self, name: String) {
        self.policy = policy(&name, self.quota).into_boxed_slice();
        self.name = name;
    }

    /// The headers for decision `d`, with the partition key `pk` (an RFC
    /// 9651 Byte Sequence) if any.
    pub(super) fn stamp(&self, d: &Decision, pk: Option<&str>) -> Stamp {
        // The quota that decided: the limiter's, or the client's own (a
        // tier's, or one changed since the layer was made).
        let q = d.limit();
        let own;
        let policy_bytes: &[u8] = if q == self.quota.limit() && d.window() == self.quota.window() {
            &self.policy
        } else {
            own = policy(&self.name, Quota::new(q, d.window()));
            &own
        };
        let t = seconds_up(d.replenish_after());
        let (pk_prefix, pk): (&[u8], &[u8]) = match pk {
            Some(pk) => (b";pk=", pk.as_bytes()),
            None => (b"", b""),
        };
        let r = Decimal::new(d.remaining());
        let t_digits = Decimal::new(t);
        Stamp {
            policy: value(&[policy_bytes, pk_prefix, pk]),
            limit: value(&[
                self.name.as_bytes(),
                b";r=",
                r.as_bytes(),
                b";t=",
                t_digits.as_bytes(),
                pk_prefix,
                pk,
            ]),
            legacy: self.legacy.then(|| {
                [
                    HeaderValue::from(q),
                    HeaderValue::from(d.remaining()),
                    HeaderValue::from(t),
                ]
            }),
        }
    }

    /// Whether an admitted response with decision `d` carries the headers.
    pub(super) fn stamps_admitted(&self, d: &Decision) -> bool {
        match self.admitted {
            AdmittedHeaders::Always => true,
            AdmittedHeaders::Never => false,
            AdmittedHeaders::NearLimit(at_most) => d.remaining() <= at_most,
        }
    }

    /// The `429 Too Many Requests` for a denied decision.
    pub(super) fn too_many<R: From<String>>(&self, d: &Decision, pk: Option<&str>) -> Response<R> {
        // Rounded up, and never before the quota grows (`t`): a client that
        // waits `Retry-After` seconds is not refused again for the same
        // reason. At least 1 on a 429.
        let retry = seconds_up(d.retry_after())
            .max(seconds_up(d.replenish_after()))
            .max(1);
        let detail = if retry == SF_INTEGER_MAX {
            "The rate limit is exhausted for longer than the server can say.".to_owned()
        } else {
            format!(
                "The rate limit of {} requests per {} s is exhausted; retry in {retry} s.",
                self.quota.limit(),
                window_seconds(self.quota.window())
            )
        };
        let mut response = problem(StatusCode::TOO_MANY_REQUESTS, &detail);
        let headers = response.headers_mut();
        self.stamp(d, pk).apply(headers);
        headers.insert(RETRY_AFTER, HeaderValue::from(retry));
        response
    }
}

/// An RFC 9457 `application/problem+json` response.
pub(super) fn problem<R: From<String>>(status: StatusCode, detail: &str) -> Response<R> {
    let mut body = String::with_capacity(96 + detail.len());
    body.push_str("{\"type\":\"about:blank\",\"title\":");
    json_string(&mut body, status.canonical_reason().unwrap_or("Error"));
    let _ = write!(body, ",\"status\":{},\"detail\":", status.as_u16());
    json_string(&mut body, detail);
    body.push('}');
    let mut response = Response::new(R::from(body));
    *response.status_mut() = status;
    response.headers_mut().insert(CONTENT_TYPE, PROBLEM_JSON);
    response
}

/// Appends `s` as a JSON string.
fn json_string(out: &mut String, s: &str) {
    let plain = |b: u8| b >= 0x20 && b != b'"' && b != b'\\';
    if s.bytes().all(plain) {
        // Nearly every string the layer writes: copied whole.
        out.reserve(s.len() + 2);
        out.push('"');
        out.push_str(s);
        out.push('"');
        return;
    }
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if u32::from(c) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_round_up_and_saturate() {
        assert_eq!(seconds_up(Duration::ZERO), 0);
        assert_eq!(seconds_up(Duration::from_nanos(1)), 1);
        assert_eq!(seconds_up(Duration::from_millis(900)), 1);
        assert_eq!(seconds_up(Duration::from_secs(1)), 1);
        assert_eq!(seconds_up(Duration::from_millis(1_001)), 2);
        assert_eq!(seconds_up(Duration::MAX), SF_INTEGER_MAX);
        assert_eq!(window_seconds(Duration::from_millis(100)), 1);
        assert_eq!(window_seconds(Duration::from_nanos(60_000_000_004)), 60);
        assert_eq!(window_seconds(Duration::from_millis(1_500)), 2);
        assert_eq!(window_seconds(Duration::MAX), SF_INTEGER_MAX);
    }

    #[test]
    fn decimals_and_values() {
        for n in [0, 7, 10, 99, 100, 1_000_000_000, SF_INTEGER_MAX, u64::MAX] {
            assert_eq!(Decimal::new(n).as_bytes(), n.to_string().as_bytes());
        }
        assert_eq!(value(&[b"\"a\"", b";r=", b"", b"9"]), "\"a\";r=9");
        let mut respond = Respond::new(Quota::new(10, Duration::from_secs(60)));
        assert_eq!(&*respond.policy, b"\"default\";q=10;w=60");
        respond.set_name(sf_string("api").unwrap());
        assert_eq!(respond.name(), "\"api\"");
        assert_eq!(&*respond.policy, b"\"api\";q=10;w=60");
    }

    #[test]
    fn structured_strings_and_bytes() {
        assert_eq!(sf_string("default").unwrap(), "\"default\"");
        assert_eq!(sf_string("a\"b\\c").unwrap(), "\"a\\\"b\\\\c\"");
        assert_eq!(sf_string("é").unwrap_err().field(), "policy_name");
        assert_eq!(sf_string("tab\t").unwrap_err().field(), "policy_name");
        assert_eq!(sf_bytes(b""), "::");
        assert_eq!(sf_bytes(b"f"), ":Zg==:");
        assert_eq!(sf_bytes(b"fo"), ":Zm8=:");
        assert_eq!(sf_bytes(b"foo"), ":Zm9v:");
        assert_eq!(sf_bytes(b"foobar"), ":Zm9vYmFy:");
        assert_eq!(sf_bytes(&[0xff, 0xfe]), "://4=:");
    }

    #[test]
    fn problem_bodies_are_escaped_json() {
        let r: Response<String> = problem(StatusCode::BAD_REQUEST, "a \"quoted\"\nline\\");
        assert_eq!(r.status(), 400);
        assert_eq!(r.headers()[CONTENT_TYPE], "application/problem+json");
        assert_eq!(
            r.body(),
            "{\"type\":\"about:blank\",\"title\":\"Bad Request\",\"status\":400,\
             \"detail\":\"a \\\"quoted\\\"\\u000aline\\\\\"}"
        );
    }
}
