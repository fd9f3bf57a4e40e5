//! The client keys a Redis limiter can name.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// A client key that a Redis limiter can name: the bytes that go between
/// the key's braces.
///
/// Implemented for strings, byte strings, IP addresses (their text form)
/// and integers (their decimal form), and references to them. Two keys with
/// the same bytes are the same client, so `"alice"` and
/// `String::from("alice")` share a budget.
///
/// # Examples
///
/// ```
/// use std::net::IpAddr;
/// use tollgate::redis::RedisKey;
///
/// let mut out = Vec::new();
/// IpAddr::from([10, 0, 0, 1]).write_key(&mut out);
/// assert_eq!(out, b"10.0.0.1");
/// ```
pub trait RedisKey {
    /// Appends the key's bytes to `out`.
    fn write_key(&self, out: &mut Vec<u8>);
}

impl RedisKey for str {
    fn write_key(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(self.as_bytes());
    }
}

impl RedisKey for String {
    fn write_key(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(self.as_bytes());
    }
}

impl RedisKey for [u8] {
    fn write_key(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(self);
    }
}

impl RedisKey for Vec<u8> {
    fn write_key(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(self);
    }
}

impl<T: RedisKey + ?Sized> RedisKey for &T {
    fn write_key(&self, out: &mut Vec<u8>) {
        T::write_key(self, out);
    }
}

macro_rules! display_key {
    ($($t:ty),*) => {$(
        impl RedisKey for $t {
            fn write_key(&self, out: &mut Vec<u8>) {
                use std::io::Write;
                // Writing to a `Vec` never fails.
                let _ = write!(out, "{self}");
            }
        }
    )*};
}
display_key!(IpAddr, Ipv4Addr, Ipv6Addr, u16, u32, u64, u128, i32, i64, i128, usize);
