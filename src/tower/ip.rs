//! Keys from addresses: the connection's peer ([`PeerIp`]) and the client
//! behind trusted proxies ([`TrustedProxyIp`]).

use core::fmt;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use http::request::Parts;
use http::{Extensions, HeaderName};

use super::cidr::{group, Cidr};
use super::forwarded::{self, Hop};
use super::key::{Extraction, KeyExtractor, Rejection};
use crate::error::ConfigError;

/// What a [`PeerIp::peer_from`] (or [`TrustedProxyIp::peer_from`])
/// function returns: the peer's address, as an [`IpAddr`] or a
/// [`SocketAddr`], or, where the extension may not know it, an `Option`
/// of either (`None` is answered as a request without an address).
///
/// # Examples
///
/// ```
/// use std::net::SocketAddr;
/// use tollgate::tower::PeerIp;
///
/// /// A server's own connection record, which may lack the address.
/// struct Conn {
///     remote: Option<SocketAddr>,
/// }
///
/// let peer = PeerIp::new().peer_from(|c: &Conn| c.remote);
/// # let _ = peer;
/// ```
pub trait PeerAddr {
    /// The address, if known.
    fn peer_ip(self) -> Option<IpAddr>;
}

impl PeerAddr for IpAddr {
    fn peer_ip(self) -> Option<IpAddr> {
        Some(self)
    }
}

impl PeerAddr for SocketAddr {
    fn peer_ip(self) -> Option<IpAddr> {
        Some(self.ip())
    }
}

impl<A: PeerAddr> PeerAddr for Option<A> {
    fn peer_ip(self) -> Option<IpAddr> {
        self.and_then(PeerAddr::peer_ip)
    }
}

/// Reads a peer address from a request's extensions.
type ReadPeer = Arc<dyn Fn(&Extensions) -> Option<IpAddr> + Send + Sync>;

/// Where a request's peer address is read from.
#[derive(Clone)]
enum Read {
    /// The extensions servers insert: axum's `ConnectInfo<SocketAddr>`
    /// (with the `axum` feature), a `SocketAddr` or an `IpAddr`.
    Known,
    /// A user's function of an extension, and what to say when the request
    /// has no address by it.
    From(ReadPeer, Arc<str>),
}

/// Where a request's peer address is read from, and how IPv6 addresses
/// are grouped; shared by [`PeerIp`] and [`TrustedProxyIp`].
#[derive(Clone)]
struct Peer {
    read: Read,
    ipv6_prefix: u8,
}

/// What the operator is told of requests without an address (the client
/// is told nothing of the server).
#[cfg(feature = "axum")]
const NO_ADDRESS: &str = "the rate limiter found no peer address: the request has no \
    ConnectInfo<SocketAddr>, SocketAddr or IpAddr extension (under axum, serve with \
    into_make_service_with_connect_info::<SocketAddr>(); elsewhere, insert one, or name the \
    extension that holds the address with PeerIp::peer_from)";
#[cfg(not(feature = "axum"))]
const NO_ADDRESS: &str = "the rate limiter found no peer address: the request has no \
    SocketAddr or IpAddr extension (under axum, enable tollgate's `axum` feature and serve with \
    into_make_service_with_connect_info::<SocketAddr>(), or call \
    .peer_from(|c: &ConnectInfo<SocketAddr>| c.0); under tonic, \
    .peer_from(TcpConnectInfo::remote_addr); elsewhere, insert one)";

impl Peer {
    fn new() -> Self {
        Self {
            read: Read::Known,
            ipv6_prefix: 64,
        }
    }

    fn from<T, F, A>(self, f: F) -> Self
    where
        T: Send + Sync + 'static,
        F: Fn(&T) -> A + Send + Sync + 'static,
        A: PeerAddr,
    {
        let missing = format!(
            "the rate limiter found no peer address: the request has no {} extension, \
             or it holds no address (see PeerIp::peer_from)",
            core::any::type_name::<T>()
        );
        Self {
            read: Read::From(
                Arc::new(move |ext: &Extensions| ext.get::<T>().and_then(|t| f(t).peer_ip())),
                missing.into(),
            ),
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
    #[inline]
    fn address(&self, request: &Parts) -> Result<IpAddr, Rejection> {
        let ext = &request.extensions;
        let found = match &self.read {
            Read::Known => known(ext),
            Read::From(read, _) => read(ext),
        };
        match (found, &self.read) {
            (Some(ip), _) => Ok(ip.to_canonical()),
            (None, Read::Known) => Err(Rejection::misconfigured(Arc::from(NO_ADDRESS))),
            (None, Read::From(_, missing)) => Err(Rejection::misconfigured(Arc::clone(missing))),
        }
    }

    /// The key for a client address: IPv4 as is, IPv6 reduced to its prefix.
    #[inline]
    fn key(&self, ip: IpAddr) -> IpAddr {
        group(ip, self.ipv6_prefix)
    }
}

/// The address in the extensions servers insert.
#[inline]
fn known(ext: &Extensions) -> Option<IpAddr> {
    #[cfg(feature = "axum")]
    if let Some(info) = ext.get::<axum::extract::ConnectInfo<SocketAddr>>() {
        return Some(info.0.ip());
    }
    ext.get::<SocketAddr>()
        .map(SocketAddr::ip)
        .or_else(|| ext.get::<IpAddr>().copied())
}

impl fmt::Debug for Peer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let read = match &self.read {
            Read::Known => "known extensions",
            Read::From(..) => "peer_from",
        };
        f.debug_struct("Peer")
            .field("read", &read)
            .field("ipv6_prefix", &self.ipv6_prefix)
            .finish()
    }
}

/// Keys each request by its connection's peer address: IPv4 addresses as
/// they are, IPv6 addresses by their /64 prefix (configurable), since one
/// host is commonly handed a whole /64 and could otherwise mint
/// 2<sup>64</sup> clients. An IPv4-mapped IPv6 address (`::ffff:a.b.c.d`,
/// what a dual-stack socket reports for an IPv4 peer) counts as its IPv4
/// address, and so does an address a NAT64 translator made for an IPv4
/// client (`64:ff9b::a.b.c.d`, or one in the local-use `64:ff9b:1::/48`
/// laid out as RFC 6052 says), so that the clients behind a translator
/// are told apart rather than sharing one /64. The key is an [`IpAddr`], so the limiter is built with
/// `.key_type::<IpAddr>()`.
///
/// The address is read from the request extension a server inserts: with
/// the `axum` cargo feature, axum's `ConnectInfo<SocketAddr>` (serve with
/// `into_make_service_with_connect_info::<SocketAddr>()`), and otherwise a
/// [`SocketAddr`] or [`IpAddr`] extension; [`peer_from`](PeerIp::peer_from)
/// names any other (tonic's `TcpConnectInfo`, say). A request with no
/// address is answered `500 Internal Server Error`, since the server is
/// not wired to record it, with a message that says nothing of the server
/// (gRPC: `INTERNAL`); the layer tells the operator how to wire it, once,
/// through [`on_check_error`](super::RateLimitLayer::on_check_error) and,
/// with the `tracing` feature, an `ERROR` event. This
/// extractor ignores `X-Forwarded-For`; behind a proxy use
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
    /// Keys by the address in axum's `ConnectInfo<SocketAddr>` (with the
    /// `axum` feature) or a [`SocketAddr`] or [`IpAddr`] extension, IPv6
    /// grouped by /64.
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

    /// Reads the peer address from the request extension of type `T`
    /// instead, with `f`, which returns an address or an `Option` of one
    /// ([`PeerAddr`]): tonic's `.peer_from(TcpConnectInfo::remote_addr)`,
    /// or axum's `.peer_from(|c: &ConnectInfo<SocketAddr>| c.0)` without
    /// the `axum` feature.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::net::SocketAddr;
    /// use tollgate::tower::{Extraction, KeyExtractor, PeerIp};
    ///
    /// #[derive(Clone)]
    /// struct Conn(SocketAddr);
    /// let peer = PeerIp::new().peer_from(|c: &Conn| c.0);
    /// let mut request = http::Request::get("/").body(()).unwrap();
    /// request.extensions_mut().insert(Conn("192.0.2.1:5000".parse().unwrap()));
    /// let (parts, ()) = request.into_parts();
    /// assert_eq!(peer.extract(&parts), Extraction::Key("192.0.2.1".parse().unwrap()));
    /// ```
    #[must_use]
    pub fn peer_from<T, F, A>(self, f: F) -> Self
    where
        T: Send + Sync + 'static,
        F: Fn(&T) -> A + Send + Sync + 'static,
        A: PeerAddr,
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

    #[inline]
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
    /// `X-Real-IP: client`: one address, which the nearest proxy sets
    /// (nginx's `proxy_set_header X-Real-IP $remote_addr`), replacing any
    /// the client sent. Read only from trusted proxies, and only if every
    /// one of them sets it: a proxy that passes the client's own
    /// `X-Real-IP` on lets the client choose its key. With several lines,
    /// the last is read first, as for the other headers.
    XRealIp,
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
/// The header is read from the trusted end: the last line first, and
/// each line from its end, one entry (`X-Forwarded-For`) or element
/// (`Forwarded`) at a time. A `Forwarded` line is split into elements at
/// the commas that lie outside quoted strings as read from the right, and
/// each element is parsed on its own, so that a syntax error (an
/// unbalanced quote, a stray token) spoils only the element it is in.
/// Whatever the client writes, on its own lines or left of the entries
/// its proxies append to its line, it can spoil only its own entries,
/// which the walk reaches only after the client's address.
///
/// The outcome is bounded for any header: the walk reads at most
/// [`max_hops`](TrustedProxyIp::max_hops) entries (20 by default), right to
/// left, and stops at the first one that is not an address (garbage, an
/// entry with bytes that are not ASCII, `unknown`, an obfuscated
/// `Forwarded` node, a `Forwarded` element with no `for=` or two, or one
/// that does not parse); it then keys by the nearest trusted address it
/// has seen, so requests with a chain broken by a proxy share that
/// proxy's budget rather than escape it. With no header, the key is the
/// proxy's own address. Addresses are grouped as [`PeerIp`] groups them
/// (IPv6 by /64, IPv4-mapped and NAT64 addresses as IPv4).
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
    pub fn peer_from<T, F, A>(self, f: F) -> Self
    where
        T: Send + Sync + 'static,
        F: Fn(&T) -> A + Send + Sync + 'static,
        A: PeerAddr,
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
        let lines = |name: HeaderName| {
            request
                .headers
                .get_all(name)
                .into_iter()
                .map(http::HeaderValue::as_bytes)
        };
        match self.header {
            ForwardedHeader::XForwardedFor => {
                self.walk(peer, forwarded::x_forwarded_for(lines(X_FORWARDED_FOR)))
            }
            ForwardedHeader::Forwarded => {
                self.walk(peer, forwarded::forwarded(lines(http::header::FORWARDED)))
            }
            ForwardedHeader::XRealIp => self.walk(peer, forwarded::x_real_ip(lines(X_REAL_IP))),
        }
    }

    /// The walk over the hops, right to left: the first untrusted address
    /// is the client; a hop that is not an address, or the end of the
    /// hops or of `max_hops`, leaves the nearest trusted address seen.
    fn walk(&self, peer: IpAddr, hops: impl Iterator<Item = Hop>) -> IpAddr {
        let mut nearest = peer;
        for hop in hops.take(self.max_hops) {
            match hop {
                Hop::Addr(ip) => {
                    let ip = ip.to_canonical();
                    if !self.is_trusted(ip) {
                        return ip;
                    }
                    nearest = ip;
                }
                Hop::Other => return nearest,
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

const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
const X_REAL_IP: HeaderName = HeaderName::from_static("x-real-ip");
