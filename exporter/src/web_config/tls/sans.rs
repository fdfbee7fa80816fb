//! The Subject Alternative Names of a DER certificate, written as Go's exporter-toolkit
//! matches them against `client_allowed_sans`: DNS names, email addresses, IP addresses
//! (Go's `net.IP.String`) and URIs, each as a string.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The OID 2.5.29.17 (subjectAltName), DER-encoded content.
const SAN_OID: [u8; 3] = [0x55, 0x1d, 0x11];

/// One DER element: its tag, its content and what follows it.
fn element(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&first, mut rest) = rest.split_first()?;
    let len = if first < 0x80 {
        usize::from(first)
    } else {
        let count = usize::from(first & 0x7f);
        if count == 0 || count > 4 || rest.len() < count {
            return None;
        }
        let (bytes, after) = rest.split_at(count);
        rest = after;
        bytes.iter().fold(0usize, |n, &b| (n << 8) | usize::from(b))
    };
    if rest.len() < len {
        return None;
    }
    let (content, after) = rest.split_at(len);
    Some((tag, content, after))
}

/// The SAN values of `cert`; `None` when it is not a certificate this walk can read.
pub(crate) fn of(cert: &[u8]) -> Option<Vec<String>> {
    let (0x30, certificate, _) = element(cert)? else {
        return None;
    };
    let (0x30, mut tbs, _) = element(certificate)? else {
        return None;
    };
    let mut values = Vec::new();
    while !tbs.is_empty() {
        let (tag, content, rest) = element(tbs)?;
        tbs = rest;
        if tag != 0xa3 {
            continue; // version, serial, algorithm, names, validity, key, unique ids
        }
        let (0x30, mut extensions, _) = element(content)? else {
            return None;
        };
        while !extensions.is_empty() {
            let (0x30, extension, rest) = element(extensions)? else {
                return None;
            };
            extensions = rest;
            let (0x06, oid, mut fields) = element(extension)? else {
                return None;
            };
            if oid != SAN_OID {
                continue;
            }
            // An optional `critical` BOOLEAN, then the OCTET STRING holding the names.
            let (mut tag, mut value, rest) = element(fields)?;
            if tag == 0x01 {
                fields = rest;
                (tag, value, _) = element(fields)?;
            }
            if tag != 0x04 {
                return None;
            }
            let (0x30, mut names, _) = element(value)? else {
                return None;
            };
            while !names.is_empty() {
                let (tag, name, rest) = element(names)?;
                names = rest;
                match tag {
                    // rfc822Name, dNSName: IA5 strings; a byte past ASCII makes the
                    // certificate malformed to Go's x509, so nothing matches.
                    0x81 | 0x82 => values.push(ia5(name)?),
                    // uniformResourceIdentifier: as Go's `url.URL.String()` writes it, whose
                    // scheme is lower case.
                    0x86 => values.push(uri(ia5(name)?)),
                    0x87 => values.push(ip(name)?),
                    _ => {} // otherName, directoryName, …: exporter-toolkit ignores them
                }
            }
        }
    }
    Some(values)
}

/// An IA5String: ASCII only.
fn ia5(bytes: &[u8]) -> Option<String> {
    bytes
        .is_ascii()
        .then(|| String::from_utf8_lossy(bytes).into_owned())
}

/// A URI with its scheme (letters, digits, `+`, `-`, `.` before the first `:`) in lower
/// case, as Go's URL parser keeps it.
fn uri(mut text: String) -> String {
    if let Some(colon) = text.find(':') {
        let scheme = &text[..colon];
        let valid = scheme.starts_with(|c: char| c.is_ascii_alphabetic())
            && scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c));
        if valid {
            text[..colon].make_ascii_lowercase();
        }
    }
    text
}

/// An iPAddress as Go writes it: dotted for IPv4 and IPv4-mapped IPv6, RFC 5952 otherwise.
fn ip(bytes: &[u8]) -> Option<String> {
    let addr = match bytes.len() {
        4 => IpAddr::V4(Ipv4Addr::new(bytes[0], bytes[1], bytes[2], bytes[3])),
        16 => {
            let v6 = Ipv6Addr::from(<[u8; 16]>::try_from(bytes).ok()?);
            match v6.to_ipv4_mapped() {
                Some(v4) => IpAddr::V4(v4),
                None => IpAddr::V6(v6),
            }
        }
        _ => return None,
    };
    Some(addr.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_of_san_is_read_as_go_writes_it() {
        let mut params = rcgen::CertificateParams::new(vec!["a.test".to_string()]).unwrap();
        params.subject_alt_names.extend([
            rcgen::SanType::Rfc822Name("ops@a.test".try_into().unwrap()),
            rcgen::SanType::URI("spiffe://a.test/x".try_into().unwrap()),
            rcgen::SanType::IpAddress("10.0.0.1".parse().unwrap()),
            rcgen::SanType::IpAddress("::ffff:10.0.0.2".parse().unwrap()),
            rcgen::SanType::IpAddress("2001:db8:0:0:0:0:0:1".parse().unwrap()),
        ]);
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        let found = of(cert.der()).expect("a certificate");
        let want = [
            "a.test",
            "ops@a.test",
            "spiffe://a.test/x",
            "10.0.0.1",
            "10.0.0.2",
            "2001:db8::1",
        ];
        assert_eq!(found, want);
        // Cut anywhere, or garbage: no panic, and nothing read past the end.
        for cut in 0..cert.der().len() {
            let _ = of(&cert.der()[..cut]);
        }
        assert_eq!(of(b"\x30\x84\xff\xff\xff\xff"), None);
        assert_eq!(
            ia5("m\u{fc}nchen.test".as_bytes()),
            None,
            "not ASCII: malformed to Go"
        );
        assert_eq!(uri("SPIFFE://A.test/X".into()), "spiffe://A.test/X");
        assert_eq!(uri("urn:Example:X".into()), "urn:Example:X");
        assert_eq!(uri("9x:y".into()), "9x:y", "not a scheme");
        assert_eq!(of(b""), None);
    }
}
