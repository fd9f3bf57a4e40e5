//! Which client a request belongs to: the [`KeyExtractor`] trait and the
//! built-in extractors.

use core::fmt;
use core::str::FromStr;
use std::borrow::Cow;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use http::request::Parts;
use http::{Extensions, HeaderName, StatusCode};

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

/// `ip` canonical, and if IPv6, with every bit past `prefix` cleared.
fn group(ip: IpAddr, prefix: u8) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V4(v4) => IpAddr::V4(v4),
        IpAddr::V6(v6) => {
            let mask = if prefix == 0 {
                0
            } else {
                u128::MAX << (128 - u32::from(prefix))
            };
            IpAddr::V6(Ipv6Addr::from(u128::from(v6) & mask))
        }
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

/// A block of addresses: `10.0.0.0/8`, `fd00::/8`, or one address
/// (`192.0.2.7`, a /32; `2001:db8::1`, a /128). Bits past the prefix are
/// ignored: `10.1.2.3/8` is `10.0.0.0/8`.
///
/// # Examples
///
/// ```
/// use tollgate::tower::Cidr;
///
/// let private: Cidr = "10.0.0.0/8".parse()?;
/// assert!(private.contains("10.20.30.40".parse().unwrap()));
/// assert!(private.contains("::ffff:10.0.0.1".parse().unwrap()));
/// assert!(!private.contains("192.0.2.1".parse().unwrap()));
/// assert!("10.0.0.0/33".parse::<Cidr>().is_err());
/// # Ok::<(), tollgate::tower::CidrError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Cidr {
    network: IpAddr,
    prefix: u8,
}

impl Cidr {
    /// The block of the addresses that share `address`'s first `prefix`
    /// bits.
    ///
    /// # Errors
    ///
    /// [`CidrError`] if `prefix` is longer than the address (32 bits for
    /// IPv4, 128 for IPv6).
    pub fn new(address: IpAddr, prefix: u8) -> Result<Self, CidrError> {
        let address = address.to_canonical();
        let bits = if address.is_ipv4() { 32 } else { 128 };
        if prefix > bits {
            return Err(CidrError(format!(
                "prefix /{prefix} is longer than the {bits} bits of {address}"
            )));
        }
        let network = match address {
            IpAddr::V4(v4) => {
                let mask = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
                IpAddr::V4(Ipv4Addr::from(u32::from(v4) & mask))
            }
            IpAddr::V6(_) => group(address, prefix),
        };
        Ok(Self { network, prefix })
    }

    /// Whether `address` lies in the block. An IPv4-mapped IPv6 address is
    /// compared as its IPv4 address.
    #[must_use]
    pub fn contains(&self, address: IpAddr) -> bool {
        match Self::new(address, self.prefix) {
            Ok(block) => block.network == self.network,
            // An IPv4 address against an IPv6 block longer than /32.
            Err(_) => false,
        }
    }
}

impl FromStr for Cidr {
    type Err = CidrError;

    fn from_str(s: &str) -> Result<Self, CidrError> {
        let bad = || {
            CidrError(format!(
                "{s:?} is not an address or a block like 10.0.0.0/8"
            ))
        };
        let (address, prefix) = match s.split_once('/') {
            Some((address, prefix)) => {
                let prefix: u8 = prefix.parse().map_err(|_| bad())?;
                (address, Some(prefix))
            }
            None => (s, None),
        };
        let address: IpAddr = address.parse().map_err(|_| bad())?;
        let whole = if address.to_canonical().is_ipv4() {
            32
        } else {
            128
        };
        Self::new(address, prefix.unwrap_or(whole))
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.network, self.prefix)
    }
}

/// A block of addresses that did not parse; its message says why.
///
/// # Examples
///
/// ```
/// use tollgate::tower::Cidr;
///
/// let err = "example.com".parse::<Cidr>().unwrap_err();
/// assert!(err.to_string().contains("not an address"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CidrError(String);

impl fmt::Display for CidrError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for CidrError {}

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
/// The outcome is bounded for any header: the walk reads at most
/// [`max_hops`](TrustedProxyIp::max_hops) entries (20 by default), right to
/// left, and stops at the first one that is not an address (garbage,
/// `unknown`, an obfuscated `Forwarded` node, a value that is not ASCII);
/// it then keys by the nearest trusted address it has seen, so requests with
/// a broken chain share the proxy's budget rather than escape it. With no
/// header, the key is the proxy's own address. Addresses are grouped as
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
        let name = match self.header {
            ForwardedHeader::XForwardedFor => HeaderName::from_static("x-forwarded-for"),
            ForwardedHeader::Forwarded => http::header::FORWARDED,
        };
        let mut nearest = peer;
        let mut hops = 0;
        // Header lines in order make one list; walk it from the right.
        for line in request.headers.get_all(name).iter().rev() {
            let Ok(line) = line.to_str() else {
                return nearest;
            };
            for entry in line.rsplit(',') {
                hops += 1;
                if hops > self.max_hops {
                    return nearest;
                }
                let hop = match self.header {
                    ForwardedHeader::XForwardedFor => parse_node(entry.trim()),
                    ForwardedHeader::Forwarded => forwarded_for(entry),
                };
                match hop.map(|ip| ip.to_canonical()) {
                    Some(ip) if self.is_trusted(ip) => nearest = ip,
                    Some(ip) => return ip,
                    None => return nearest,
                }
            }
        }
        nearest
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

/// An address as proxies write it: `192.0.2.1`, `192.0.2.1:80`,
/// `2001:db8::1`, `[2001:db8::1]`, `[2001:db8::1]:80`.
fn parse_node(node: &str) -> Option<IpAddr> {
    if let Ok(ip) = node.parse::<IpAddr>() {
        return Some(ip);
    }
    if let Ok(addr) = node.parse::<SocketAddr>() {
        return Some(addr.ip());
    }
    node.strip_prefix('[')?
        .strip_suffix(']')?
        .parse::<Ipv6Addr>()
        .ok()
        .map(IpAddr::V6)
}

/// The address in one `Forwarded` element's `for=` parameter, if it names
/// one (not `unknown`, not an obfuscated `_node`).
///
/// Elements are split on commas without regard to quoting: proxies write
/// no commas inside their own quoted values, and a comma inside a quoted
/// value the client wrote lies left of the client's entry, which the walk
/// never passes.
fn forwarded_for(element: &str) -> Option<IpAddr> {
    let value = element.split(';').find_map(|pair| {
        let (name, value) = pair.split_once('=')?;
        name.trim()
            .eq_ignore_ascii_case("for")
            .then_some(value.trim())
    })?;
    let value = match value.strip_prefix('"') {
        Some(quoted) => quoted.strip_suffix('"')?,
        None => value,
    };
    parse_node(value)
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
/// # Examples
///
/// ```
/// use http::StatusCode;
/// use tollgate::tower::{Extraction, HeaderKey, KeyExtractor, MissingKey};
///
/// let api_key = HeaderKey::new(http::HeaderName::from_static("x-api-key"));
/// let (with, ()) = http::Request::get("/").header("x-api-key", "k-123").body(()).unwrap().into_parts();
/// assert_eq!(api_key.extract(&with), Extraction::Key("k-123".to_owned()));
///
/// let (without, ()) = http::Request::get("/").body(()).unwrap().into_parts();
/// assert!(matches!(api_key.extract(&without), Extraction::Reject(r) if r.status() == StatusCode::UNAUTHORIZED));
/// let lenient = api_key.on_missing(MissingKey::Skip);
/// assert_eq!(lenient.extract(&without), Extraction::Skip);
/// ```
#[derive(Debug, Clone)]
pub struct HeaderKey {
    name: HeaderName,
    missing: MissingKey,
}

impl HeaderKey {
    /// Keys by the header `name`; a missing header is `401 Unauthorized`.
    #[must_use]
    pub fn new(name: HeaderName) -> Self {
        Self {
            name,
            missing: MissingKey::Unauthorized,
        }
    }

    /// What to do with a request that lacks the header.
    #[must_use]
    pub fn on_missing(self, missing: MissingKey) -> Self {
        Self { missing, ..self }
    }
}

impl KeyExtractor for HeaderKey {
    type Key = String;

    fn extract(&self, request: &Parts) -> Extraction<String> {
        let value = request.headers.get(&self.name).map(|v| v.to_str());
        match value {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn grouping_masks_ipv6_and_unmaps_ipv4() {
        assert_eq!(group(ip("2001:db8:1:2:3:4:5:6"), 64), ip("2001:db8:1:2::"));
        assert_eq!(group(ip("2001:db8::1"), 128), ip("2001:db8::1"));
        assert_eq!(group(ip("2001:db8::1"), 0), ip("::"));
        assert_eq!(group(ip("::ffff:192.0.2.1"), 64), ip("192.0.2.1"));
        assert_eq!(group(ip("192.0.2.1"), 0), ip("192.0.2.1"));
    }

    #[test]
    fn cidrs_parse_mask_and_contain() {
        let block: Cidr = "10.1.2.3/8".parse().unwrap();
        assert_eq!(block.to_string(), "10.0.0.0/8");
        assert!(block.contains(ip("10.255.0.1")));
        assert!(!block.contains(ip("11.0.0.1")));
        assert!(!block.contains(ip("2001:db8::1")));
        let all4: Cidr = "0.0.0.0/0".parse().unwrap();
        assert!(all4.contains(ip("198.51.100.1")));
        let host: Cidr = "::1".parse().unwrap();
        assert_eq!(host.to_string(), "::1/128");
        assert!(host.contains(ip("::1")));
        assert!(!host.contains(ip("::2")));
        for bad in [
            "",
            "/8",
            "10.0.0.0/",
            "10.0.0.0/33",
            "::/129",
            "x/1",
            "10.0.0.0/8/8",
        ] {
            assert!(bad.parse::<Cidr>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn nodes_with_ports_and_brackets() {
        assert_eq!(parse_node("192.0.2.1:80"), Some(ip("192.0.2.1")));
        assert_eq!(parse_node("[2001:db8::1]:80"), Some(ip("2001:db8::1")));
        assert_eq!(parse_node("[2001:db8::1]"), Some(ip("2001:db8::1")));
        assert_eq!(parse_node("unknown"), None);
        assert_eq!(parse_node("[1.2.3.4]"), None);
        assert_eq!(
            forwarded_for("for=192.0.2.60;proto=http"),
            Some(ip("192.0.2.60"))
        );
        assert_eq!(
            forwarded_for(" proto=https; For=\"[2001:db8:cafe::17]:4711\""),
            Some(ip("2001:db8:cafe::17"))
        );
        assert_eq!(forwarded_for("for=_hidden"), None);
        assert_eq!(forwarded_for("for=\"192.0.2.1"), None);
        assert_eq!(forwarded_for("by=192.0.2.1"), None);
    }
}
