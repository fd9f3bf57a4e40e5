//! The headers the layer writes: draft-ietf-httpapi-ratelimit-headers-11's
//! `RateLimit-Policy` and `RateLimit` (RFC 9651 structured fields) and
//! `Retry-After`; and what the layer answers when it refuses a request.

use core::cmp::Reverse;
use core::fmt;
use core::time::Duration;
use std::sync::Arc;

use http::header::{Entry, CACHE_CONTROL, RETRY_AFTER};
use http::request::Parts;
use http::{HeaderMap, HeaderName, HeaderValue, Response};

use super::grpc;
use super::refusal::Refusal;
use super::sf::{names, seconds_up, sf_string, window_seconds, Decimal, Line, SF_INTEGER_MAX};
use crate::check::{CheckError, Quota};
use crate::decision::Decision;
use crate::error::ConfigError;
use crate::sync::{Ordering, PlainAtomicU64};

/// Builds the layer's own responses: [`RateLimitLayer::respond_with`](super::RateLimitLayer::respond_with).
pub(super) type RespondFn = Arc<dyn Fn(&Refusal<'_>, &Parts) -> Response<String> + Send + Sync>;
/// Hears of failed checks: [`RateLimitLayer::on_check_error`](super::RateLimitLayer::on_check_error).
pub(super) type ErrorFn = Arc<dyn Fn(&CheckError, &Parts) + Send + Sync>;

/// The user's hooks into the layer's refusals.
#[derive(Clone, Default)]
pub(super) struct Hooks {
    pub(super) respond_with: Option<RespondFn>,
    pub(super) on_check_error: Option<ErrorFn>,
    /// Non-zero once a server wired so that the key extractor cannot work
    /// has been reported: the operator hears of it once, not per request.
    reported: Arc<PlainAtomicU64>,
}

impl fmt::Debug for Hooks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Hooks")
            .field("respond_with", &self.respond_with.is_some())
            .field("on_check_error", &self.on_check_error.is_some())
            .finish()
    }
}

/// When admitted responses carry the `RateLimit` and `RateLimit-Policy`
/// headers. A `429` always carries them; an admission that spent nothing
/// (the limiter admitted without counting, as a Redis limiter under
/// `FailPolicy::FailOpen` does while Redis is away) never does.
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

pub(super) const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");
pub(super) const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
const X_LIMIT: HeaderName = HeaderName::from_static("x-ratelimit-limit");
const X_REMAINING: HeaderName = HeaderName::from_static("x-ratelimit-remaining");
const X_RESET: HeaderName = HeaderName::from_static("x-ratelimit-reset");

/// `RateLimit` for one limit without a partition key, the common case:
/// `prefix` (the name and `;r=`), `r`, `;t=`, `t`, written into one
/// stack buffer. `None` if the name is too long for it.
fn short_limit(prefix: &[u8], r: u64, t: u64) -> Option<HeaderValue> {
    let mut buf = [0u8; 96];
    // Two numbers of at most 20 digits and `;t=`.
    if prefix.len() > buf.len() - 43 {
        return None;
    }
    let mut len = 0;
    for part in [
        prefix,
        Decimal::new(r.min(SF_INTEGER_MAX)).as_bytes(),
        b";t=",
        Decimal::new(t).as_bytes(),
    ] {
        buf[len..len + part.len()].copy_from_slice(part);
        len += part.len();
    }
    // Printable ASCII: a name checked by `sf_string`, and digits.
    Some(HeaderValue::from_bytes(&buf[..len]).expect("rate-limit headers are printable ASCII"))
}

/// One limit as the headers state it.
#[derive(Clone, Copy)]
struct Item {
    q: u64,
    w: Duration,
    r: u64,
    t: Duration,
}

/// Everything the layer needs to write its responses; one per layer,
/// shared by its services and their futures.
#[derive(Debug, Clone)]
pub(super) struct Respond {
    /// The policy's name as given, as an RFC 9651 String, and the names
    /// of the two items of a client held to two limits (`"name-1"`,
    /// `"name-2"`).
    plain: String,
    name: String,
    pair_names: [String; 2],
    /// `name;r=`, the start of every one-limit `RateLimit` value.
    limit_prefix: Box<[u8]>,
    /// The limiter's quota when the layer was made.
    pub(super) quota: Quota,
    pub(super) admitted: AdmittedHeaders,
    pub(super) legacy: bool,
    /// The most whole seconds added at random to a 429's `Retry-After`.
    pub(super) jitter: u64,
    /// Whether an admitted request carries its `Decision` in its
    /// extensions.
    pub(super) extension: bool,
    /// `RateLimit-Policy` for `quota` without a partition key, rendered
    /// once: most responses send it, and a clone costs no allocation.
    policy: HeaderValue,
    pub(super) hooks: Hooks,
    /// The layer's counts (the `metrics` feature).
    #[cfg(feature = "metrics")]
    pub(super) requests: Arc<super::metrics::Requests>,
}

/// What this layer adds to the inner service's response, decided before
/// the inner service runs: its headers (unless its settings leave them
/// off), and, when the request spent its last unit, what an inner layer's
/// refusal must be raised to.
#[derive(Debug)]
pub(super) struct Stamp {
    headers: Option<Headers>,
    /// Boxed: only a request that leaves no unit has one, and the stamp
    /// waits in every response future.
    hold: Option<Box<Hold>>,
}

/// The rate-limit headers for one decision.
#[derive(Debug)]
pub(super) struct Headers {
    policy: HeaderValue,
    limit: HeaderValue,
    /// Boxed: most layers send none, and the stamp waits in every
    /// response future.
    legacy: Option<Box<[HeaderValue; 3]>>,
}

/// With no request left (`r=0`): the seconds until there is one (`t`), no
/// inner layer's refusal may tell the client to come back earlier; and
/// this layer's items, which a gRPC refusal's `QuotaFailure` must name
/// where they are exhausted.
#[derive(Debug)]
struct Hold {
    secs: u64,
    items: Vec<HeldItem>,
}

/// One of this layer's items, as a held refusal names it.
#[derive(Debug)]
struct HeldItem {
    /// Its name as an RFC 9651 String, as the headers give it.
    sf: String,
    /// Its name as given.
    plain: String,
    q: u64,
    w: Duration,
    exhausted: bool,
}

impl Stamp {
    /// Sets the headers on a response, and holds an inner layer's refusal
    /// to this layer's wait. Where an inner layer has set the headers
    /// already, this layer's list members join its own (one list, inner
    /// layer's first, this layer's items renamed if an inner item has
    /// their name), the legacy headers keep whichever layer has fewer
    /// requests remaining (of two with as many, the later reset), and, when this layer's request left no unit
    /// (`r=0`), an inner refusal's `Retry-After` earlier than this layer's
    /// `t` is put back to it, as are a gRPC refusal's `RetryInfo` and
    /// `grpc-retry-pushback-ms`, and its `QuotaFailure` names this layer's
    /// exhausted items too. The wait is held whether or not this layer
    /// writes its headers.
    pub(super) fn apply(self, headers: &mut HeaderMap) {
        let Stamp {
            headers: ours,
            hold,
        } = self;
        let written = ours.map(|ours| ours.apply(headers));
        if let Some(hold) = hold {
            hold.apply(headers, written);
        }
    }
}

impl Hold {
    /// Holds an inner layer's refusal in `headers` (one with
    /// `Retry-After`) to this layer's wait; `written` is the suffix this
    /// layer's items were given in the headers (`Some(None)`: none), or
    /// `None` if this layer wrote no headers.
    #[cold]
    #[inline(never)]
    fn apply(self, headers: &mut HeaderMap, written: Option<Option<u64>>) {
        let Some(theirs) = headers
            .get(RETRY_AFTER)
            .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
        else {
            // Admitted: nothing to hold.
            return;
        };
        if theirs < self.secs {
            headers.insert(RETRY_AFTER, HeaderValue::from(self.secs));
        }
        if !headers.contains_key(grpc::STATUS_DETAILS)
            && !headers.contains_key(grpc::RETRY_PUSHBACK)
        {
            return;
        }
        // The names the items have in the headers: renamed as they were,
        // or, where this layer wrote none, as they would have been.
        let suffix = written.unwrap_or_else(|| {
            let names: Vec<&[u8]> = self.items.iter().map(|i| i.sf.as_bytes()).collect();
            free_suffix(headers, &names)
        });
        let exhausted: Vec<(String, u64, Duration)> = self
            .items
            .into_iter()
            .filter(|item| item.exhausted)
            .map(|item| {
                let id = match suffix {
                    Some(n) => format!("{}-{n}", item.plain),
                    None => item.plain,
                };
                (id, item.q, item.w)
            })
            .collect();
        grpc::hold(headers, self.secs.max(theirs), &exhausted);
    }
}

impl Headers {
    /// Sets the headers on a response, joining an inner layer's; the
    /// suffix this layer's items were renamed with, if they were.
    fn apply(self, headers: &mut HeaderMap) -> Option<u64> {
        let Headers {
            policy,
            limit,
            legacy,
        } = self;
        // The common case, no inner layer: each header looked up once.
        let mut limit = Some(limit);
        let stacked = match headers.entry(RATELIMIT_POLICY) {
            Entry::Vacant(slot) => {
                slot.insert(policy);
                if let Entry::Vacant(slot) = headers.entry(RATELIMIT) {
                    slot.insert(limit.take().expect("not taken yet"));
                    None
                } else {
                    // Only `RateLimit` was set before: join from scratch.
                    headers.remove(RATELIMIT_POLICY)
                }
            }
            Entry::Occupied(_) => Some(policy),
        };
        let mut suffix = None;
        if let (Some(policy), Some(limit)) = (stacked, limit) {
            let names: Vec<&[u8]> = names(policy.as_bytes()).collect();
            suffix = free_suffix(headers, &names);
            let (policy, limit) = match suffix {
                None => (policy, limit),
                Some(n) => (with_suffix(&policy, n), with_suffix(&limit, n)),
            };
            join(headers, RATELIMIT_POLICY, policy);
            join(headers, RATELIMIT, limit);
        }
        if let Some(legacy) = legacy {
            let [limit, remaining, reset] = *legacy;
            // The limit that binds: the fewest requests left, and of
            // those, the longest wait, as `Retry-After` holds to.
            let number = |v: &HeaderValue| v.to_str().ok()?.parse::<u64>().ok();
            let theirs = headers.get(X_REMAINING).and_then(number);
            let binds = theirs.is_none_or(|theirs| {
                let ours = (number(&remaining), Reverse(number(&reset)));
                let their_reset = headers.get(X_RESET).and_then(number);
                ours < (Some(theirs), Reverse(their_reset))
            });
            if binds {
                headers.insert(X_LIMIT, limit);
                headers.insert(X_REMAINING, remaining);
                headers.insert(X_RESET, reset);
            }
        }
        suffix
    }
}

/// `None` if none of `ours` (item names) is among the names of the
/// `RateLimit-Policy` and `RateLimit` items already in `headers`;
/// otherwise the first `n` from 2 on for which none of the names with
/// `-n` appended is.
fn free_suffix(headers: &HeaderMap, ours: &[&[u8]]) -> Option<u64> {
    let taken: Vec<&[u8]> = headers
        .get_all(RATELIMIT_POLICY)
        .iter()
        .chain(headers.get_all(RATELIMIT).iter())
        .flat_map(|line| names(line.as_bytes()))
        .collect();
    if taken.is_empty() {
        return None;
    }
    let clash = |n: Option<u64>| {
        ours.iter().any(|name| {
            let mut renamed = Line::new();
            put_name(&mut renamed, name, n);
            taken.contains(&renamed.bytes())
        })
    };
    if !clash(None) {
        return None;
    }
    // Each taken name rules out at most one `n`.
    (2..).map(Some).find(|&n| !clash(n)).flatten()
}

/// `name` (an RFC 9651 String, quotes included) with `-n` appended inside
/// its quotes, if `n` is given.
fn put_name(line: &mut Line, name: &[u8], n: Option<u64>) {
    match n {
        None => {
            line.put(name);
        }
        Some(n) => {
            line.put(&name[..name.len() - 1])
                .put(b"-")
                .put(Decimal::new(n).as_bytes())
                .put(b"\"");
        }
    }
}

/// This layer's `value`, each item's name with `-n` appended.
fn with_suffix(value: &HeaderValue, n: u64) -> HeaderValue {
    let bytes = value.as_bytes();
    let mut line = Line::new();
    let mut at = 0;
    for name in names(bytes) {
        // `name` is a slice of `bytes`: copy up to it, then it renamed.
        let start = name.as_ptr() as usize - bytes.as_ptr() as usize;
        line.put(&bytes[at..start]);
        put_name(&mut line, name, Some(n));
        at = start + name.len();
    }
    line.put(&bytes[at..]);
    line.value()
}

/// Adds `value`'s list members to header `name`.
fn join(headers: &mut HeaderMap, name: HeaderName, value: HeaderValue) {
    match headers.entry(name) {
        Entry::Vacant(slot) => {
            slot.insert(value);
        }
        Entry::Occupied(mut slot) => {
            let mut line = Line::new();
            for theirs in slot.iter() {
                if !theirs.as_bytes().trim_ascii().is_empty() {
                    line.put(theirs.as_bytes()).put(b", ");
                }
            }
            line.put(value.as_bytes());
            slot.insert(line.value());
        }
    }
}

impl Respond {
    /// The responses for `quota`: policy `"default"`, headers on every
    /// admitted response, no legacy headers.
    pub(super) fn new(quota: Quota) -> Self {
        let mut respond = Self {
            plain: String::new(),
            name: String::new(),
            pair_names: [String::new(), String::new()],
            limit_prefix: Box::default(),
            quota,
            admitted: AdmittedHeaders::Always,
            legacy: false,
            jitter: 0,
            extension: false,
            policy: HeaderValue::from_static(""),
            hooks: Hooks::default(),
            #[cfg(feature = "metrics")]
            requests: Arc::new(super::metrics::Requests::new("default")),
        };
        respond.set_name("default").expect("a valid name");
        respond
    }

    /// The policy's name as an RFC 9651 String.
    pub(super) fn name(&self) -> &str {
        &self.name
    }

    /// The policy's name as given.
    pub(super) fn plain_name(&self) -> &str {
        &self.plain
    }

    /// Sets the policy's name.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] if a structured field cannot carry it
    /// ([`sf_string`]).
    pub(super) fn set_name(&mut self, plain: &str) -> Result<(), ConfigError> {
        let name = sf_string(plain)?;
        self.plain = plain.to_owned();
        let bare = &name[..name.len() - 1];
        self.pair_names = [format!("{bare}-1\""), format!("{bare}-2\"")];
        let mut policy = Line::new();
        put_policy(
            &mut policy,
            &name,
            self.quota.limit(),
            self.quota.window(),
            None,
        );
        self.policy = policy.value();
        self.limit_prefix = [name.as_bytes(), b";r="].concat().into_boxed_slice();
        self.name = name;
        Ok(())
    }

    /// The headers for decision `d`, with the partition key `pk` (an RFC
    /// 9651 Byte Sequence) if any.
    pub(super) fn headers(&self, d: &Decision, pk: Option<&str>) -> Headers {
        let legacy = self.legacy.then(|| {
            Box::new([
                HeaderValue::from(d.limit()),
                HeaderValue::from(d.remaining()),
                HeaderValue::from(seconds_up(d.replenish_after())),
            ])
        });
        // The common case: one limit, the layer's own quota, no partition
        // key. The policy is the one rendered when the layer was made.
        if pk.is_none()
            && d.pair_limits().is_none()
            && d.limit() == self.quota.limit()
            && d.window() == self.quota.window()
        {
            let t = seconds_up(d.replenish_after());
            if let Some(limit) = short_limit(&self.limit_prefix, d.remaining(), t) {
                return Headers {
                    policy: self.policy.clone(),
                    limit,
                    legacy,
                };
            }
        }
        let mut limit = Line::new();
        let policy = match d.pair_limits() {
            // Two limits: each its own item, the first limit's first.
            Some(pair) => {
                let mut policy = Line::new();
                for (i, (fig, name)) in pair.iter().zip(&self.pair_names).enumerate() {
                    if i > 0 {
                        policy.put(b", ");
                        limit.put(b", ");
                    }
                    let item = Item {
                        q: fig.limit(),
                        w: fig.window(),
                        r: fig.remaining(),
                        t: fig.replenish_after(),
                    };
                    put_policy(&mut policy, name, item.q, item.w, pk);
                    put_limit(&mut limit, name, item, pk);
                }
                policy.value()
            }
            None => {
                // The quota that decided: the limiter's, or the client's
                // own (a tier's, or one changed since the layer was made).
                let item = Item {
                    q: d.limit(),
                    w: d.window(),
                    r: d.remaining(),
                    t: d.replenish_after(),
                };
                put_limit(&mut limit, &self.name, item, pk);
                if pk.is_none() && item.q == self.quota.limit() && item.w == self.quota.window() {
                    self.policy.clone()
                } else {
                    let mut policy = Line::new();
                    put_policy(&mut policy, &self.name, item.q, item.w, pk);
                    policy.value()
                }
            }
        };
        Headers {
            policy,
            limit: limit.value(),
            legacy,
        }
    }

    /// What an admitted request with decision `d` adds to the inner
    /// service's response, if anything: the headers if this layer's
    /// settings send them, and with no unit left, the hold on an inner
    /// layer's refusal.
    #[inline]
    pub(super) fn stamp(&self, d: &Decision, pk: Option<&str>) -> Option<Stamp> {
        let headers = self.stamps_admitted(d).then(|| self.headers(d, pk));
        let hold = (d.remaining() == 0).then(|| self.hold(d));
        // Moved out by the pattern: with neither, no stamp is made and
        // none dropped (`then_some` made one to drop, out of line, on
        // every admission without headers).
        match (headers, hold) {
            (None, None) => None,
            (headers, hold) => Some(Stamp { headers, hold }),
        }
    }

    /// The hold of an admission that left no unit.
    #[cold]
    #[inline(never)]
    fn hold(&self, d: &Decision) -> Box<Hold> {
        let items = match d.pair_limits() {
            Some(pair) => pair
                .iter()
                .zip(&self.pair_names)
                .enumerate()
                .map(|(i, (fig, sf))| HeldItem {
                    sf: sf.clone(),
                    plain: format!("{}-{}", self.plain, i + 1),
                    q: fig.limit(),
                    w: fig.window(),
                    exhausted: fig.remaining() == 0,
                })
                .collect(),
            None => vec![HeldItem {
                sf: self.name.clone(),
                plain: self.plain.clone(),
                q: d.limit(),
                w: d.window(),
                exhausted: true,
            }],
        };
        Box::new(Hold {
            secs: seconds_up(d.replenish_after()),
            items,
        })
    }

    /// Whether an admitted response with decision `d` carries the headers.
    /// An admission that spent nothing (the whole quota left after a unit
    /// check: a limiter that admitted without counting, as a Redis limiter
    /// under `FailPolicy::FailOpen` does while Redis is away) carries none,
    /// since no figure about the client's quota would be true.
    pub(super) fn stamps_admitted(&self, d: &Decision) -> bool {
        let counted = d.remaining() < d.limit();
        counted
            && match self.admitted {
                AdmittedHeaders::Always => true,
                AdmittedHeaders::Never => false,
                AdmittedHeaders::NearLimit(at_most) => d.remaining() <= at_most,
            }
    }

    /// The `Retry-After` of a refusal with decision `d`, in whole
    /// seconds.
    pub(super) fn retry_after(&self, d: &Decision) -> u64 {
        // Rounded up, and never before the quota grows (`t`): a client that
        // waits `Retry-After` seconds is not refused again for the same
        // reason. At least 1 on a 429.
        let retry = seconds_up(d.retry_after())
            .max(seconds_up(d.replenish_after()))
            .max(1);
        // Spread over the next `jitter` seconds, so that clients refused
        // together (at the end of a fixed window, say) do not all return
        // at once; only ever later than the quota grows.
        match self.jitter {
            0 => retry,
            jitter => retry
                .saturating_add(random_below(jitter + 1))
                .min(SF_INTEGER_MAX),
        }
    }

    /// The response to `request` for `refusal`: the user's, or the
    /// default; with the rate-limit headers and `Retry-After` if the
    /// limiter refused, and `pk` the partition key.
    #[cold]
    #[inline(never)]
    pub(super) fn refuse<R: From<String>>(
        &self,
        refusal: Refusal<'_>,
        request: &Parts,
        pk: Option<&str>,
    ) -> Response<R> {
        match (refusal, &self.hooks.on_check_error) {
            (Refusal::Unavailable { error }, Some(hear)) => hear(error, request),
            (Refusal::Rejected { rejection }, _) => {
                if let Some(advice) = rejection.advice() {
                    self.misconfigured(advice, request);
                }
            }
            _ => {}
        }
        let response = match &self.hooks.respond_with {
            Some(respond) => respond(&refusal, request),
            None => refusal.default_response(request),
        };
        let mut response = response.map(R::from);
        super::refusal::set_challenge(&refusal, &mut response);
        if response.status().is_success() {
            // A refusal in a `200` (gRPC's form, or one `respond_with`
            // built): no cache may keep it for another request.
            if let Entry::Vacant(slot) = response.headers_mut().entry(CACHE_CONTROL) {
                slot.insert(grpc::NO_STORE);
            }
        }
        if let Refusal::Limited {
            decision,
            retry_after,
            ..
        } = refusal
        {
            let headers = response.headers_mut();
            let _ = self.headers(decision, pk).apply(headers);
            headers.insert(RETRY_AFTER, HeaderValue::from(retry_after.as_secs()));
        }
        #[cfg(feature = "metrics")]
        self.requests.responded(request, &response);
        response
    }
}

/// The layer's rate-limit headers for a [`Decision`], for servers that
/// check a limiter themselves rather than through
/// [`RateLimitLayer`](super::RateLimitLayer) (plain hyper, actix-web, or a
/// handler that checks by hand): `RateLimit-Policy`, `RateLimit`,
/// `Retry-After` on a refusal, and with
/// [`legacy_headers`](RateLimitHeaders::legacy_headers) the
/// `X-RateLimit-*` headers, written exactly as a layer with the same
/// settings writes them (the same rounding up of `w`, `t` and
/// `Retry-After`, the same caps, the same two items for a pair of limits,
/// the same joining of headers already in the map).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use http::HeaderMap;
/// use tollgate::tower::RateLimitHeaders;
/// use tollgate::TokenBucket;
///
/// let limiter = TokenBucket::builder().rate(2, Duration::from_secs(60)).build()?;
/// let headers = RateLimitHeaders::new().policy_name("api")?.legacy_headers(true);
///
/// // In a handler: check, then answer with the headers.
/// let decision = limiter.check("alice");
/// let mut response = HeaderMap::new();
/// headers.write(&decision, &mut response);
/// assert_eq!(response["ratelimit-policy"], "\"api\";q=2;w=60");
/// assert_eq!(response["ratelimit"], "\"api\";r=1;t=30");
/// assert_eq!(response["x-ratelimit-remaining"], "1");
///
/// let _ = limiter.check("alice");
/// let refused = limiter.check("alice");
/// assert!(refused.is_denied()); // answer 429 Too Many Requests, with:
/// let mut response = HeaderMap::new();
/// headers.write(&refused, &mut response);
/// assert_eq!(response["retry-after"], "30");
/// assert_eq!(response["ratelimit"], "\"api\";r=0;t=30");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct RateLimitHeaders {
    respond: Respond,
}

impl RateLimitHeaders {
    /// The layer's defaults: policy `"default"`, headers on every
    /// admitted decision, no legacy headers.
    #[must_use]
    pub fn new() -> Self {
        Self {
            // The quota only saves rendering a policy that matches it;
            // what is written is the decision's.
            respond: Respond::new(Quota::new(1, Duration::from_secs(1))),
        }
    }

    /// Names the policy in the headers (`"default"` unless set), as
    /// [`RateLimitLayer::policy_name`](super::RateLimitLayer::policy_name).
    ///
    /// # Errors
    ///
    /// [`ConfigError`] naming `policy_name` if `name` holds a character
    /// that is not printable ASCII, which a structured field cannot carry.
    pub fn policy_name(mut self, name: &str) -> Result<Self, ConfigError> {
        self.respond.set_name(name)?;
        Ok(self)
    }

    /// Also writes `X-RateLimit-Limit`, `X-RateLimit-Remaining` and
    /// `X-RateLimit-Reset`, as
    /// [`RateLimitLayer::legacy_headers`](super::RateLimitLayer::legacy_headers).
    #[must_use]
    pub fn legacy_headers(mut self, on: bool) -> Self {
        self.respond.legacy = on;
        self
    }

    /// When an admitted decision gets the headers, as
    /// [`RateLimitLayer::admitted_headers`](super::RateLimitLayer::admitted_headers):
    /// always unless set. A refusal always does, and an admission that
    /// spent nothing never does.
    #[must_use]
    pub fn admitted_headers(mut self, when: AdmittedHeaders) -> Self {
        self.respond.admitted = when;
        self
    }

    /// Writes the headers for `decision` into `headers`: on a refusal
    /// ([`Decision::is_denied`]) the rate-limit headers and `Retry-After`
    /// (whole seconds, rounded up, at least 1, never before `t`); on an
    /// admission the rate-limit headers if
    /// [`admitted_headers`](RateLimitHeaders::admitted_headers) says so.
    /// `RateLimit-Policy` and `RateLimit` already in `headers` (another
    /// limit's) are joined, as stacked layers join theirs.
    pub fn write(&self, decision: &Decision, headers: &mut HeaderMap) {
        self.write_with(decision, None, headers);
    }

    /// [`write`](RateLimitHeaders::write), with the `pk` parameter: the
    /// partition key `key` as a structured-field byte sequence, as
    /// [`RateLimitLayer::partition_key`](super::RateLimitLayer::partition_key)
    /// writes it. The client sees it: pass something it may see.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use http::HeaderMap;
    /// use tollgate::tower::RateLimitHeaders;
    /// use tollgate::FixedWindow;
    ///
    /// let limiter = FixedWindow::builder().limit(5).window(Duration::from_secs(60)).build()?;
    /// let mut headers = HeaderMap::new();
    /// RateLimitHeaders::new().write_partitioned(&limiter.check("acct-7"), b"acct-7", &mut headers);
    /// assert_eq!(headers["ratelimit-policy"], "\"default\";q=5;w=60;pk=:YWNjdC03:");
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn write_partitioned(&self, decision: &Decision, key: &[u8], headers: &mut HeaderMap) {
        self.write_with(decision, Some(&super::sf::sf_bytes(key)), headers);
    }

    fn write_with(&self, decision: &Decision, pk: Option<&str>, headers: &mut HeaderMap) {
        let respond = &self.respond;
        if decision.is_denied() {
            let _ = respond.headers(decision, pk).apply(headers);
            headers.insert(
                RETRY_AFTER,
                HeaderValue::from(respond.retry_after(decision)),
            );
        } else if respond.stamps_admitted(decision) {
            let _ = respond.headers(decision, pk).apply(headers);
        }
    }
}

impl Default for RateLimitHeaders {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for RateLimitHeaders {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitHeaders")
            .field("policy", &self.respond.plain_name())
            .field("admitted_headers", &self.respond.admitted)
            .field("legacy_headers", &self.respond.legacy)
            .finish()
    }
}

impl Respond {
    /// Tells the operator, once, that the server is wired so that the key
    /// extractor cannot work (`advice` says how to wire it): through
    /// `on_check_error`, and with the `tracing` feature an `ERROR` event.
    #[cold]
    fn misconfigured(&self, advice: &str, request: &Parts) {
        // Relaxed: a flag that publishes nothing; of requests rejected at
        // once, the one whose swap finds it clear reports.
        if self.hooks.reported.swap(1, Ordering::Relaxed) != 0 {
            return;
        }
        #[cfg(feature = "tracing")]
        tracing::error!(
            target: "tollgate",
            policy = %self.plain,
            advice,
            "the rate limiter cannot key requests; every request is answered 500"
        );
        if let Some(hear) = &self.hooks.on_check_error {
            hear(&CheckError::new(advice.to_owned()), request);
        }
    }
}

/// `name;q=..;w=..[;pk=..]`.
fn put_policy(line: &mut Line, name: &str, q: u64, w: Duration, pk: Option<&str>) {
    line.put(name.as_bytes())
        .put(b";q=")
        .put(Decimal::new(q.min(SF_INTEGER_MAX)).as_bytes())
        .put(b";w=")
        .put(Decimal::new(window_seconds(w)).as_bytes());
    if let Some(pk) = pk {
        line.put(b";pk=").put(pk.as_bytes());
    }
}

/// `name;r=..;t=..[;pk=..]`.
fn put_limit(line: &mut Line, name: &str, item: Item, pk: Option<&str>) {
    line.put(name.as_bytes())
        .put(b";r=")
        .put(Decimal::new(item.r.min(SF_INTEGER_MAX)).as_bytes())
        .put(b";t=")
        .put(Decimal::new(seconds_up(item.t)).as_bytes());
    if let Some(pk) = pk {
        line.put(b";pk=").put(pk.as_bytes());
    }
}

/// A number below `n` (`n` > 0), from a per-thread xorshift generator
/// seeded by std's random hash keys: spread, not secrecy.
fn random_below(n: u64) -> u64 {
    use core::cell::Cell;
    use core::hash::BuildHasher;
    thread_local! {
        static STATE: Cell<u64> = Cell::new(
            std::collections::hash_map::RandomState::new().hash_one(0u8) | 1,
        );
    }
    STATE.with(|state| {
        let mut x = state.get();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        state.set(x);
        x % n
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_values_and_the_rendered_policy() {
        assert_eq!(
            short_limit(b"\"a\";r=", 9, u64::MAX).unwrap(),
            "\"a\";r=9;t=18446744073709551615"
        );
        assert!(short_limit(&[b'x'; 54], 0, 0).is_none());
        assert!(short_limit(&[b'x'; 53], u64::MAX, u64::MAX).is_some());
        let mut respond = Respond::new(Quota::new(10, Duration::from_secs(60)));
        assert_eq!(respond.policy, "\"default\";q=10;w=60");
        respond.set_name("api").unwrap();
        assert_eq!(respond.name(), "\"api\"");
        assert_eq!(respond.policy, "\"api\";q=10;w=60");
        assert_eq!(respond.pair_names, ["\"api-1\"", "\"api-2\""]);
    }

    #[test]
    fn list_members_are_renamed() {
        let ours = HeaderValue::from_static("\"p-1\";q=3;w=1, \"p-2\";q=5;w=60");
        assert_eq!(
            with_suffix(&ours, 2),
            "\"p-1-2\";q=3;w=1, \"p-2-2\";q=5;w=60"
        );
        let mut headers = HeaderMap::new();
        assert_eq!(
            free_suffix(&headers, &names(ours.as_bytes()).collect::<Vec<_>>()),
            None
        );
        headers.insert(
            RATELIMIT_POLICY,
            HeaderValue::from_static("\"p-2\";q=1;w=1"),
        );
        headers.insert(RATELIMIT, HeaderValue::from_static("\"p-1-2\";r=0;t=1"));
        assert_eq!(
            free_suffix(&headers, &names(ours.as_bytes()).collect::<Vec<_>>()),
            Some(3)
        );
        headers.insert(RATELIMIT_POLICY, HeaderValue::from_static("\"q\";q=1;w=1"));
        headers.insert(RATELIMIT, HeaderValue::from_static("\"q\";r=0;t=1"));
        assert_eq!(
            free_suffix(&headers, &names(ours.as_bytes()).collect::<Vec<_>>()),
            None
        );
    }
}
