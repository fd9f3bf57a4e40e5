//! Which client a request belongs to: the [`KeyExtractor`] trait and the
//! built-in extractors.

use core::fmt;
use std::borrow::Cow;
use std::sync::Arc;

use http::header::{AUTHORIZATION, PROXY_AUTHORIZATION};
use http::request::Parts;
use http::{HeaderName, HeaderValue, StatusCode};

use super::sf::{base64, base64_decode};

#[cfg(doc)]
use super::{PeerIp, TrustedProxyIp};

/// Finds the key a request is limited under, from its head (method, URI,
/// headers and extensions; the body is never read).
///
/// Built-ins: [`PeerIp`] (the connection's address), [`TrustedProxyIp`]
/// (the client behind trusted proxies), [`HeaderKey`] (an API key header),
/// [`GlobalKey`] (one budget for everyone) and [`KeyFn`] (a closure).
///
/// # Examples
///
/// ```
/// use http::request::Parts;
/// use tollgate::tower::{Extraction, KeyExtractor};
///
/// /// Limits each tenant named in the path `/tenants/{id}/...`.
/// #[derive(Debug, Clone)]
/// struct Tenant;
///
/// impl KeyExtractor for Tenant {
///     type Key = String;
///     fn extract(&self, request: &Parts) -> Extraction<String> {
///         match request.uri.path().strip_prefix("/tenants/") {
///             Some(rest) => Extraction::Key(rest.split('/').next().unwrap_or("").to_owned()),
///             None => Extraction::Skip,
///         }
///     }
/// }
///
/// let (parts, ()) = http::Request::get("/tenants/acme/orders").body(()).unwrap().into_parts();
/// assert_eq!(Tenant.extract(&parts), Extraction::Key("acme".to_owned()));
/// ```
pub trait KeyExtractor: Send + Sync + 'static {
    /// The key the limiter is keyed by.
    type Key: Send + Sync + 'static;

    /// The key for this request, or what to do without one.
    fn extract(&self, request: &Parts) -> Extraction<Self::Key>;
}

/// What a [`KeyExtractor`] found.
///
/// # Examples
///
/// ```
/// use http::StatusCode;
/// use tollgate::tower::{Extraction, Rejection};
///
/// let no_key: Extraction<String> =
///     Extraction::Reject(Rejection::new(StatusCode::UNAUTHORIZED, "send an API key"));
/// assert!(matches!(no_key, Extraction::Reject(r) if r.status() == 401));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Extraction<K> {
    /// Limit the request under this key.
    Key(K),
    /// Let the request through unlimited: no check, no rate-limit headers.
    Skip,
    /// Answer at once with this response; the inner service is not called.
    Reject(Rejection),
}

/// A response the layer sends instead of calling the inner service: a
/// status and a sentence for the `detail` of its `application/problem+json`
/// body.
///
/// # Examples
///
/// ```
/// use http::StatusCode;
/// use tollgate::tower::Rejection;
///
/// let r = Rejection::new(StatusCode::BAD_REQUEST, "the X-Api-Key header is not ASCII");
/// assert_eq!((r.status(), r.detail()), (StatusCode::BAD_REQUEST, "the X-Api-Key header is not ASCII"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    status: StatusCode,
    detail: Cow<'static, str>,
    /// The `WWW-Authenticate` challenge of a `401`.
    challenge: Option<HeaderValue>,
    /// For the operator, never the client: how the server is wired wrong,
    /// where that is why the request is rejected.
    misconfigured: Option<Arc<str>>,
}

impl Rejection {
    /// A rejection with `status`, explained by `detail`.
    pub fn new(status: StatusCode, detail: impl Into<Cow<'static, str>>) -> Self {
        Self {
            status,
            detail: detail.into(),
            challenge: None,
            misconfigured: None,
        }
    }

    /// The same rejection with a `WWW-Authenticate` challenge, which RFC
    /// 9110 (section 15.5.2) requires of every `401 Unauthorized`: the
    /// layer sets it on a `401` answer to this rejection (its default
    /// response, or one built by
    /// [`respond_with`](super::RateLimitLayer::respond_with) that has
    /// none), and on no other status. [`HeaderKey`] gives its `401`s one.
    ///
    /// # Examples
    ///
    /// ```
    /// use http::{HeaderValue, StatusCode};
    /// use tollgate::tower::{Refusal, Rejection};
    ///
    /// let rejection = Rejection::new(StatusCode::UNAUTHORIZED, "sign in first")
    ///     .with_challenge(HeaderValue::from_static("Bearer realm=\"api\""));
    /// let (request, ()) = http::Request::get("/").body(()).unwrap().into_parts();
    /// let response = Refusal::Rejected { rejection: &rejection }.default_response(&request);
    /// assert_eq!(response.headers()["www-authenticate"], "Bearer realm=\"api\"");
    /// ```
    #[must_use]
    pub fn with_challenge(self, challenge: HeaderValue) -> Self {
        Self {
            challenge: Some(challenge),
            ..self
        }
    }

    /// The `WWW-Authenticate` challenge of a `401`, if it has one.
    #[must_use]
    pub fn challenge(&self) -> Option<&HeaderValue> {
        self.challenge.as_ref()
    }

    /// A `500 Internal Server Error` for a server wired so that the
    /// extractor cannot work: the client is told nothing more, and the
    /// layer tells the operator `advice`.
    pub(super) fn misconfigured(advice: Arc<str>) -> Self {
        Self {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            detail: Cow::Borrowed("The server could not process this request."),
            challenge: None,
            misconfigured: Some(advice),
        }
    }

    /// What the operator is told of a server wired wrong, if that is why.
    pub(super) fn advice(&self) -> Option<&str> {
        self.misconfigured.as_deref()
    }

    /// The response's status.
    #[must_use]
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// The `detail` of the problem body.
    #[must_use]
    pub fn detail(&self) -> &str {
        &self.detail
    }
}

/// What [`HeaderKey`] does with a request that lacks the header.
///
/// # Examples
///
/// ```
/// use tollgate::tower::MissingKey;
///
/// assert_eq!(MissingKey::default(), MissingKey::Unauthorized);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MissingKey {
    /// `401 Unauthorized` (the default).
    #[default]
    Unauthorized,
    /// `400 Bad Request`.
    BadRequest,
    /// Let it through unlimited, for routes where anonymous requests are
    /// limited by another layer or refused further in.
    Skip,
}

/// What [`HeaderKey`] answers a request whose key is longer than its
/// bound ([`HeaderKey::max_len`]).
///
/// # Examples
///
/// ```
/// use tollgate::tower::LongKey;
///
/// assert_eq!(LongKey::default(), LongKey::HeaderFieldsTooLarge);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LongKey {
    /// `431 Request Header Fields Too Large` (the default).
    #[default]
    HeaderFieldsTooLarge,
    /// `400 Bad Request`.
    BadRequest,
}

/// Keys each request by the value of a header, such as an API key.
///
/// The key is the header's value without the spaces and tabs around it
/// (HTTP/2 and HTTP/3 pass them on, so `" k"` and `"k"` are one client),
/// as a [`String`], the default key type of a limiter. A request without
/// the header (or with an empty or blank one) gets the configured
/// [`MissingKey`] outcome: `401 Unauthorized` unless told otherwise, with
/// a `WWW-Authenticate` [challenge](HeaderKey::challenge). A
/// value that is not visible ASCII, and a request that carries the header
/// more than once (which line names the client is ambiguous), are
/// answered `400 Bad Request` whatever the setting, so that no client can
/// skip the limit, or choose between two keys, by what it sends.
///
/// The `Authorization` and `Proxy-Authorization` headers hold
/// credentials, `<scheme> <credentials>`, whose scheme RFC 9110 makes
/// case-insensitive (section 11.1) and which one or more spaces may
/// follow (11.4): their key is the scheme in lower case, one space, and
/// the credentials as sent, so that `Basic X`, `basic X` and `BASIC   X`
/// are one client with one quota (`basic X`), while `Basic x` is another.
/// (Tabs after the scheme fold too.) A value with no blank in it, a bare
/// token with no scheme apart, is keyed as sent. gRPC's `authorization`
/// metadata is this header, and folds the same way.
///
/// A header named with the suffix `-bin` is binary metadata, as gRPC
/// sends it: base64, padded or not. Its key is the bytes it encodes
/// (written as padded base64), so `AAE=` and `AAE` are one client, and a
/// value that is not base64 is answered `400 Bad Request`.
///
/// A key (without the blanks around it; for credentials, folded; for
/// binary metadata, written padded) is at most [`max_len`](HeaderKey::max_len) bytes (256 unless
/// set), and a longer one is refused ([`LongKey`]: `431 Request Header
/// Fields Too Large` unless set) before the limiter sees it: the limiter
/// stores each key it tracks, so the bound on its clients
/// ([`max_clients`](crate::Builder::max_clients)) times this bound bounds
/// the bytes its keys can hold, however long the header lines a server
/// accepts.
///
/// # Examples
///
/// ```
/// use http::StatusCode;
/// use tollgate::tower::{Extraction, HeaderKey, KeyExtractor, LongKey, MissingKey};
///
/// let api_key = HeaderKey::new(http::HeaderName::from_static("x-api-key"));
/// let (with, ()) = http::Request::get("/").header("x-api-key", "k-123").body(()).unwrap().into_parts();
/// assert_eq!(api_key.extract(&with), Extraction::Key("k-123".to_owned()));
///
/// let (without, ()) = http::Request::get("/").body(()).unwrap().into_parts();
/// assert!(matches!(api_key.extract(&without), Extraction::Reject(r) if r.status() == StatusCode::UNAUTHORIZED));
/// let lenient = api_key.clone().on_missing(MissingKey::Skip);
/// assert_eq!(lenient.extract(&without), Extraction::Skip);
///
/// let short = api_key.max_len(4).on_too_long(LongKey::BadRequest);
/// assert!(matches!(short.extract(&with), Extraction::Reject(r) if r.status() == StatusCode::BAD_REQUEST));
/// ```
#[derive(Debug, Clone)]
pub struct HeaderKey {
    name: HeaderName,
    missing: MissingKey,
    max_len: usize,
    too_long: LongKey,
    challenge: HeaderValue,
}

impl HeaderKey {
    /// Keys by the header `name`; a missing header is `401 Unauthorized`
    /// (with the [default challenge](HeaderKey::challenge)), a key over
    /// 256 bytes `431 Request Header Fields Too Large`.
    ///
    /// `name` is a [`HeaderName`] (such as `http::header::AUTHORIZATION`)
    /// or anything that converts into one: a `&str` or `String`, in any
    /// case (`"X-Api-Key"` is the header `x-api-key`). For a name that
    /// comes from configuration, [`try_new`](HeaderKey::try_new) returns
    /// the error instead of panicking.
    ///
    /// # Panics
    ///
    /// If `name` is not a valid header name (empty, or with a character a
    /// header name cannot hold, such as a space or a colon); the message
    /// quotes it.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::tower::{Extraction, HeaderKey, KeyExtractor};
    ///
    /// let api_key = HeaderKey::new("X-Api-Key");
    /// let (request, ()) = http::Request::get("/").header("x-api-key", "k-1").body(()).unwrap().into_parts();
    /// assert_eq!(api_key.extract(&request), Extraction::Key("k-1".to_owned()));
    /// let bearer = HeaderKey::new(http::header::AUTHORIZATION);
    /// # let _ = bearer;
    /// ```
    #[must_use]
    #[track_caller]
    pub fn new<N>(name: N) -> Self
    where
        N: TryInto<HeaderName> + Clone + fmt::Debug,
    {
        match Self::try_new(name.clone()) {
            Ok(key) => key,
            Err(_) => panic!("HeaderKey::new: {name:?} is not a valid header name"),
        }
    }

    /// [`new`](HeaderKey::new), answering an invalid header name with the
    /// conversion's error rather than a panic: for a `&str` or `String`,
    /// [`http::header::InvalidHeaderName`]; for a [`HeaderName`], none can
    /// occur.
    ///
    /// # Errors
    ///
    /// The conversion's error if `name` is not a valid header name (empty,
    /// or with a character a header name cannot hold).
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::tower::HeaderKey;
    ///
    /// assert!(HeaderKey::try_new("x-api-key").is_ok());
    /// assert!(HeaderKey::try_new("x api key").is_err());
    /// assert!(HeaderKey::try_new(String::new()).is_err());
    /// ```
    pub fn try_new<N: TryInto<HeaderName>>(name: N) -> Result<Self, N::Error> {
        Ok(Self::named(name.try_into()?))
    }

    fn named(name: HeaderName) -> Self {
        let challenge = if name == AUTHORIZATION {
            HeaderValue::from_static("Bearer")
        } else {
            // A header name is a token: a valid quoted string.
            HeaderValue::try_from(format!("ApiKey header=\"{name}\""))
                .expect("a header name is a valid header value")
        };
        Self {
            name,
            missing: MissingKey::Unauthorized,
            max_len: 256,
            too_long: LongKey::HeaderFieldsTooLarge,
            challenge,
        }
    }

    /// The `WWW-Authenticate` challenge of the `401 Unauthorized` that
    /// answers a request without the header (RFC 9110, section 15.5.2,
    /// requires one on every `401`). By default `Bearer` for the
    /// `Authorization` header, and for any other header `ApiKey
    /// header="<name>"` (the header's name, lowercase), a challenge that
    /// names the header an API key goes in; set your own for another
    /// scheme, such as `Basic realm="api"`.
    ///
    /// # Examples
    ///
    /// ```
    /// use http::header::{AUTHORIZATION, PROXY_AUTHORIZATION};
    /// use http::{HeaderValue, StatusCode};
    /// use tollgate::tower::{Extraction, HeaderKey, KeyExtractor};
    ///
    /// let basic = HeaderKey::new(AUTHORIZATION)
    ///     .challenge(HeaderValue::from_static("Basic realm=\"api\""));
    /// let (request, ()) = http::Request::get("/").body(()).unwrap().into_parts();
    /// let Extraction::Reject(rejection) = basic.extract(&request) else { panic!() };
    /// assert_eq!(rejection.status(), StatusCode::UNAUTHORIZED);
    /// assert_eq!(rejection.challenge().unwrap(), "Basic realm=\"api\"");
    /// ```
    #[must_use]
    pub fn challenge(self, challenge: HeaderValue) -> Self {
        Self { challenge, ..self }
    }

    /// What to do with a request that lacks the header.
    #[must_use]
    pub fn on_missing(self, missing: MissingKey) -> Self {
        Self { missing, ..self }
    }

    /// The longest key accepted, in bytes (256 unless set; at least 1).
    #[must_use]
    pub fn max_len(self, bytes: usize) -> Self {
        Self {
            max_len: bytes.max(1),
            ..self
        }
    }

    /// How to answer a key longer than [`max_len`](HeaderKey::max_len).
    #[must_use]
    pub fn on_too_long(self, too_long: LongKey) -> Self {
        Self { too_long, ..self }
    }
}

impl KeyExtractor for HeaderKey {
    type Key = String;

    fn extract(&self, request: &Parts) -> Extraction<String> {
        let mut lines = request.headers.get_all(&self.name).iter();
        let line = match (lines.next(), lines.next()) {
            (Some(line), None) => line,
            (None, _) => return self.missing(),
            // Which line names the client is anyone's guess; whichever
            // the layer took, a client could choose the other for a key
            // or, with an empty one, to be skipped.
            (Some(_), Some(_)) => {
                return Extraction::Reject(Rejection::new(
                    StatusCode::BAD_REQUEST,
                    format!("the {} header appears more than once", self.name),
                ))
            }
        };
        let Ok(value) = line.to_str() else {
            return Extraction::Reject(Rejection::new(
                StatusCode::BAD_REQUEST,
                format!("the {} header is not visible ASCII", self.name),
            ));
        };
        // HTTP/2 and HTTP/3 do not strip the whitespace around a field
        // value as HTTP/1's parser does: the key is the value without it.
        let key = value.trim_matches([' ', '\t']);
        if key.is_empty() {
            return self.missing();
        }
        if let Some((scheme, credentials)) = self.credentials(key) {
            // `scheme credentials`, folded: one client however it is
            // spelled. Measured before it is written.
            if scheme.len() + 1 + credentials.len() > self.max_len {
                return self.too_long();
            }
            let mut folded = String::with_capacity(scheme.len() + 1 + credentials.len());
            folded.push_str(scheme);
            folded.make_ascii_lowercase();
            folded.push(' ');
            folded.push_str(credentials);
            return Extraction::Key(folded);
        }
        // A binary value's padded form is never shorter than what was
        // sent: too long as sent, too long decoded, and refused before
        // it is decoded.
        if key.len() > self.max_len {
            return self.too_long();
        }
        if !self.name.as_str().ends_with("-bin") {
            return Extraction::Key(key.to_owned());
        }
        // Binary metadata (gRPC's `-bin` headers) is base64, padded or
        // not: one client whichever it sends, so the key is the decoded
        // bytes, written back padded.
        let Some(bytes) = base64_decode(key.as_bytes()) else {
            return Extraction::Reject(Rejection::new(
                StatusCode::BAD_REQUEST,
                format!("the {} header is not base64", self.name),
            ));
        };
        let mut padded = String::with_capacity(bytes.len().div_ceil(3) * 4);
        base64(&bytes, true, &mut padded);
        if padded.len() > self.max_len {
            return self.too_long();
        }
        Extraction::Key(padded)
    }
}

impl HeaderKey {
    /// For `Authorization` and `Proxy-Authorization`, a `key` (trimmed)
    /// split into its scheme and its credentials, without the blanks
    /// between them; `None` for any other header, or a value with no
    /// blank (no scheme apart from its credentials).
    fn credentials<'k>(&self, key: &'k str) -> Option<(&'k str, &'k str)> {
        if self.name != AUTHORIZATION && self.name != PROXY_AUTHORIZATION {
            return None;
        }
        let (scheme, credentials) = key.split_once([' ', '\t'])?;
        Some((scheme, credentials.trim_start_matches([' ', '\t'])))
    }

    /// The refusal of a key longer than `max_len`.
    fn too_long(&self) -> Extraction<String> {
        let status = match self.too_long {
            LongKey::HeaderFieldsTooLarge => StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            LongKey::BadRequest => StatusCode::BAD_REQUEST,
        };
        Extraction::Reject(Rejection::new(
            status,
            format!(
                "the {} header is longer than {} bytes",
                self.name, self.max_len
            ),
        ))
    }

    /// The outcome for a request without a key.
    fn missing(&self) -> Extraction<String> {
        let detail = format!("this route needs the {} header", self.name);
        Extraction::Reject(match self.missing {
            MissingKey::Skip => return Extraction::Skip,
            MissingKey::Unauthorized => Rejection::new(StatusCode::UNAUTHORIZED, detail)
                .with_challenge(self.challenge.clone()),
            MissingKey::BadRequest => Rejection::new(StatusCode::BAD_REQUEST, detail),
        })
    }
}

/// Keys every request alike: one budget shared by all clients, a global
/// limit, such as a ceiling on a whole route's traffic (stack it with a
/// per-client layer to have both). The key is `()`, so the limiter is
/// built with `.key_type::<()>()`.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tollgate::tower::{Extraction, GlobalKey, KeyExtractor, RateLimitLayer};
/// use tollgate::TokenBucket;
///
/// let everyone = TokenBucket::builder()
///     .rate(1_000, Duration::from_secs(1))
///     .key_type::<()>()
///     .build()?;
/// let layer = RateLimitLayer::new(everyone, GlobalKey);
/// let (parts, ()) = http::Request::get("/").body(()).unwrap().into_parts();
/// assert_eq!(GlobalKey.extract(&parts), Extraction::Key(()));
/// # let _ = layer;
/// # Ok::<(), tollgate::ConfigError>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GlobalKey;

impl KeyExtractor for GlobalKey {
    type Key = ();

    #[inline]
    fn extract(&self, _: &Parts) -> Extraction<()> {
        Extraction::Key(())
    }
}

/// Keys requests by a closure, for anything the built-ins do not cover.
///
/// # Examples
///
/// ```
/// use http::request::Parts;
/// use tollgate::tower::{Extraction, KeyExtractor, KeyFn};
///
/// // One budget per user agent and method.
/// let by_agent = KeyFn::new(|request: &Parts| {
///     let agent = request.headers.get("user-agent").and_then(|v| v.to_str().ok());
///     Extraction::Key(format!("{} {}", request.method, agent.unwrap_or("-")))
/// });
/// let (parts, ()) = http::Request::post("/").header("user-agent", "curl").body(()).unwrap().into_parts();
/// assert_eq!(by_agent.extract(&parts), Extraction::Key("POST curl".to_owned()));
/// ```
#[derive(Clone)]
pub struct KeyFn<F> {
    f: F,
}

impl<F> KeyFn<F> {
    /// Keys by `f`.
    pub fn new<K>(f: F) -> Self
    where
        F: Fn(&Parts) -> Extraction<K>,
    {
        Self { f }
    }
}

impl<F> fmt::Debug for KeyFn<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyFn").finish_non_exhaustive()
    }
}

impl<F, K> KeyExtractor for KeyFn<F>
where
    F: Fn(&Parts) -> Extraction<K> + Send + Sync + 'static,
    K: Send + Sync + 'static,
{
    type Key = K;

    fn extract(&self, request: &Parts) -> Extraction<K> {
        (self.f)(request)
    }
}
