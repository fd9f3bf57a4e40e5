//! Blocks of addresses ([`Cidr`]), and the grouping of IPv6 clients by
//! prefix that every IP extractor applies.

use core::fmt;
use core::str::FromStr;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// `ip` as a client key: an IPv4 client's IPv4 address however it
/// arrives (IPv4-mapped, or translated by NAT64, [`nat64`]), and any other
/// IPv6 address with every bit past `prefix` cleared.
#[inline]
pub(super) fn group(ip: IpAddr, prefix: u8) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V4(v4) => IpAddr::V4(v4),
        IpAddr::V6(v6) => match nat64(v6) {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(Ipv6Addr::from(u128::from(v6) & mask128(prefix))),
        },
    }
}

/// The IPv4 address a NAT64 (or SIIT) translator embedded in `v6`, as RFC
/// 6052 lays it out, for the two prefixes set aside for translation:
///
/// - `64:ff9b::/96`, the well-known prefix (RFC 6052), used with /96
///   only: the IPv4 address is the last 32 bits.
/// - `64:ff9b:1::/48`, for local use (RFC 8215), which a network may use
///   whole, as a /48, or split into longer prefixes, commonly /96s. With
///   the /48 itself, the IPv4 address is bits 48 to 63 and 72 to 87 (bits
///   64 to 71, the `u` octet, are zero) and the suffix after it is zero;
///   with a /96 inside it, the last 32 bits. A /48 address has a zero last
///   32 bits, which as a /96 address would embed `0.0.0.0`: that is how
///   the two are told apart.
///
/// An address in neither prefix, or one whose `u` octet is not zero, has
/// none: it is not a translated address.
fn nat64(v6: Ipv6Addr) -> Option<Ipv4Addr> {
    let o = v6.octets();
    if o[8] != 0 {
        return None;
    }
    let last = Ipv4Addr::new(o[12], o[13], o[14], o[15]);
    match o[..6] {
        [0, 0x64, 0xff, 0x9b, 0, 0] if o[6..12] == [0; 6] => Some(last),
        [0, 0x64, 0xff, 0x9b, 0, 1] if o[11..] == [0; 5] => {
            Some(Ipv4Addr::new(o[6], o[7], o[9], o[10]))
        }
        [0, 0x64, 0xff, 0x9b, 0, 1] => Some(last),
        _ => None,
    }
}

fn mask128(prefix: u8) -> u128 {
    u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0)
}

fn mask32(prefix: u8) -> u32 {
    u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0)
}

/// A block of addresses: `10.0.0.0/8`, `fd00::/8`, or one address
/// (`192.0.2.7`, a /32; `2001:db8::1`, a /128). Bits past the prefix are
/// ignored: `10.1.2.3/8` is `10.0.0.0/8`.
///
/// IPv4 clients are compared as IPv4 whichever way they arrive: an
/// IPv4-mapped IPv6 address (`::ffff:10.0.0.1`) lies in `10.0.0.0/8`, and
/// the mapped notation of a block, `::ffff:127.0.0.0/104`, is the IPv4
/// block `127.0.0.0/8` (its prefix counts the 96 bits of the mapping).
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
/// let loopback: Cidr = "::ffff:127.0.0.0/104".parse()?;
/// assert_eq!(loopback.to_string(), "127.0.0.0/8");
/// # Ok::<(), tollgate::tower::CidrError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Cidr {
    network: IpAddr,
    prefix: u8,
}

impl Cidr {
    /// The block of the addresses that share `address`'s first `prefix`
    /// bits. For an IPv4-mapped IPv6 address the prefix counts IPv6 bits:
    /// 96 or more names an IPv4 block (`prefix - 96` bits of it); less, an
    /// IPv6 block.
    ///
    /// # Errors
    ///
    /// [`CidrError`] if `prefix` is longer than the address (32 bits for
    /// IPv4, 128 for IPv6).
    pub fn new(address: IpAddr, prefix: u8) -> Result<Self, CidrError> {
        let too_long = |bits: u8| {
            CidrError(format!(
                "prefix /{prefix} is longer than the {bits} bits of {address}"
            ))
        };
        match address {
            IpAddr::V4(v4) => {
                if prefix > 32 {
                    return Err(too_long(32));
                }
                Ok(Self::v4(v4, prefix))
            }
            IpAddr::V6(v6) => {
                if prefix > 128 {
                    return Err(too_long(128));
                }
                match v6.to_ipv4_mapped() {
                    Some(v4) if prefix >= 96 => Ok(Self::v4(v4, prefix - 96)),
                    _ => Ok(Self {
                        network: IpAddr::V6(Ipv6Addr::from(u128::from(v6) & mask128(prefix))),
                        prefix,
                    }),
                }
            }
        }
    }

    fn v4(v4: Ipv4Addr, prefix: u8) -> Self {
        Self {
            network: IpAddr::V4(Ipv4Addr::from(u32::from(v4) & mask32(prefix))),
            prefix,
        }
    }

    /// Whether `address` lies in the block. An IPv4-mapped IPv6 address is
    /// compared as its IPv4 address.
    #[must_use]
    pub fn contains(&self, address: IpAddr) -> bool {
        match (self.network, address.to_canonical()) {
            (IpAddr::V4(net), IpAddr::V4(a)) => {
                u32::from(a) & mask32(self.prefix) == u32::from(net)
            }
            (IpAddr::V6(net), IpAddr::V6(a)) => {
                u128::from(a) & mask128(self.prefix) == u128::from(net)
            }
            // An IPv4 address against an IPv6 block shorter than /96 (one
            // at /96 or longer over mapped addresses is an IPv4 block).
            _ => false,
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
        let whole = if address.is_ipv4() { 32 } else { 128 };
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
    fn nat64_addresses_key_their_ipv4_client() {
        // The well-known prefix, /96.
        assert_eq!(group(ip("64:ff9b::203.0.113.9"), 64), ip("203.0.113.9"));
        assert_eq!(group(ip("64:ff9b::c633:6407"), 64), ip("198.51.100.7"));
        // Local use, the /48 itself: 203.0.113.9 around the zero `u` octet.
        assert_eq!(group(ip("64:ff9b:1:cb00:71:900::"), 64), ip("203.0.113.9"));
        // Local use, a /96 inside it: the last 32 bits.
        assert_eq!(
            group(ip("64:ff9b:1:abcd:0:12:198.51.100.7"), 64),
            ip("198.51.100.7")
        );
        assert_eq!(
            group(ip("64:ff9b:1::198.51.100.7"), 128),
            ip("198.51.100.7")
        );
        // Not translated addresses: grouped as any IPv6 address.
        for (not, key) in [
            ("64:ff9b::1:0:0:1", "64:ff9b::"),
            ("64:ff9b:0:0:100::1", "64:ff9b::"),
            ("64:ff9b:2::1", "64:ff9b:2::"),
            ("64:ff9b:1:cb00:ff71:900::", "64:ff9b:1:cb00::"),
            ("2001:db8::203.0.113.9", "2001:db8::"),
        ] {
            assert_eq!(group(ip(not), 64), ip(key), "{not}");
        }
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
        let mapped: Cidr = "::ffff:10.0.0.0/104".parse().unwrap();
        assert_eq!(mapped, "10.0.0.0/8".parse().unwrap());
        let wide: Cidr = "::ffff:0:0/95".parse().unwrap();
        assert_eq!(wide.to_string(), "::fffe:0:0/95");
        assert!(!wide.contains(ip("10.0.0.1")));
        for bad in [
            "",
            "/8",
            "10.0.0.0/",
            "10.0.0.0/33",
            "::/129",
            "::ffff:10.0.0.0/129",
            "x/1",
            "10.0.0.0/8/8",
        ] {
            assert!(bad.parse::<Cidr>().is_err(), "{bad:?}");
        }
    }
}
