//! The addresses proxies write: nodes (`192.0.2.1:80`, `[2001:db8::1]`,
//! `"192.0.2.43:_p7"`), and the headers that carry them, read as hops
//! from the trusted end (right to left, the last line first):
//! `X-Forwarded-For` entry by entry, `X-Real-IP` line by line, and RFC
//! 7239's `Forwarded` element by element, each element parsed as its
//! grammar says, with quoted strings and quoted pairs, so that a quoted
//! value (a `host=` carrying the client's own Host header) can never pass
//! for a `for=` parameter. Whatever a client writes left of the hops
//! its proxies append can spoil only its own hops.

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

/// One hop of a forwarding header, as the walk sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Hop {
    /// The hop names this address (for `Forwarded`, in its one `for=`).
    Addr(IpAddr),
    /// No address: garbage, `unknown`, an obfuscated node, a `Forwarded`
    /// element with no `for=` or two, or one that does not parse.
    Other,
}

impl Hop {
    fn of(node: Option<IpAddr>) -> Self {
        node.map_or(Hop::Other, Hop::Addr)
    }
}

/// The hops of `X-Forwarded-For` lines, right to left: the last line
/// first, each line's entries from its end. Each entry is read on its
/// own, so bytes that are not ASCII in one entry make that entry, and no
/// other, not an address.
pub(super) fn x_forwarded_for<'a>(
    lines: impl DoubleEndedIterator<Item = &'a [u8]> + 'a,
) -> impl Iterator<Item = Hop> + 'a {
    lines.rev().flat_map(|line| {
        line.rsplit(|&b| b == b',')
            .map(|entry| Hop::of(parse_node(entry.trim_ascii())))
    })
}

/// The hops of `X-Real-IP` lines, right to left: each line is one
/// address.
pub(super) fn x_real_ip<'a>(
    lines: impl DoubleEndedIterator<Item = &'a [u8]> + 'a,
) -> impl Iterator<Item = Hop> + 'a {
    lines
        .rev()
        .map(|line| Hop::of(parse_node(line.trim_ascii())))
}

/// The hops of `Forwarded` lines, right to left: the last line first, and
/// each line's elements from its end (see [`Segments`]), each parsed on
/// its own (see [`element`]). Empty list elements are skipped, as RFC
/// 9110's list rules say.
pub(super) fn forwarded<'a>(
    lines: impl DoubleEndedIterator<Item = &'a [u8]> + 'a,
) -> impl Iterator<Item = Hop> + 'a {
    lines
        .rev()
        .flat_map(|line| Segments::new(line).filter_map(element))
}

/// A `Forwarded` line's list elements, right to left: each ends at the
/// nearest comma to its left that is outside any quoted string, as read
/// from the right (a `"` opens or closes a quoted string unless an odd
/// number of `\` precede it). For a well-formed line these are exactly
/// the elements a left-to-right parse finds; where the line is broken,
/// it is broken only in the elements left of the break, which the client
/// wrote, and the elements right of it, which proxies appended, are still
/// found whole.
#[derive(Debug)]
pub(super) struct Segments<'a> {
    /// What is left to split: the line up to the last comma cut.
    rest: Option<&'a [u8]>,
}

impl<'a> Segments<'a> {
    pub(super) fn new(line: &'a [u8]) -> Self {
        Self { rest: Some(line) }
    }
}

impl<'a> Iterator for Segments<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        let s = self.rest?;
        let mut quoted = false;
        for i in (0..s.len()).rev() {
            match s[i] {
                b'"' => {
                    let escapes = s[..i].iter().rev().take_while(|&&b| b == b'\\').count();
                    if escapes % 2 == 0 {
                        quoted = !quoted;
                    }
                }
                b',' if !quoted => {
                    self.rest = Some(&s[..i]);
                    return Some(&s[i + 1..]);
                }
                _ => {}
            }
        }
        self.rest = None;
        Some(s)
    }
}

/// One `Forwarded` list element (RFC 7239 section 4: pairs separated by
/// `;`, with RFC 9110's optional whitespace around them): `None` if it is
/// empty, otherwise what it names. A value may be a token (read
/// leniently: `:`, `[` and `]` allowed, as some proxies write ports
/// unquoted) or a quoted string, whose `\` escapes the next byte.
pub(super) fn element(segment: &[u8]) -> Option<Hop> {
    let mut parser = Parser { s: segment, i: 0 };
    parser.skip_ows();
    parser.peek()?;
    Some(parser.element().unwrap_or(Hop::Other))
}

/// A left-to-right reader of one element.
struct Parser<'a> {
    s: &'a [u8],
    i: usize,
}

impl<'a> Parser<'a> {
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

    /// The element, its first pair next; `Err` on a syntax error, which
    /// includes anything left after the element (such as a comma the
    /// split took for quoted).
    fn element(&mut self) -> Result<Hop, ()> {
        let mut fors = 0;
        let mut addr = None;
        loop {
            self.skip_ows();
            match self.peek() {
                None => break,
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
            if !matches!(self.peek(), None | Some(b';')) {
                return Err(());
            }
        }
        Ok(match (fors, addr) {
            (1, Some(ip)) => Hop::Addr(ip),
            _ => Hop::Other,
        })
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

    /// The hops of one `Forwarded` line, left to right.
    fn hops(s: &str) -> Vec<Hop> {
        let mut hops: Vec<Hop> = forwarded([s.as_bytes()].into_iter()).collect();
        hops.reverse();
        hops
    }

    #[test]
    fn segments_split_at_commas_outside_quotes_from_the_right() {
        let split = |s: &str| -> Vec<String> {
            Segments::new(s.as_bytes())
                .map(|seg| String::from_utf8(seg.to_vec()).unwrap())
                .collect()
        };
        assert_eq!(split("a, b"), [" b", "a"]);
        assert_eq!(split("a=\"x,y\", b"), [" b", "a=\"x,y\""]);
        // An escaped quote does not close the string; an escaped
        // backslash before a quote does not escape it.
        assert_eq!(split("a=\"x\\\",y\",b"), ["b", "a=\"x\\\",y\""]);
        assert_eq!(split("a=\"x\\\\\",b"), ["b", "a=\"x\\\\\""]);
        assert_eq!(split(""), [""]);
        assert_eq!(split(",,"), ["", "", ""]);
        // A quote left open from the right: the rest is one segment.
        assert_eq!(split("a,b\",c"), ["c", "a,b\""]);
    }

    #[test]
    fn x_forwarded_for_entries_are_read_one_by_one() {
        let lines: [&[u8]; 2] = [b"\xff, 192.0.2.1", b"junk,[2001:db8::1]:80 "];
        let hops: Vec<Hop> = x_forwarded_for(lines.into_iter()).collect();
        assert_eq!(
            hops,
            [
                Hop::Addr(ip("2001:db8::1")),
                Hop::Other,
                Hop::Addr(ip("192.0.2.1")),
                Hop::Other
            ]
        );
        let real: Vec<Hop> =
            x_real_ip([&b" 192.0.2.1 "[..], b"1.1.1.1, 2.2.2.2"].into_iter()).collect();
        assert_eq!(real, [Hop::Other, Hop::Addr(ip("192.0.2.1"))]);
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
        // A syntax error spoils its own element only.
        assert_eq!(hops("for=\"192.0.2.1"), [Hop::Other]);
        assert_eq!(
            hops("for=1.2.3.4 x, for=5.6.7.8"),
            [Hop::Other, a("5.6.7.8")]
        );
        assert_eq!(hops("for=, for=5.6.7.8"), [Hop::Other, a("5.6.7.8")]);
        assert_eq!(
            hops("for=1.1.1.1, =x, for=5.6.7.8"),
            [a("1.1.1.1"), Hop::Other, a("5.6.7.8")]
        );
        // An unbalanced quote swallows what lies left of it, never what
        // lies right of it.
        assert_eq!(
            hops("for=\"1.2.3.4, for=5.6.7.8"),
            [Hop::Other, a("5.6.7.8")]
        );
        assert_eq!(
            hops("x=\"a, for=1.1.1.1\", for=5.6.7.8"),
            [Hop::Other, a("5.6.7.8")]
        );
        let long = format!("for=\"{}\"", "1".repeat(100));
        assert_eq!(hops(&long), [Hop::Other]);
    }
}
