//! The client keys a Redis limiter can name, and the layout of the Redis
//! key that holds a client's state.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// A client key that a Redis limiter can name: the bytes that name the
/// client inside its Redis key (see [`RedisLimiter::key`](crate::redis::RedisLimiter::key)).
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

/// Where a limiter keeps its clients' states: each client's key is
/// `<prefix>:{<client>}:<tag>`, the prefix and the client's bytes escaped
/// so that neither holds a brace.
///
/// The braces make the client a Redis Cluster hash tag, so clients spread
/// over a cluster's slots while each client's one key lives in one. The
/// escaping writes `%`, `{` and `}` as `%25`, `%7B` and `%7D`, and an
/// empty client as a lone `%` (which no escaped id can be): the tag is
/// never empty, no id can close it early or open another, and no prefix
/// and client can name another prefix's client. The algorithm's tag
/// comes last, after the only `}`.
#[derive(Debug, Clone)]
pub(crate) struct Layout {
    /// `<escaped prefix>:{`
    head: Vec<u8>,
    /// `}:<tag>`
    tail: Vec<u8>,
}

/// Appends `bytes` to `out`, escaped.
fn escape(bytes: &[u8], out: &mut Vec<u8>) {
    for &b in bytes {
        match b {
            b'%' => out.extend_from_slice(b"%25"),
            b'{' => out.extend_from_slice(b"%7B"),
            b'}' => out.extend_from_slice(b"%7D"),
            _ => out.push(b),
        }
    }
}

impl Layout {
    pub(crate) fn new(prefix: &str, tag: &str) -> Self {
        let mut head = Vec::with_capacity(prefix.len() + 2);
        escape(prefix.as_bytes(), &mut head);
        head.extend_from_slice(b":{");
        Self {
            head,
            tail: format!("}}:{tag}").into_bytes(),
        }
    }

    /// The key of the client whose bytes are `client`.
    pub(crate) fn key(&self, client: &[u8]) -> Vec<u8> {
        let mut key = Vec::with_capacity(self.head.len() + client.len() + self.tail.len() + 4);
        key.extend_from_slice(&self.head);
        if client.is_empty() {
            key.push(b'%');
        } else {
            escape(client, &mut key);
        }
        key.extend_from_slice(&self.tail);
        key
    }
}

/// The bytes of a client key.
pub(crate) fn client_bytes<K: RedisKey + ?Sized>(key: &K) -> Vec<u8> {
    let mut out = Vec::with_capacity(32);
    key.write_key(&mut out);
    out
}

#[cfg(all(test, not(feature = "loom")))]
mod tests {
    use super::*;

    /// Redis Cluster's hash tag of `key`: the bytes between the first `{`
    /// and the first `}` after it, if any lie between; else the whole key.
    fn hash_tag(key: &[u8]) -> &[u8] {
        if let Some(open) = key.iter().position(|&b| b == b'{') {
            if let Some(len) = key[open + 1..].iter().position(|&b| b == b'}') {
                if len > 0 {
                    return &key[open + 1..open + 1 + len];
                }
            }
        }
        key
    }

    #[test]
    fn every_key_has_its_client_as_a_non_empty_tag() {
        for prefix in ["api", "", "{}", "a{b}", "}{", "%", "x:tb:{y"] {
            let layout = Layout::new(prefix, "tb+fw");
            for client in [
                &b""[..],
                b"}",
                b"{",
                b"{}",
                b"a}b{c",
                b"%",
                b"%7B",
                b"plain",
            ] {
                let key = layout.key(client);
                let tag = hash_tag(&key);
                assert!(!tag.is_empty() && tag != key, "{key:?}");
                let mut want = Vec::new();
                escape(client, &mut want);
                if client.is_empty() {
                    want = b"%".to_vec();
                }
                assert_eq!(tag, want, "{prefix:?} {client:?}");
                assert!(key.ends_with(b"}:tb+fw"));
            }
        }
    }

    #[test]
    fn no_two_prefixes_and_clients_share_a_key() {
        let prefixes = ["a", "a:tb:{b", "a:tb", "", "%", "%25", "a}", "a%7D"];
        let clients: [&[u8]; 9] = [
            b"b:tb:{c", b"c", b"", b"%", b"%25", b"}", b"%7D", b"b", b"{c",
        ];
        let mut seen = std::collections::HashMap::new();
        for p in prefixes {
            let layout = Layout::new(p, "tb");
            for c in clients {
                let key = layout.key(c);
                if let Some(other) = seen.insert(key.clone(), (p, c)) {
                    panic!("{:?} and {:?} share {key:?}", other, (p, c));
                }
            }
        }
    }
}
