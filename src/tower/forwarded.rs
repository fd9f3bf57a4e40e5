//! The addresses proxies write: nodes (`192.0.2.1:80`, `[2001:db8::1]`,
//! `"192.0.2.43:_p7"`), and RFC 7239's `Forwarded` field, parsed as its
//! grammar says, with quoted strings and quoted pairs, so that a quoted
//! value (a `host=` carrying the client's own Host header) can never pass
//! for a `for=` parameter.

use std::net::{IpAddr, Ipv6Addr};

/// An address as proxies write it: `192.0.2.1`, `192.0.2.1:80`,
/// `2001:db8::1`, `[2001:db8::1]`, `[2001:db8::1]:80`, and RFC 7239's
/// obfuscated ports (`192.0.2.43:_p7`, `[2001:db8:cafe::17]:_abc`). Not an
/// address: `unknown`, an obfuscated node (`_hidden`), a bad port.
pub(super) fn parse_node(node: &[u8]) -> Option<IpAddr> {
    let node = core::str::from_utf8(node).ok()?;
    if let Ok(ip) = node.parse::<IpAddr>() {
        return Some(ip);
    }
    let (ip, rest) = match node.strip_prefix('[') {
        Some(bracketed) => {
            let (v6, rest) = bracketed.split_once(']')?;
            (IpAddr::V6(v6.parse::<Ipv6Addr>().ok()?), rest)
        }
        None => {
            let (v4, _) = node.split_once(':')?;
            (IpAddr::V4(v4.parse().ok()?), &node[v4.len()..])
        }
    };
    if rest.is_empty() {
        return Some(ip);
    }
    let port = rest.strip_prefix(':')?.as_bytes();
    let numeric = (1..=5).contains(&port.len()) && port.iter().all(u8::is_ascii_digit);
    let obfuscated = port.len() > 1
        && port[0] == b'_'
        && port[1..]
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    (numeric || obfuscated).then_some(ip)
}

/// One `Forwarded` element, as the walk sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Hop {
    /// The element's one `for=` names this address.
    Addr(IpAddr),
    /// No address: no `for=`, more than one, `unknown`, an obfuscated
    /// node, or a syntax error (after which the field is not read on).
    Other,
}

/// The elements of a `Forwarded` field value, left to right (RFC 7239
/// section 4, with RFC 9110's list rules: optional whitespace around `,`
/// and `;`, and empty list elements ignored). A value may be a token (read
/// leniently: `:`, `[` and `]` allowed, as some proxies write ports
/// unquoted) or a quoted string, whose `\` escapes the next byte.
#[derive(Debug)]
pub(super) struct Elements<'a> {
    s: &'a [u8],
    i: usize,
    done: bool,
}

impl<'a> Elements<'a> {
    pub(super) fn new(s: &'a [u8]) -> Self {
        Self {
            s,
            i: 0,
            done: false,
        }
    }

    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }

    fn skip_ows(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t')) {
            self.i += 1;
        }
    }

    /// A run of token characters (and, leniently, `:[]`).
    fn token(&mut self) -> &'a [u8] {
        let start = self.i;
        while self
            .peek()
            .is_some_and(|b| is_tchar(b) || matches!(b, b':' | b'[' | b']'))
        {
            self.i += 1;
        }
        &self.s[start..self.i]
    }

    /// A quoted string, the opening quote next; its content unescaped
    /// into `out` (as much as fits; `None` past that), or `Err` if it is
    /// not a well-formed quoted string.
    fn quoted(&mut self, out: &mut Buf) -> Result<(), ()> {
        self.i += 1;
        loop {
            let b = self.peek().ok_or(())?;
            self.i += 1;
            match b {
                b'"' => return Ok(()),
                b'\\' => {
                    let escaped = self.peek().ok_or(())?;
                    if escaped != b'\t' && (escaped < 0x20 || escaped == 0x7f) {
                        return Err(());
                    }
                    self.i += 1;
                    out.push(escaped);
                }
                b'\t' | b' ' | 0x21..=0x7e | 0x80..=0xff => out.push(b),
                _ => return Err(()),
            }
        }
    }

    /// One element, its start next (whitespace skipped); `Err` on a
    /// syntax error.
    fn element(&mut self) -> Result<Hop, ()> {
        let mut fors = 0;
        let mut addr = None;
        loop {
            self.skip_ows();
            match self.peek() {
                None | Some(b',') => break,
                Some(b';') => {
                    self.i += 1;
                    continue;
                }
                Some(_) => {}
            }
            let name = self.token();
            if name.is_empty() || self.peek() != Some(b'=') {
                return Err(());
            }
            self.i += 1;
            let is_for = name.eq_ignore_ascii_case(b"for");
            let mut buf = Buf::new();
            let value: &[u8] = if self.peek() == Some(b'"') {
                self.quoted(&mut buf)?;
                buf.get().unwrap_or(b"")
            } else {
                let token = self.token();
                if token.is_empty() {
                    return Err(());
                }
                token
            };
            if is_for {
                fors += 1;
                addr = parse_node(value);
            }
            self.skip_ows();
            if !matches!(self.peek(), None | Some(b';' | b',')) {
                return Err(());
            }
        }
        Ok(match (fors, addr) {
            (1, Some(ip)) => Hop::Addr(ip),
            _ => Hop::Other,
        })
    }
}

impl Iterator for Elements<'_> {
    type Item = Hop;

    fn next(&mut self) -> Option<Hop> {
        while !self.done {
            self.skip_ows();
            match self.peek() {
                None => self.done = true,
                // An empty list element: ignored.
                Some(b',') => self.i += 1,
                Some(_) => {
                    let hop = self.element();
                    match hop {
                        Ok(hop) => {
                            if self.peek() == Some(b',') {
                                self.i += 1;
                            }
                            return Some(hop);
                        }
                        Err(()) => {
                            self.done = true;
                            return Some(Hop::Other);
                        }
                    }
                }
            }
        }
        None
    }
}

/// RFC 9110's `tchar`.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// A quoted value unescaped on the stack: enough for any node
/// (`"[` + 39 + `]:` + a port), and a marker for longer ones, which are
/// not addresses.
struct Buf {
    bytes: [u8; 64],
    len: usize,
    overflow: bool,
}

impl Buf {
    fn new() -> Self {
        Self {
            bytes: [0; 64],
            len: 0,
            overflow: false,
        }
    }

    fn push(&mut self, b: u8) {
        match self.bytes.get_mut(self.len) {
            Some(slot) => {
                *slot = b;
                self.len += 1;
            }
            None => self.overflow = true,
        }
    }

    fn get(&self) -> Option<&[u8]> {
        (!self.overflow).then(|| &self.bytes[..self.len])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn hops(s: &str) -> Vec<Hop> {
        Elements::new(s.as_bytes()).collect()
    }

    #[test]
    fn nodes_with_ports_and_brackets() {
        let node = |s: &str| parse_node(s.as_bytes());
        assert_eq!(node("192.0.2.1:80"), Some(ip("192.0.2.1")));
        assert_eq!(node("[2001:db8::1]:80"), Some(ip("2001:db8::1")));
        assert_eq!(node("[2001:db8::1]"), Some(ip("2001:db8::1")));
        assert_eq!(node("192.0.2.43:_p7"), Some(ip("192.0.2.43")));
        assert_eq!(
            node("[2001:db8:cafe::17]:_abc"),
            Some(ip("2001:db8:cafe::17"))
        );
        assert_eq!(node("unknown"), None);
        assert_eq!(node("_hidden"), None);
        assert_eq!(node("[1.2.3.4]"), None);
        assert_eq!(node("192.0.2.1:"), None);
        assert_eq!(node("192.0.2.1:_"), None);
        assert_eq!(node("192.0.2.1:123456"), None);
        assert_eq!(node("[::1]x"), None);
    }

    #[test]
    fn elements_honour_quotes_and_escapes() {
        let a = |s: &str| Hop::Addr(ip(s));
        assert_eq!(hops("for=192.0.2.60;proto=http"), [a("192.0.2.60")]);
        assert_eq!(
            hops(" proto=https; For=\"[2001:db8:cafe::17]:4711\""),
            [a("2001:db8:cafe::17")]
        );
        assert_eq!(
            hops("for=198.51.100.1;host=\"x,for=6.6.6.6;y=z\""),
            [a("198.51.100.1")]
        );
        assert_eq!(
            hops("for=\"\\1.2.3.4\" , ,for=unknown"),
            [a("1.2.3.4"), Hop::Other]
        );
        assert_eq!(hops("for=_hidden"), [Hop::Other]);
        assert_eq!(hops("by=192.0.2.1"), [Hop::Other]);
        assert_eq!(hops("for=1.2.3.4;for=1.2.3.4"), [Hop::Other]);
        assert_eq!(hops(""), []);
        // Syntax errors end the field.
        assert_eq!(hops("for=\"192.0.2.1"), [Hop::Other]);
        assert_eq!(hops("for=1.2.3.4 x, for=5.6.7.8"), [Hop::Other]);
        assert_eq!(hops("for=, for=5.6.7.8"), [Hop::Other]);
        assert_eq!(
            hops("for=1.1.1.1, =x, for=5.6.7.8"),
            [a("1.1.1.1"), Hop::Other]
        );
        let long = format!("for=\"{}\"", "1".repeat(100));
        assert_eq!(hops(&long), [Hop::Other]);
    }
}
