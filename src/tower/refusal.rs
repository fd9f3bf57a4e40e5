//! The responses the layer sends itself instead of calling the inner
//! service: why ([`Refusal`]), and the default answers, RFC 9457
//! `application/problem+json` bodies (`grpc` answers a gRPC call).

use core::fmt::Write as _;
use core::time::Duration;

use http::header::{Entry, CONTENT_TYPE, WWW_AUTHENTICATE};
use http::{HeaderValue, Response, StatusCode};

use super::key::Rejection;
use crate::check::CheckError;
use crate::decision::Decision;

#[cfg(doc)]
use super::RateLimitLayer;

/// Why the layer answers a request itself instead of calling the inner
/// service: what [`RateLimitLayer::respond_with`] is handed to build the
/// response.
///
/// # Examples
///
/// ```
/// use http::StatusCode;
/// use tollgate::tower::{Refusal, Rejection};
///
/// let rejection = Rejection::new(StatusCode::UNAUTHORIZED, "send an API key");
/// let refusal = Refusal::Rejected { rejection: &rejection };
/// assert_eq!(refusal.status(), StatusCode::UNAUTHORIZED);
/// let (request, ()) = http::Request::get("/").body(()).unwrap().into_parts();
/// let response = refusal.default_response(&request);
/// assert_eq!(response.headers()["content-type"], "application/problem+json");
/// assert!(response.body().contains("send an API key"));
/// ```
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub enum Refusal<'a> {
    /// The limiter refused the request: `429 Too Many Requests` by
    /// default.
    Limited {
        /// The limiter's decision.
        decision: &'a Decision,
        /// The wait the layer sends as `Retry-After`: whole seconds, at
        /// least 1, never before the quota grows, with any
        /// [`retry_jitter`](RateLimitLayer::retry_jitter) added.
        retry_after: Duration,
        /// The layer's [`policy_name`](RateLimitLayer::policy_name), as
        /// given (`"default"` unless set).
        policy: &'a str,
    },
    /// The limiter could not decide (a store out of reach, a cost it can
    /// never admit): `503 Service Unavailable` by default, which says
    /// nothing of the cause.
    Unavailable {
        /// Why. For operators only: it may quote a store's reply, the
        /// limiter's key names and the client's own key, so the default
        /// response never shows it.
        error: &'a CheckError,
    },
    /// The key extractor rejected the request: the rejection's status and
    /// detail by default.
    Rejected {
        /// The extractor's rejection.
        rejection: &'a Rejection,
    },
}

impl Refusal<'_> {
    /// The status the default response has: `429`, `503`, or the
    /// rejection's.
    #[must_use]
    pub fn status(&self) -> StatusCode {
        match self {
            Refusal::Limited { .. } => StatusCode::TOO_MANY_REQUESTS,
            Refusal::Unavailable { .. } => StatusCode::SERVICE_UNAVAILABLE,
            Refusal::Rejected { rejection } => rejection.status(),
        }
    }

    /// The sentence the default response gives: the quota (the wait is in
    /// the headers), that the limiter is unavailable (never why), or the
    /// rejection's.
    pub(super) fn detail(&self) -> std::borrow::Cow<'_, str> {
        match self {
            Refusal::Limited {
                decision,
                retry_after,
                ..
            } => {
                if retry_after.as_secs() >= super::sf::SF_INTEGER_MAX {
                    "The rate limit is exhausted for longer than the server can say.".into()
                } else {
                    // The quota that refused: the client's own, as the
                    // headers say. The wait is left to the headers (and a
                    // gRPC refusal's `RetryInfo`): a layer outside this one
                    // may raise it there, and a body or message that named
                    // this layer's own wait would then tell the client to
                    // come back too early.
                    format!(
                        "The rate limit of {} requests per {} s is exhausted; retry after the \
                         delay this response's headers give.",
                        decision.limit(),
                        super::sf::window_seconds(decision.window())
                    )
                    .into()
                }
            }
            Refusal::Unavailable { .. } => {
                "The rate limiter could not decide on this request; try again later.".into()
            }
            Refusal::Rejected { rejection } => rejection.detail().into(),
        }
    }
}

const PROBLEM_JSON: HeaderValue = HeaderValue::from_static("application/problem+json");

/// Sets a rejection's `WWW-Authenticate` challenge on `response` if it is
/// a `401` without one.
pub(super) fn set_challenge<R>(refusal: &Refusal<'_>, response: &mut Response<R>) {
    if let Refusal::Rejected { rejection } = refusal {
        if let Some(challenge) = rejection.challenge() {
            if response.status() == StatusCode::UNAUTHORIZED {
                if let Entry::Vacant(slot) = response.headers_mut().entry(WWW_AUTHENTICATE) {
                    slot.insert(challenge.clone());
                }
            }
        }
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
