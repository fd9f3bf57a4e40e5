//! Writing (and, for names, reading) RFC 9651 structured fields: Strings,
//! Byte Sequences, Integers capped at 15 digits, and header values built
//! on the stack.

use core::time::Duration;

use http::HeaderValue;

use crate::error::ConfigError;

/// The largest integer an RFC 9651 structured field holds. Every integer
/// the headers carry is capped at it: `q` and `r` then state less than is
/// enforced (a client is refused later than told, never sooner), and a
/// wait this long is as good as never.
pub(super) const SF_INTEGER_MAX: u64 = 999_999_999_999_999;

/// `d` in whole seconds, rounded up, at most [`SF_INTEGER_MAX`]: a client
/// that waits this long has waited at least `d`.
pub(super) fn seconds_up(d: Duration) -> u64 {
    let whole = d.as_secs().saturating_add(u64::from(d.subsec_nanos() > 0));
    whole.min(SF_INTEGER_MAX)
}

/// The `RateLimit-Policy` window: the quota's window in whole seconds,
/// rounded **up** (at least 1), so that `q` per `w` never states a quota
/// larger than the one enforced: a window of 1.4 s is advertised as
/// `w=2`, one of 300 ms as `w=1`.
pub(super) fn window_seconds(window: Duration) -> u64 {
    seconds_up(window).max(1)
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
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4 + 2);
    out.push(':');
    base64(bytes, true, &mut out);
    out.push(':');
    out
}

/// Appends `bytes` in base64 (RFC 4648's standard alphabet), padded with
/// `=` or not.
pub(super) fn base64(bytes: &[u8], pad: bool, out: &mut String) {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
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
            } else if pad {
                out.push('=');
            }
        }
    }
}

/// `text` decoded from base64 (RFC 4648's standard alphabet), padded with
/// `=` or not, as gRPC reads binary metadata: `None` if it is not base64
/// (a byte outside the alphabet, a length no encoding has, padding where
/// there should be none, or bits set past the last whole byte).
pub(super) fn base64_decode(text: &[u8]) -> Option<Vec<u8>> {
    fn sextet(c: u8) -> Option<u32> {
        Some(u32::from(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        }))
    }
    // Padding only completes the last group to four characters.
    let body = match text {
        [rest @ .., b'=', b'='] if text.len().is_multiple_of(4) => rest,
        [rest @ .., b'='] if text.len().is_multiple_of(4) => rest,
        _ => text,
    };
    if body.len() % 4 == 1 {
        return None;
    }
    let mut out = Vec::with_capacity(body.len() / 4 * 3 + 2);
    for group in body.chunks(4) {
        let mut n = 0u32;
        for &c in group {
            n = n << 6 | sextet(c)?;
        }
        // The group's bits, left-aligned in 24: 2 to 4 characters hold 1
        // to 3 bytes, and the bits past them must be zero.
        n <<= 6 * (4 - group.len() as u32);
        let bytes = group.len() - 1;
        if n & (0x00ff_ffff >> (8 * bytes)) != 0 {
            return None;
        }
        out.extend_from_slice(&n.to_be_bytes()[1..=bytes]);
    }
    Some(out)
}

/// `n` in decimal, on the stack.
pub(super) struct Decimal {
    digits: [u8; 20],
    start: usize,
}

impl Decimal {
    pub(super) fn new(mut n: u64) -> Self {
        // Two digits at a time, from a table: half the divisions.
        const PAIRS: &[u8; 200] = b"0001020304050607080910111213141516171819\
            2021222324252627282930313233343536373839\
            4041424344454647484950515253545556575859\
            6061626364656667686970717273747576777879\
            8081828384858687888990919293949596979899";
        let mut digits = [0; 20];
        let mut start = digits.len();
        while n >= 100 {
            let pair = (n % 100) as usize * 2;
            n /= 100;
            start -= 2;
            digits[start..start + 2].copy_from_slice(&PAIRS[pair..pair + 2]);
        }
        if n >= 10 {
            let pair = n as usize * 2;
            start -= 2;
            digits[start..start + 2].copy_from_slice(&PAIRS[pair..pair + 2]);
        } else {
            start -= 1;
            digits[start] = b'0' + n as u8;
        }
        Self { digits, start }
    }

    pub(super) fn as_bytes(&self) -> &[u8] {
        &self.digits[self.start..]
    }
}

/// A header value written on the stack and copied once into its
/// `HeaderValue`: one allocation of exactly its length. Long values (long
/// names, partition keys, an inner layer's list) spill to the heap.
pub(super) struct Line {
    stack: [u8; 192],
    len: usize,
    heap: Vec<u8>,
}

impl Line {
    pub(super) fn new() -> Self {
        Self {
            stack: [0; 192],
            len: 0,
            heap: Vec::new(),
        }
    }

    pub(super) fn put(&mut self, bytes: &[u8]) -> &mut Self {
        if self.heap.is_empty() && self.len + bytes.len() <= self.stack.len() {
            self.stack[self.len..self.len + bytes.len()].copy_from_slice(bytes);
            self.len += bytes.len();
        } else {
            if self.heap.is_empty() {
                self.heap.extend_from_slice(&self.stack[..self.len]);
            }
            self.heap.extend_from_slice(bytes);
        }
        self
    }

    pub(super) fn bytes(&self) -> &[u8] {
        if self.heap.is_empty() {
            &self.stack[..self.len]
        } else {
            &self.heap
        }
    }

    pub(super) fn value(&self) -> HeaderValue {
        // Every header this module writes is printable ASCII: quoted names
        // are checked by `sf_string`, the rest are digits and base64, and
        // an inner layer's value was a valid header value already.
        HeaderValue::from_bytes(self.bytes()).expect("rate-limit headers are valid header values")
    }
}

/// The leading String of each member of an RFC 9651 List (the items'
/// names, quotes included), read leniently: a member that does not start
/// with a String has none.
pub(super) fn names(list: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut rest = list;
    core::iter::from_fn(move || loop {
        let member = rest.trim_ascii_start();
        if member.is_empty() {
            return None;
        }
        // The member's leading String, if it has one.
        let mut name = None;
        if member[0] == b'"' {
            let mut i = 1;
            while i < member.len() {
                match member[i] {
                    b'\\' => i += 1,
                    b'"' => {
                        name = Some(&member[..=i]);
                        break;
                    }
                    _ => {}
                }
                i += 1;
            }
        }
        // On to the next comma outside a String.
        let mut quoted = false;
        let mut end = member.len();
        let mut j = name.map_or(0, <[u8]>::len);
        while j < member.len() {
            match member[j] {
                b'\\' if quoted => j += 1,
                b'"' => quoted = !quoted,
                b',' if !quoted => {
                    end = j;
                    break;
                }
                _ => {}
            }
            j += 1;
        }
        rest = member.get(end + 1..).unwrap_or(&[]);
        if name.is_some() {
            return name;
        }
    })
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
        assert_eq!(window_seconds(Duration::ZERO), 1);
        assert_eq!(window_seconds(Duration::from_nanos(60_000_000_004)), 61);
        assert_eq!(window_seconds(Duration::from_millis(1_400)), 2);
        assert_eq!(window_seconds(Duration::MAX), SF_INTEGER_MAX);
    }

    #[test]
    fn decimals_and_lines() {
        let mut n = 1u64;
        for _ in 0..20 {
            for m in [n - 1, n, n + 1, n.saturating_mul(5), n.saturating_mul(9)] {
                assert_eq!(Decimal::new(m).as_bytes(), m.to_string().as_bytes());
            }
            n = n.saturating_mul(10);
        }
        for m in [0, 7, 10, 99, 100, 101, 999, SF_INTEGER_MAX, u64::MAX] {
            assert_eq!(Decimal::new(m).as_bytes(), m.to_string().as_bytes());
        }
        let mut line = Line::new();
        line.put(b"\"a\"").put(b";r=").put(b"").put(b"9");
        assert_eq!(line.value(), "\"a\";r=9");
        let long = [b'x'; 500];
        line.put(&long);
        assert_eq!(line.value().len(), 507);
    }

    #[test]
    fn list_members_are_named() {
        let list = br#" "a";q=1, "b\"c";w="x,y" , token;q=2,, "d,e" "#;
        let found: Vec<&[u8]> = names(list).collect();
        assert_eq!(found, [&b"\"a\""[..], b"\"b\\\"c\"", b"\"d,e\""]);
        assert_eq!(names(b"").count(), 0);
        assert_eq!(names(b"\"open").count(), 0);
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
    fn base64_decodes_padded_and_unpadded_alike() {
        for bytes in [
            &b""[..],
            b"f",
            b"fo",
            b"foo",
            b"foob",
            b"fooba",
            b"foobar",
            &[0, 1],
            &[0xff; 7],
        ] {
            for pad in [true, false] {
                let mut text = String::new();
                base64(bytes, pad, &mut text);
                assert_eq!(
                    base64_decode(text.as_bytes()).as_deref(),
                    Some(bytes),
                    "{text}"
                );
            }
        }
        assert_eq!(base64_decode(b"AAE=").unwrap(), [0, 1]);
        assert_eq!(base64_decode(b"AAE").unwrap(), [0, 1]);
        // Not base64: a lone character, stray padding, bits past the last
        // byte, characters outside the alphabet.
        for bad in [
            &b"A"[..],
            b"AAAAA",
            b"AA=",
            b"AAE==",
            b"=",
            b"A===",
            b"AAF",
            b"AB",
            b"AA-_",
            b"AA E",
            b"AA=A",
        ] {
            assert_eq!(base64_decode(bad), None, "{}", String::from_utf8_lossy(bad));
        }
    }
}
