//! The layer's keys under attack: `Forwarded` parsed as RFC 7239 says
//! (quoted strings, quoted pairs, obfuscated ports), fuzzed with proptest;
//! IPv4-mapped CIDR notation; and an API-key header bounded in length.

// Plain `cargo test --features tower` runs this suite; the loom models skip it.
#![cfg(not(feature = "loom"))]

use std::net::{IpAddr, SocketAddr};

use http::{HeaderName, Request, StatusCode};
use proptest::prelude::*;
use tollgate::tower::{
    Cidr, Extraction, ForwardedHeader, HeaderKey, KeyExtractor, MissingKey, TrustedProxyIp,
};

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// The key `TrustedProxyIp` (trusting 10.0.0.0/8 and fd00::/8, reading
/// `Forwarded`) gives a request from `peer` with these `Forwarded` lines.
fn forwarded_key(peer: &str, lines: &[&[u8]]) -> Extraction<IpAddr> {
    let extractor =
        TrustedProxyIp::new(["10.0.0.0/8".parse().unwrap(), "fd00::/8".parse().unwrap()])
            .header(ForwardedHeader::Forwarded);
    let mut request = Request::get("/").body(()).unwrap();
    for line in lines {
        request.headers_mut().append(
            http::header::FORWARDED,
            http::HeaderValue::from_bytes(line).unwrap(),
        );
    }
    let peer: SocketAddr = peer.parse().unwrap();
    request.extensions_mut().insert(peer);
    let (parts, ()) = request.into_parts();
    extractor.extract(&parts)
}

fn key_of(line: &str) -> IpAddr {
    match forwarded_key("10.0.0.1:443", &[line.as_bytes()]) {
        Extraction::Key(key) => key,
        other => panic!("{line:?}: {other:?}"),
    }
}

#[test]
fn a_quoted_host_cannot_inject_a_for() {
    // A trusted proxy passes the client's own Host header on, quoted: its
    // commas, semicolons and equals signs are data, not delimiters.
    assert_eq!(
        key_of("for=198.51.100.1;host=\"x,for=6.6.6.6;y=z\""),
        ip("198.51.100.1")
    );
    assert_eq!(
        key_of("for=198.51.100.1;host=\"a\\\",for=6.6.6.6\""),
        ip("198.51.100.1")
    );
    assert_eq!(
        key_of("for=203.0.113.5, for=198.51.100.1;host=\"x, for=6.6.6.6\";proto=https"),
        ip("198.51.100.1")
    );
    // Quoted pairs inside the `for` value itself.
    assert_eq!(key_of("for=\"\\198.51.100.2\""), ip("198.51.100.2"));
}

#[test]
fn obfuscated_ports_key_the_client_not_the_proxy() {
    assert_eq!(key_of("for=\"192.0.2.43:_p7\""), ip("192.0.2.43"));
    assert_eq!(key_of("for=\"192.0.2.43:8080\""), ip("192.0.2.43"));
    assert_eq!(
        key_of("for=\"[2001:db8:cafe::17]:_abc\""),
        ip("2001:db8:cafe::")
    );
    assert_eq!(
        key_of("for=\"[2001:db8:cafe::17]:_a.b-c_d\";proto=https"),
        ip("2001:db8:cafe::")
    );
    // Not a port: the hop is not an address, and the proxy is the key.
    assert_eq!(key_of("for=\"192.0.2.43:_\""), ip("10.0.0.1"));
    assert_eq!(key_of("for=\"192.0.2.43:123456\""), ip("10.0.0.1"));
    assert_eq!(key_of("for=\"192.0.2.43:_p/7\""), ip("10.0.0.1"));
}

#[test]
fn ipv4_mapped_cidr_notation_is_accepted() {
    let block: Cidr = "::ffff:127.0.0.0/104".parse().unwrap();
    assert!(block.contains(ip("127.0.0.1")));
    assert!(block.contains(ip("::ffff:127.9.9.9")));
    assert!(!block.contains(ip("128.0.0.1")));
    assert_eq!(block.to_string(), "127.0.0.0/8");
    let one: Cidr = "::ffff:192.0.2.7/128".parse().unwrap();
    assert_eq!(one.to_string(), "192.0.2.7/32");
    let all_mapped: Cidr = "::ffff:0.0.0.0/96".parse().unwrap();
    assert!(all_mapped.contains(ip("198.51.100.1")));
    assert!("::ffff:127.0.0.0/129".parse::<Cidr>().is_err());
    assert!("127.0.0.0/104".parse::<Cidr>().is_err());
}

#[test]
fn an_overlong_api_key_is_refused_not_stored() {
    let api_key = HeaderKey::new(HeaderName::from_static("x-api-key"));
    let long = "k".repeat(60 * 1024);
    let (parts, ()) = Request::get("/")
        .header("x-api-key", long.as_str())
        .body(())
        .unwrap()
        .into_parts();
    match api_key.extract(&parts) {
        Extraction::Reject(r) => {
            assert_eq!(r.status(), StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE)
        }
        Extraction::Key(k) => panic!("a {} KiB key was used as a key", k.len() / 1024),
        other => panic!("a 60 KiB key was {other:?}"),
    }
}

/// One `Forwarded` element, as generated: its pairs in order.
#[derive(Debug, Clone)]
enum Pair {
    /// `for=` an address, written in one of the forms RFC 7239 allows.
    For(IpAddr, u8),
    /// `for=unknown` or an obfuscated node.
    Hidden(&'static str),
    /// A quoted `host=` value holding anything a Host header may.
    Host(String),
    Proto,
}

fn render_for(ip: IpAddr, form: u8) -> String {
    match (ip, form % 4) {
        (IpAddr::V4(v4), 0) => format!("for={v4}"),
        (IpAddr::V4(v4), 1) => format!("for=\"{v4}:8080\""),
        (IpAddr::V4(v4), 2) => format!("for=\"{v4}:_p7\""),
        (IpAddr::V4(v4), _) => format!("For=\"{v4}\""),
        (IpAddr::V6(v6), 0) => format!("for=\"[{v6}]\""),
        (IpAddr::V6(v6), 1) => format!("for=\"[{v6}]:4711\""),
        (IpAddr::V6(v6), 2) => format!("for=\"[{v6}]:_abc\""),
        (IpAddr::V6(v6), _) => format!("FOR=\"[{v6}]\""),
    }
}

fn quote(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        if c == '"' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    out
}

fn address() -> impl Strategy<Value = IpAddr> {
    prop_oneof![
        Just(ip("203.0.113.9")),
        Just(ip("6.6.6.6")),
        Just(ip("10.0.0.7")),
        Just(ip("10.9.9.9")),
        Just(ip("2001:db8:aa::1")),
        Just(ip("fd00::5")),
    ]
}

fn pair() -> impl Strategy<Value = Pair> {
    prop_oneof![
        (address(), any::<u8>()).prop_map(|(a, f)| Pair::For(a, f)),
        prop_oneof![
            Just("for=unknown"),
            Just("for=_hidden"),
            Just("for=\"_x.y:_z\"")
        ]
        .prop_map(Pair::Hidden),
        "[a-z0-9,;=\" \\\\.:\\[\\]]{0,24}|for=6\\.6\\.6\\.6|x,for=6\\.6\\.6\\.6;y=z"
            .prop_map(Pair::Host),
        Just(Pair::Proto),
    ]
}

fn render(elements: &[Vec<Pair>], ows: &[bool]) -> String {
    let mut out = String::new();
    for (i, element) in elements.iter().enumerate() {
        if i > 0 {
            out.push_str(if ows[i % ows.len()] { ", " } else { "," });
        }
        let pairs: Vec<String> = element
            .iter()
            .map(|p| match p {
                Pair::For(a, f) => render_for(*a, *f),
                Pair::Hidden(s) => (*s).to_owned(),
                Pair::Host(h) => format!("host={}", quote(h)),
                Pair::Proto => "proto=https".to_owned(),
            })
            .collect();
        out.push_str(&pairs.join(";"));
    }
    out
}

/// Whether the tests' proxies (10.0.0.0/8, fd00::/8) are trusted.
fn trusted(a: IpAddr) -> bool {
    match a {
        IpAddr::V4(v4) => v4.octets()[0] == 10,
        IpAddr::V6(v6) => v6.segments()[0] >> 8 == 0xfd,
    }
}

/// The reference walk over hops read right to left (`None`: not an
/// address): the first untrusted address, or the nearest trusted one
/// where the walk stops at a hop that is not an address or after 20
/// hops. The flag says whether the walk decided within `hops` (rather
/// than running past the left end of them).
fn walk(hops: impl Iterator<Item = Option<IpAddr>>, peer: IpAddr) -> (IpAddr, bool) {
    let mut nearest = peer;
    for (n, hop) in hops.enumerate() {
        if n == 20 {
            return (nearest, true);
        }
        match hop {
            Some(a) if trusted(a) => nearest = a,
            Some(a) => return (a, true),
            None => return (nearest, true),
        }
    }
    (nearest, false)
}

/// The reference walk over generated elements: each element's single
/// `for` address, or none.
fn reference(elements: &[Vec<Pair>], peer: IpAddr) -> (IpAddr, bool) {
    let hops = elements.iter().rev().map(|element| {
        let fors: Vec<&Pair> = element
            .iter()
            .filter(|p| matches!(p, Pair::For(..) | Pair::Hidden(_)))
            .collect();
        match fors.as_slice() {
            [Pair::For(a, _)] => Some(*a),
            _ => None,
        }
    });
    walk(hops, peer)
}

fn expected(elements: &[Vec<Pair>], peer: IpAddr) -> IpAddr {
    reference(elements, peer).0
}

/// Bytes a client might write in its own part of `Forwarded`: pieces of
/// the grammar in any order, quotes and escapes unbalanced, and a few
/// arbitrary bytes.
fn garbage() -> impl Strategy<Value = Vec<u8>> {
    (
        prop::collection::vec(
            prop_oneof![
                Just("for="),
                Just("host="),
                Just("\""),
                Just("\\"),
                Just(","),
                Just(";"),
                Just("="),
                Just(" "),
                Just("6.6.6.6"),
                Just("[2001:db8::1]"),
                Just(":80"),
                Just(":_x"),
                Just("unknown"),
                Just("_hid"),
                Just("x"),
                Just("10.0.0.9"),
            ],
            0..24,
        ),
        prop::collection::vec(any::<u8>(), 0..8),
    )
        .prop_map(|(pieces, tail)| {
            let mut bytes = pieces.concat().into_bytes();
            bytes.extend(tail.into_iter().filter(|b| *b >= 0x20 && *b != 0x7f));
            bytes
        })
}

/// Whether `key` is named in `header` right after a `for=`.
fn named_after_for(header: &[u8], key: IpAddr) -> bool {
    let text = String::from_utf8_lossy(header).to_ascii_lowercase();
    let named = [key.to_string(), format!("[{key}")].iter().any(|form| {
        text.contains(&format!("for={form}"))
            || text.contains(&format!("for=\"{form}"))
            || text.contains(&format!("for=\"\\{form}"))
    });
    let v6 = text.contains("for=[2001:db8::1]") || text.contains("for=\"[2001:db8::1]");
    named || (key == ip("2001:db8::") && v6)
}

/// One `X-Forwarded-For` entry, as generated.
#[derive(Debug, Clone)]
enum Entry {
    /// An address, in one of the forms proxies write.
    Addr(IpAddr, u8),
    /// Bytes that are no address: no digit, no `:` and no `,`, and may
    /// hold bytes that are not ASCII.
    Junk(Vec<u8>),
}

fn entry() -> impl Strategy<Value = Entry> {
    prop_oneof![
        (address(), any::<u8>()).prop_map(|(a, f)| Entry::Addr(a, f)),
        prop::collection::vec(
            prop_oneof![
                prop::sample::select(b"abcxyz_-. \t\"\\;=[]".to_vec()),
                0x80u8..=0xff,
            ],
            0..6
        )
        .prop_map(Entry::Junk),
    ]
}

fn render_entry(entry: &Entry) -> Vec<u8> {
    match entry {
        Entry::Addr(IpAddr::V4(v4), form) => match form % 3 {
            0 => format!("{v4}"),
            1 => format!("{v4}:8080"),
            _ => format!("  {v4}\t"),
        }
        .into_bytes(),
        Entry::Addr(IpAddr::V6(v6), form) => match form % 3 {
            0 => format!("{v6}"),
            1 => format!("[{v6}]"),
            _ => format!(" [{v6}]:443"),
        }
        .into_bytes(),
        Entry::Junk(bytes) => bytes.clone(),
    }
}

fn group(a: IpAddr) -> IpAddr {
    match a {
        IpAddr::V4(_) => a,
        IpAddr::V6(v6) => IpAddr::V6((u128::from(v6) & (u128::MAX << 64)).into()),
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 512,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// A well-formed header: the key is exactly what the reference walk
    /// over the generated `for` values finds, whatever the quoted `host`
    /// values hold.
    #[test]
    fn forwarded_keys_match_the_reference_walk(
        elements in prop::collection::vec(prop::collection::vec(pair(), 1..4), 1..6),
        ows in prop::collection::vec(any::<bool>(), 1..4),
    ) {
        let header = render(&elements, &ows);
        let got = forwarded_key("10.0.0.1:443", &[header.as_bytes()]);
        prop_assert_eq!(got, Extraction::Key(group(expected(&elements, ip("10.0.0.1")))), "{}", header);
    }

    /// Garbage on the client's own lines, and left of the elements on the
    /// line its proxies append to: wherever the reference walk over the
    /// well-formed elements decides, the key is what it decides; where it
    /// runs into the client's garbage, the key is the nearest proxy or an
    /// address the header names after `for=`.
    #[test]
    fn forwarded_keys_ignore_garbage_in_the_clients_own_part(
        client in prop::option::of((address(), any::<u8>())),
        elements in prop::collection::vec(prop::collection::vec(pair(), 1..4), 1..6),
        ows in prop::collection::vec(any::<bool>(), 1..4),
        own in garbage(),
        own_lines in prop::collection::vec(garbage(), 0..3),
    ) {
        let mut elements = elements;
        if let Some((a, form)) = client {
            elements.insert(0, vec![Pair::For(a, form)]);
        }
        let mut line = own.clone();
        line.extend_from_slice(if ows[0] { b", " } else { b"," });
        line.extend_from_slice(render(&elements, &ows).as_bytes());
        let mut lines: Vec<&[u8]> = own_lines.iter().map(Vec::as_slice).collect();
        lines.push(&line);
        let got = forwarded_key("10.0.0.1:443", &lines);
        let Extraction::Key(key) = got else { panic!("{got:?}") };
        let (walked, decided) = reference(&elements, ip("10.0.0.1"));
        let shown = String::from_utf8_lossy(&lines.concat()).into_owned();
        if decided {
            prop_assert_eq!(key, group(walked), "{}", shown);
        } else {
            let named = lines.iter().any(|l| named_after_for(l, key));
            prop_assert!(key == group(walked) || named, "{} from {}", key, shown);
        }
    }

    /// `X-Forwarded-For` lines of addresses and junk (bytes that are not
    /// ASCII included) in any order: the key is exactly the reference
    /// walk's over the entries, the last line's last entry first.
    #[test]
    fn x_forwarded_for_keys_match_the_reference_walk(
        lines in prop::collection::vec(prop::collection::vec(entry(), 1..5), 1..4),
        spaced in any::<bool>(),
    ) {
        let rendered: Vec<Vec<u8>> = lines
            .iter()
            .map(|entries| {
                let parts: Vec<Vec<u8>> = entries.iter().map(render_entry).collect();
                parts.join(if spaced { &b", "[..] } else { &b","[..] })
            })
            .collect();
        let refs: Vec<&[u8]> = rendered.iter().map(Vec::as_slice).collect();
        let got = x_forwarded_for_key("10.0.0.1:443", &refs);
        let hops = lines.iter().flatten().rev().map(|e| match e {
            Entry::Addr(a, _) => Some(*a),
            Entry::Junk(_) => None,
        });
        let (want, _) = walk(hops, ip("10.0.0.1"));
        prop_assert_eq!(got, Extraction::Key(group(want)), "{:?}", rendered);
    }

    /// Any bytes at all: the key is the proxy or an address the header
    /// names right after `for=`; never one from a `host` value alone.
    #[test]
    fn any_forwarded_bytes_yield_the_proxy_or_a_for_value(header in garbage()) {
        let got = forwarded_key("10.0.0.1:443", &[&header]);
        let Extraction::Key(key) = got else { panic!("{got:?}") };
        if key != ip("10.0.0.1") {
            prop_assert!(
                named_after_for(&header, key),
                "{} from {:?}",
                key,
                String::from_utf8_lossy(&header)
            );
        }
    }
}

/// The key `TrustedProxyIp` (trusting 10.0.0.0/8 and fd00::/8, reading
/// `X-Forwarded-For`) gives a request from `peer` with these lines.
fn x_forwarded_for_key(peer: &str, lines: &[&[u8]]) -> Extraction<IpAddr> {
    let extractor =
        TrustedProxyIp::new(["10.0.0.0/8".parse().unwrap(), "fd00::/8".parse().unwrap()]);
    let mut request = Request::get("/").body(()).unwrap();
    for line in lines {
        request.headers_mut().append(
            "x-forwarded-for",
            http::HeaderValue::from_bytes(line).unwrap(),
        );
    }
    let peer: SocketAddr = peer.parse().unwrap();
    request.extensions_mut().insert(peer);
    let (parts, ()) = request.into_parts();
    extractor.extract(&parts)
}

/// A client behind a proxy that appends `, <client>` to the client's own
/// `X-Forwarded-For` line (as nginx does) cannot move its key by garbling
/// its own entries: a byte that is not ASCII, garbage, or an address,
/// left of the entry the proxy wrote, changes nothing.
#[test]
fn garbage_in_the_clients_own_x_forwarded_for_entries_changes_nothing() {
    let client = Extraction::Key(ip("203.0.113.9"));
    for own in [
        &b"\xff"[..],
        b"1.1.1.1 \xc3\xa9",
        b"\xe2\x80\x8b6.6.6.6",
        b"not an address",
        b"6.6.6.6",
        b"",
    ] {
        let mut line = own.to_vec();
        line.extend_from_slice(b", 203.0.113.9");
        assert_eq!(
            x_forwarded_for_key("10.0.0.1:443", &[&line]),
            client,
            "{}",
            String::from_utf8_lossy(&line)
        );
        // Through two proxies, the second appending the first's address.
        line.extend_from_slice(b", 10.0.0.2");
        assert_eq!(x_forwarded_for_key("10.0.0.1:443", &[&line]), client);
        // The client's garbage on a line of its own, the proxy's line after.
        assert_eq!(
            x_forwarded_for_key("10.0.0.1:443", &[own, b"203.0.113.9"]),
            client
        );
    }
    // Garbage right of the client's entry is the proxies' own: the walk
    // stops there and keys by the nearest proxy.
    assert_eq!(
        x_forwarded_for_key("10.0.0.1:443", &[b"203.0.113.9, \xff"]),
        Extraction::Key(ip("10.0.0.1"))
    );
}

/// `Forwarded` is read from the trusted end, each line on its own: a
/// syntax error in the client's own elements or lines never hides the
/// element a proxy wrote after them.
#[test]
fn a_forwarded_syntax_error_in_the_clients_part_changes_nothing() {
    let client = Extraction::Key(ip("203.0.113.9"));
    for own in [
        "for=\"1.2.3.4",
        "for=1.2.3.4 x",
        "junk",
        "for=",
        "=x",
        "for=\"1.2.3.4\\\"",
        "\"",
        "for=1.2.3.4;;host=\"a,b",
        "for=6.6.6.6",
    ] {
        let line = format!("{own}, for=203.0.113.9");
        assert_eq!(
            forwarded_key("10.0.0.1:443", &[line.as_bytes()]),
            client,
            "{line}"
        );
        let line = format!("{own}, for=203.0.113.9;proto=https, for=10.0.0.2");
        assert_eq!(
            forwarded_key("10.0.0.1:443", &[line.as_bytes()]),
            client,
            "{line}"
        );
        assert_eq!(
            forwarded_key("10.0.0.1:443", &[own.as_bytes(), b"for=203.0.113.9"]),
            client,
            "{own:?} on a line of its own"
        );
    }
    // A quoted value of the proxy's own element still holds commas.
    assert_eq!(
        forwarded_key(
            "10.0.0.1:443",
            &[b"junk\", for=203.0.113.9;host=\"x, for=6.6.6.6\""]
        ),
        client
    );
}

fn api_key_of(extractor: &HeaderKey, lines: &[&[u8]]) -> Extraction<String> {
    let mut request = Request::get("/").body(()).unwrap();
    for line in lines {
        request
            .headers_mut()
            .append("x-api-key", http::HeaderValue::from_bytes(line).unwrap());
    }
    let (parts, ()) = request.into_parts();
    extractor.extract(&parts)
}

/// HTTP/2 does not strip the whitespace around a field value: a padded
/// key is the same client as the bare one, not a new budget.
#[test]
fn a_padded_api_key_is_the_same_client() {
    let api_key = HeaderKey::new(HeaderName::from_static("x-api-key"));
    for padded in [&b"k-1"[..], b" k-1", b"k-1 ", b"\tk-1", b" \t k-1\t "] {
        assert_eq!(
            api_key_of(&api_key, &[padded]),
            Extraction::Key("k-1".to_owned()),
            "{:?}",
            String::from_utf8_lossy(padded)
        );
    }
    // Inner whitespace is part of the key.
    assert_eq!(
        api_key_of(&api_key, &[b" k 1 "]),
        Extraction::Key("k 1".to_owned())
    );
    // The bound applies to the key as stored, without its padding.
    let short = api_key.max_len(3);
    assert_eq!(
        api_key_of(&short, &[b"   k-1   "]),
        Extraction::Key("k-1".to_owned())
    );
}

/// A request with the key header twice is ambiguous: refused with 400
/// whatever the lines hold and whatever `MissingKey` says, so that an
/// empty first line can never let a keyed request through unlimited.
#[test]
fn a_repeated_api_key_header_is_refused_never_skipped() {
    for missing in [
        MissingKey::Skip,
        MissingKey::Unauthorized,
        MissingKey::BadRequest,
    ] {
        let api_key = HeaderKey::new(HeaderName::from_static("x-api-key")).on_missing(missing);
        for lines in [
            &[&b""[..], b"k-1"][..],
            &[b" ", b"k-1"],
            &[b"k-1", b""],
            &[b"k-1", b"k-1"],
            &[b"k-1", b"k-2"],
            &[b"", b""],
        ] {
            match api_key_of(&api_key, lines) {
                Extraction::Reject(r) => {
                    assert_eq!(r.status(), StatusCode::BAD_REQUEST, "{missing:?} {lines:?}");
                    assert!(r.detail().contains("more than once"), "{}", r.detail());
                }
                other => panic!("{missing:?} {lines:?}: {other:?}"),
            }
        }
    }
}

fn binary_key_of(extractor: &HeaderKey, value: &[u8]) -> Extraction<String> {
    let mut request = Request::get("/").body(()).unwrap();
    request
        .headers_mut()
        .append("x-token-bin", http::HeaderValue::from_bytes(value).unwrap());
    let (parts, ()) = request.into_parts();
    extractor.extract(&parts)
}

/// gRPC binary metadata (`-bin` headers) is base64, padded or not, and a
/// gRPC server reads both as the same bytes: so must the key, or a client
/// has a second budget by dropping its padding.
#[test]
fn binary_metadata_is_keyed_by_its_bytes() {
    let token = HeaderKey::new(HeaderName::from_static("x-token-bin"));
    let key = |value: &[u8]| match binary_key_of(&token, value) {
        Extraction::Key(key) => key,
        other => panic!("{:?}: {other:?}", String::from_utf8_lossy(value)),
    };
    assert_eq!(key(b"AAE="), key(b"AAE"));
    assert_eq!(key(b" AAE"), key(b"AAE="));
    assert_eq!(key(b"AAEC"), key(b"AAEC"));
    assert_eq!(key(b"AA=="), key(b"AA"));
    assert_ne!(key(b"AAE"), key(b"AAI"));
    assert_ne!(key(b"AAE"), key(b"AA"));
    // What is not base64 has no key: refused, never a key of its own.
    for bad in [&b"A"[..], b"AAF", b"AAE==", b"AA-_", b"A A=", b"AAE=AAE="] {
        match binary_key_of(&token, bad) {
            Extraction::Reject(r) => assert_eq!(
                r.status(),
                StatusCode::BAD_REQUEST,
                "{:?}",
                String::from_utf8_lossy(bad)
            ),
            other => panic!("{:?}: {other:?}", String::from_utf8_lossy(bad)),
        }
    }
    // A header without the suffix is text: its bytes are the key.
    let text = HeaderKey::new(HeaderName::from_static("x-api-key"));
    assert_ne!(api_key_of(&text, &[b"AAE="]), api_key_of(&text, &[b"AAE"]));
    // The length bound holds for the key as stored, padded.
    let short = token.max_len(3);
    for value in [&b"AAE"[..], b"AAE="] {
        assert!(
            matches!(binary_key_of(&short, value), Extraction::Reject(r) if r.status() == StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE),
            "{value:?}"
        );
    }
}

/// Clients behind a NAT64 translator arrive with their IPv4 address in
/// the translator's prefix: each is its own client, keyed by that IPv4
/// address, as an IPv4-mapped address is.
#[test]
fn nat64_clients_are_keyed_by_their_ipv4_address() {
    let key = |peer: &str| {
        let mut request = Request::get("/").body(()).unwrap();
        let peer: SocketAddr = SocketAddr::new(peer.parse().unwrap(), 4000);
        request.extensions_mut().insert(peer);
        let (parts, ()) = request.into_parts();
        match tollgate::tower::PeerIp::new().extract(&parts) {
            Extraction::Key(key) => key,
            other => panic!("{peer}: {other:?}"),
        }
    };
    for (peer, client) in [
        ("64:ff9b::203.0.113.9", "203.0.113.9"),
        ("64:ff9b::198.51.100.7", "198.51.100.7"),
        ("::ffff:198.51.100.7", "198.51.100.7"),
        // The local-use /48 (RFC 8215), laid out as RFC 6052 says for a
        // /48: the address around the zero `u` octet.
        ("64:ff9b:1:cb00:71:900::", "203.0.113.9"),
        // A /96 inside the local-use prefix: the last 32 bits.
        ("64:ff9b:1:abcd:0:12:198.51.100.7", "198.51.100.7"),
        // Not translated: grouped by /64 as any IPv6 address.
        ("2001:db8::203.0.113.9", "2001:db8::"),
        ("64:ff9b:2::203.0.113.9", "64:ff9b:2::"),
    ] {
        assert_eq!(key(peer), ip(client), "{peer}");
    }
}

/// One spelling of the credentials `scheme token`: the scheme in the case
/// `case` picks letter by letter (bit `i` set: upper case), `spaces`
/// spaces after it, and `pad` spaces around the whole.
fn spelling(scheme: &str, token: &str, case: u32, spaces: usize, pad: usize) -> String {
    let scheme: String = scheme
        .chars()
        .enumerate()
        .map(|(i, c)| {
            if case >> (i % 32) & 1 == 1 {
                c.to_ascii_uppercase()
            } else {
                c.to_ascii_lowercase()
            }
        })
        .collect();
    let pad = " ".repeat(pad);
    format!("{pad}{scheme}{}{token}{pad}", " ".repeat(spaces))
}

/// How many of `values`, sent as `Authorization` in this order to a fresh
/// layer of 2 per minute keyed by that header, it admits, by value.
fn admitted(values: &[String]) -> Vec<(String, bool)> {
    use std::convert::Infallible;
    use std::time::Duration;
    use tollgate::tower::RateLimitLayer;
    use tollgate::{FixedWindow, ManualClock};
    use tower::{service_fn, Layer, ServiceExt};

    let limiter = FixedWindow::builder()
        .limit(2)
        .window(Duration::from_secs(60))
        .clock(ManualClock::new())
        .build()
        .unwrap();
    let service = RateLimitLayer::new(limiter, HeaderKey::new(http::header::AUTHORIZATION)).layer(
        service_fn(|_: Request<String>| async {
            Ok::<_, Infallible>(http::Response::new(String::new()))
        }),
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    values
        .iter()
        .map(|value| {
            let request = Request::get("/")
                .header(http::header::AUTHORIZATION, value.as_str())
                .body(String::new())
                .unwrap();
            let response = rt.block_on(service.clone().oneshot(request)).unwrap();
            let status = response.status();
            assert!(
                status == StatusCode::OK || status == StatusCode::TOO_MANY_REQUESTS,
                "{value:?}: {status}"
            );
            (value.clone(), status == StatusCode::OK)
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 256,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// RFC 9110 makes an authentication scheme case-insensitive (11.1) and
    /// lets one or more spaces follow it (11.4): every spelling of one
    /// credential is one client with one quota, so that no client earns a
    /// budget per spelling. Any two tokens, even ones that differ in case
    /// alone, are two clients.
    #[test]
    fn every_spelling_of_one_credential_shares_one_quota(
        scheme in prop_oneof![Just("Basic"), Just("Bearer"), Just("Digest"), Just("ApiKey")],
        tokens in prop_oneof![
            Just(["QWxhZGRpbjpvcGVu", "qwxhzgrpbjpvcgvu"]),
            Just(["t0k3n", "t0k3n-2"]),
            Just(["a=1, b=\"x  y\"", "a=1, b=\"x y\""]),
        ],
        spellings in prop::collection::vec((any::<u32>(), 1..5usize, 0..3usize, any::<bool>()), 3..16),
    ) {
        let values: Vec<String> = spellings
            .iter()
            .map(|&(case, spaces, pad, second)| {
                spelling(scheme, tokens[usize::from(second)], case, spaces, pad)
            })
            .collect();
        let outcomes = admitted(&values);
        for (i, token) in tokens.iter().enumerate() {
            let sent = spellings.iter().filter(|s| usize::from(s.3) == i).count();
            let passed = outcomes
                .iter()
                .zip(&spellings)
                .filter(|((_, ok), s)| *ok && usize::from(s.3) == i)
                .count();
            prop_assert_eq!(passed, sent.min(2), "{:?}: {:?}", token, outcomes);
        }
    }
}

/// The folding of an `Authorization` header's scheme and the blanks after
/// it, spelled out; and a value with no scheme apart keyed as it is.
#[test]
fn authorization_credentials_are_keyed_folded() {
    let key = HeaderKey::new(http::header::AUTHORIZATION);
    let of = |value: &str| {
        let (parts, ()) = Request::get("/")
            .header(http::header::AUTHORIZATION, value)
            .body(())
            .unwrap()
            .into_parts();
        key.extract(&parts)
    };
    let folded = Extraction::Key("basic X".to_owned());
    for value in [
        "Basic X",
        "basic X",
        "BASIC X",
        "Basic  X",
        "Basic   X",
        " bAsIc \t X ",
    ] {
        assert_eq!(of(value), folded, "{value:?}");
    }
    assert_eq!(of("Basic x"), Extraction::Key("basic x".to_owned()));
    assert_eq!(of("Bearer X"), Extraction::Key("bearer X".to_owned()));
    // Blanks inside the credentials are theirs.
    assert_eq!(
        of("Digest a=1,  b=2"),
        Extraction::Key("digest a=1,  b=2".to_owned())
    );
    // A bare token (no scheme apart) is keyed as sent.
    assert_eq!(of("SeCrEt"), Extraction::Key("SeCrEt".to_owned()));
    // The bound applies to the key as stored.
    let short = HeaderKey::new(http::header::AUTHORIZATION).max_len(8);
    let (parts, ()) = Request::get("/")
        .header(http::header::AUTHORIZATION, "Basic      XY")
        .body(())
        .unwrap()
        .into_parts();
    assert_eq!(
        short.extract(&parts),
        Extraction::Key("basic XY".to_owned())
    );
    // Another header is keyed as sent, blanks inside and case alike.
    let api_key = HeaderKey::new(HeaderName::from_static("x-api-key"));
    assert_eq!(
        api_key_of(&api_key, &[b"Basic  X"]),
        Extraction::Key("Basic  X".to_owned())
    );
}

/// `HeaderKey::new` takes a header's name as a string too, in any case;
/// an invalid one is an error from `try_new` and a panic that quotes it
/// from `new`.
#[test]
fn a_header_key_is_named_by_a_string_too() {
    let of = |key: &HeaderKey| {
        let (parts, ()) = Request::get("/")
            .header("x-api-key", "k-1")
            .body(())
            .unwrap()
            .into_parts();
        key.extract(&parts)
    };
    let want = Extraction::Key("k-1".to_owned());
    assert_eq!(of(&HeaderKey::new("x-api-key")), want);
    assert_eq!(of(&HeaderKey::new("X-Api-Key")), want);
    assert_eq!(of(&HeaderKey::new(String::from("x-api-key"))), want);
    assert_eq!(of(&HeaderKey::try_new("X-API-KEY").unwrap()), want);
    assert_eq!(
        of(&HeaderKey::new(HeaderName::from_static("x-api-key"))),
        want
    );
    for invalid in ["", "x api key", "x-api-key:", "ключ"] {
        assert!(HeaderKey::try_new(invalid).is_err(), "{invalid:?}");
        let panic = std::panic::catch_unwind(|| HeaderKey::new(invalid)).unwrap_err();
        let message = panic.downcast_ref::<String>().unwrap();
        assert_eq!(
            message,
            &format!("HeaderKey::new: {invalid:?} is not a valid header name")
        );
    }
}
