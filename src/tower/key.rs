//! Which client a request belongs to: the [`KeyExtractor`] trait and the
//! built-in extractors.

use core::fmt;
use std::borrow::Cow;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use http::request::Parts;
use http::{Extensions, HeaderName, StatusCode};

use super::cidr::{group, Cidr};
use super::forwarded::{parse_node, Elements, Hop};
use crate::error::ConfigError;

/// Finds the key a request is limited under, from its head (method, URI,
/// headers and extensions; the body is never read).
///
/// Built-ins: [`PeerIp`] (the connection's address), [`TrustedProxyIp`]
/// (the client behind trusted proxies), [`HeaderKey`] (an API key header)
/// and [`KeyFn`] (a closure).
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
}

impl Rejection {
    /// A rejection with `status`, explained by `detail`.
    pub fn new(status: StatusCode, detail: impl Into<Cow<'static, str>>) -> Self {
        Self {
            status,
            detail: detail.into(),
        }
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

/// Reads a peer address from a request's extensions.
type ReadPeer = Arc<dyn Fn(&Extensions) -> Option<IpAddr> + Send + Sync>;

/// Where a request's peer address is read from, and how IPv6 addresses
/// are grouped; shared by [`PeerIp`] and [`TrustedProxyIp`].
#[derive(Clone)]
struct Peer {
    read: ReadPeer,
    ipv6_prefix: u8,
}

impl Peer {
    fn new() -> Self {
        Self {
            read: Arc::new(|ext: &Extensions| {
                ext.get::<SocketAddr>()
                    .map(SocketAddr::ip)
                    .or_else(|| ext.get::<IpAddr>().copied())
            }),
            ipv6_prefix: 64,
        }
    }

    fn from<T, F>(self, f: F) -> Self
    where
        T: Send + Sync + 'static,
        F: Fn(&T) -> IpAddr + Send + Sync + 'static,
    {
        Self {
            read: Arc::new(move |ext: &Extensions| ext.get::<T>().map(&f)),
            ..self
        }
    }

    fn prefix(self, bits: u8) -> Result<Self, ConfigError> {
        ConfigError::check_range(
            "ipv6_prefix",
            u128::from(bits),
            (0, 128),
            "bits",
            "an IPv6 prefix is 0 to 128 bits long",
        )?;
        Ok(Self {
            ipv6_prefix: bits,
            ..self
        })
    }

    /// The peer's address, canonical (an IPv4-mapped IPv6 address as IPv4).
    fn address(&self, request: &Parts) -> Result<IpAddr, Rejection> {
        (self.read)(&request.extensions)
            .map(|ip| ip.to_canonical())
            .ok_or_else(|| {
                Rejection::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "the server does not record the connection's address for its rate limiter \
                     (serve with connect info, or insert a SocketAddr extension)",
                )
            })
    }

    /// The key for a client address: IPv4 as is, IPv6 reduced to its prefix.
    fn key(&self, ip: IpAddr) -> IpAddr {
        group(ip, self.ipv6_prefix)
    }
}

impl fmt::Debug for Peer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Peer")
            .field("ipv6_prefix", &self.ipv6_prefix)
            .finish_non_exhaustive()
    }
}

/// Keys each request by its connection's peer address: IPv4 addresses as
/// they are, IPv6 addresses by their /64 prefix (configurable), since one
/// host is commonly handed a whole /64 and could otherwise mint
/// 2<sup>64</sup> clients. An IPv4-mapped IPv6 address (`::ffff:a.b.c.d`,
/// what a dual-stack socket reports for an IPv4 peer) counts as its IPv4
/// address. The key is an [`IpAddr`], so the limiter is built with
/// `.key_type::<IpAddr>()`.
///
/// The address is read from a [`SocketAddr`] (or [`IpAddr`]) request
/// extension; under axum, point it at `ConnectInfo` with
/// [`peer_from`](PeerIp::peer_from). A request with no address is answered
/// `500 Internal Server Error`, since the server is not wired to record it.
/// This extractor ignores `X-Forwarded-For`; behind a proxy use
/// [`TrustedProxyIp`].
///
/// # Examples
///
/// ```
/// use std::net::{IpAddr, SocketAddr};
/// use tollgate::tower::{Extraction, KeyExtractor, PeerIp};
///
/// let peer = PeerIp::new().ipv6_prefix(56)?;
/// let mut request = http::Request::get("/").body(()).unwrap();
/// let addr: SocketAddr = "[2001:db8:1:2ff::1]:4000".parse().unwrap();
/// request.extensions_mut().insert(addr);
/// let (parts, ()) = request.into_parts();
/// let key: IpAddr = "2001:db8:1:200::".parse().unwrap();
/// assert_eq!(peer.extract(&parts), Extraction::Key(key));
/// # Ok::<(), tollgate::ConfigError>(())
/// ```
#[derive(Debug, Clone)]
pub struct PeerIp {
    peer: Peer,
}

impl PeerIp {
    /// Keys by the address in a [`SocketAddr`] (or [`IpAddr`]) extension,
    /// IPv6 grouped by /64.
    #[must_use]
    pub fn new() -> Self {
        Self { peer: Peer::new() }
    }

    /// Groups IPv6 addresses by their first `bits` bits: 128 keys each
    /// address apart, 0 puts all IPv6 clients under one key.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] for `bits` above 128.
    pub fn ipv6_prefix(self, bits: u8) -> Result<Self, ConfigError> {
        Ok(Self {
            peer: self.peer.prefix(bits)?,
        })
    }

    /// Reads the peer address from the request extension of type `T`,
    /// such as axum's `ConnectInfo<SocketAddr>`:
    /// `.peer_from(|c: &ConnectInfo<SocketAddr>| c.0.ip())`.
    #[must_use]
    pub fn peer_from<T, F>(self, f: F) -> Self
    where
        T: Send + Sync + 'static,
        F: Fn(&T) -> IpAddr + Send + Sync + 'static,
    {
        Self {
            peer: self.peer.from(f),
        }
    }
}

impl Default for PeerIp {
    fn default() -> Self {
        Self::new()
    }
}

impl KeyExtractor for PeerIp {
    type Key = IpAddr;

    fn extract(&self, request: &Parts) -> Extraction<IpAddr> {
        match self.peer.address(request) {
            Ok(ip) => Extraction::Key(self.peer.key(ip)),
            Err(rejection) => Extraction::Reject(rejection),
        }
    }
}

/// The header a proxy records the client's address in.
///
/// # Examples
///
/// ```
/// use tollgate::tower::ForwardedHeader;
///
/// assert_eq!(ForwardedHeader::default(), ForwardedHeader::XForwardedFor);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ForwardedHeader {
    /// `X-Forwarded-For: client, proxy1, proxy2` (the default).
    #[default]
    XForwardedFor,
    /// RFC 7239's `Forwarded: for=client, for=proxy1;proto=https`.
    Forwarded,
}

/// Keys each request by the client behind your reverse proxies.
///
/// A request whose peer is **not** in a trusted block is keyed by the peer
/// address, whatever its headers say. A request from a trusted proxy is
/// keyed by the **rightmost** address in `X-Forwarded-For` (or
/// `Forwarded`) that is not itself trusted: each proxy appends the address
/// it received the request from, so the entries right of the client were
/// written by your proxies, and everything left of it by the client, who can
/// write anything there. A spoofed leftmost entry therefore never changes
/// the key.
///
/// `Forwarded` is parsed as RFC 7239 says: a quoted value (such as a
/// `host=` carrying the client's own Host header, which may hold `,`, `;`
/// and `=`) is data, never a `for=` of its own, and a node's port may be
/// numeric or obfuscated (`for="192.0.2.43:_p7"` keys `192.0.2.43`).
///
/// The outcome is bounded for any header: the walk reads at most
/// [`max_hops`](TrustedProxyIp::max_hops) entries (20 by default), right to
/// left, and stops at the first one that is not an address (garbage,
/// `unknown`, an obfuscated `Forwarded` node, a `Forwarded` element with
/// no `for=` or two, an `X-Forwarded-For` line that is not ASCII), or at a
/// `Forwarded` syntax error such as an unbalanced quote; it then keys by
/// the nearest trusted address it has seen, so requests with a broken
/// chain share the proxy's budget rather than escape it. With no header,
/// the key is the proxy's own address. Addresses are grouped as
/// [`PeerIp`] groups them (IPv6 by /64, IPv4-mapped as IPv4).
///
/// # Examples
///
/// ```
/// use std::net::{IpAddr, SocketAddr};
/// use tollgate::tower::{Extraction, KeyExtractor, TrustedProxyIp};
///
/// let extractor = TrustedProxyIp::new(["10.0.0.0/8".parse()?]);
/// let mut request = http::Request::get("/")
///     // The client wrote "1.1.1.1"; the proxy appended the client's address.
///     .header("x-forwarded-for", "1.1.1.1, 203.0.113.9")
///     .body(())
///     .unwrap();
/// let proxy: SocketAddr = "10.0.0.2:5000".parse().unwrap();
/// request.extensions_mut().insert(proxy);
/// let (parts, ()) = request.into_parts();
/// let client: IpAddr = "203.0.113.9".parse().unwrap();
/// assert_eq!(extractor.extract(&parts), Extraction::Key(client));
/// # Ok::<(), tollgate::tower::CidrError>(())
/// ```
#[derive(Debug, Clone)]
pub struct TrustedProxyIp {
    trusted: Arc<[Cidr]>,
    header: ForwardedHeader,
    max_hops: usize,
    peer: Peer,
}

impl TrustedProxyIp {
    /// Trusts proxies in `trusted` to report the client in
    /// `X-Forwarded-For`.
    pub fn new(trusted: impl IntoIterator<Item = Cidr>) -> Self {
        Self {
            trusted: trusted.into_iter().collect(),
            header: ForwardedHeader::XForwardedFor,
            max_hops: 20,
            peer: Peer::new(),
        }
    }

    /// Reads the client from `header` instead: the one your proxies write.
    /// Only one header is read, so a client cannot use the other to spoof.
    #[must_use]
    pub fn header(self, header: ForwardedHeader) -> Self {
        Self { header, ..self }
    }

    /// Reads at most `hops` header entries, right to left (at least 1).
    #[must_use]
    pub fn max_hops(self, hops: usize) -> Self {
        Self {
            max_hops: hops.max(1),
            ..self
        }
    }

    /// Groups IPv6 addresses by their first `bits` bits (64 by default).
    ///
    /// # Errors
    ///
    /// [`ConfigError`] for `bits` above 128.
    pub fn ipv6_prefix(self, bits: u8) -> Result<Self, ConfigError> {
        Ok(Self {
            peer: self.peer.prefix(bits)?,
            ..self
        })
    }

    /// Reads the peer address from the request extension of type `T`; see
    /// [`PeerIp::peer_from`].
    #[must_use]
    pub fn peer_from<T, F>(self, f: F) -> Self
    where
        T: Send + Sync + 'static,
        F: Fn(&T) -> IpAddr + Send + Sync + 'static,
    {
        Self {
            peer: self.peer.from(f),
            ..self
        }
    }

    fn is_trusted(&self, ip: IpAddr) -> bool {
        self.trusted.iter().any(|block| block.contains(ip))
    }

    /// The client's address: the rightmost untrusted hop, or the nearest
    /// trusted one where the chain ends or breaks.
    fn client(&self, peer: IpAddr, request: &Parts) -> IpAddr {
        if !self.is_trusted(peer) {
            return peer;
        }
        match self.header {
            ForwardedHeader::XForwardedFor => self.x_forwarded_for(peer, request),
            ForwardedHeader::Forwarded => self.forwarded(peer, request),
        }
    }

    /// The walk over `X-Forwarded-For`, right to left: its entries hold no
    /// quoting, so each comma ends one.
    fn x_forwarded_for(&self, peer: IpAddr, request: &Parts) -> IpAddr {
        let mut nearest = peer;
        let mut hops = 0;
        // Header lines in order make one list; walk it from the right.
        let lines = request
            .headers
            .get_all(HeaderName::from_static("x-forwarded-for"));
        for line in lines.iter().rev() {
            if !line.as_bytes().is_ascii() {
                return nearest;
            }
            for entry in line.as_bytes().rsplit(|&b| b == b',') {
                hops += 1;
                if hops > self.max_hops {
                    return nearest;
                }
                match parse_node(entry.trim_ascii()).map(|ip| ip.to_canonical()) {
                    Some(ip) if self.is_trusted(ip) => nearest = ip,
                    Some(ip) => return ip,
                    None => return nearest,
                }
            }
        }
        nearest
    }

    /// The same walk over `Forwarded`, whose quoted strings may hold
    /// commas: the field is parsed left to right (its lines joined into one
    /// list, as HTTP joins them), and of its last `max_hops` elements the
    /// one the right-to-left walk would stop at is kept.
    fn forwarded(&self, peer: IpAddr, request: &Parts) -> IpAddr {
        let mut lines = request.headers.get_all(http::header::FORWARDED).iter();
        let field: Cow<'_, [u8]> = match (lines.next(), lines.next()) {
            (None, _) => return peer,
            (Some(one), None) => Cow::Borrowed(one.as_bytes()),
            (Some(first), Some(second)) => {
                let mut joined = first.as_bytes().to_vec();
                for line in [second].into_iter().chain(lines) {
                    joined.extend_from_slice(b", ");
                    joined.extend_from_slice(line.as_bytes());
                }
                Cow::Owned(joined)
            }
        };
        let elements = Elements::new(&field).count();
        // `None` while the walk from the right would have stopped at an
        // element with no address (or not yet seen one): it then keys by
        // the nearest trusted hop right of that element, or the peer.
        let mut client = None;
        for hop in Elements::new(&field).skip(elements.saturating_sub(self.max_hops)) {
            match hop {
                Hop::Addr(ip) => {
                    let ip = ip.to_canonical();
                    if !self.is_trusted(ip) || client.is_none() {
                        client = Some(ip);
                    }
                }
                Hop::Other => client = None,
            }
        }
        client.unwrap_or(peer)
    }
}

impl KeyExtractor for TrustedProxyIp {
    type Key = IpAddr;

    fn extract(&self, request: &Parts) -> Extraction<IpAddr> {
        match self.peer.address(request) {
            Ok(peer) => Extraction::Key(self.peer.key(self.client(peer, request))),
            Err(rejection) => Extraction::Reject(rejection),
        }
    }
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
/// A request without the header (or with an empty one) gets the
/// configured [`MissingKey`] outcome: `401 Unauthorized` unless told
/// otherwise. A value that is not visible ASCII is answered `400 Bad
/// Request`, whatever the setting, so that no client can skip the limit by
/// sending an odd value. The key is a [`String`], the default key type of
/// a limiter.
///
/// A key is at most [`max_len`](HeaderKey::max_len) bytes (256 unless
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
}

impl HeaderKey {
    /// Keys by the header `name`; a missing header is `401 Unauthorized`,
    /// a key over 256 bytes `431 Request Header Fields Too Large`.
    #[must_use]
    pub fn new(name: HeaderName) -> Self {
        Self {
            name,
            missing: MissingKey::Unauthorized,
            max_len: 256,
            too_long: LongKey::HeaderFieldsTooLarge,
        }
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
        let value = request.headers.get(&self.name).map(|v| v.to_str());
        match value {
            Some(Ok(value)) if value.len() > self.max_len => {
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
            Some(Ok(value)) if !value.trim().is_empty() => Extraction::Key(value.to_owned()),
            Some(Err(_)) => Extraction::Reject(Rejection::new(
                StatusCode::BAD_REQUEST,
                format!("the {} header is not visible ASCII", self.name),
            )),
            // Missing or empty.
            _ => match self.missing {
                MissingKey::Skip => Extraction::Skip,
                MissingKey::Unauthorized => Extraction::Reject(Rejection::new(
                    StatusCode::UNAUTHORIZED,
                    format!("this route needs a {} header", self.name),
                )),
                MissingKey::BadRequest => Extraction::Reject(Rejection::new(
                    StatusCode::BAD_REQUEST,
                    format!("this route needs a {} header", self.name),
                )),
            },
        }
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
