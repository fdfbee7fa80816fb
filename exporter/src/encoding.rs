//! `Accept-Encoding` negotiation and the compression done on the worker.

use std::io::{self, Write as _};

use flate2::Compression;
use flate2::write::GzEncoder;

/// The gzip level of a compressed scrape. Level 1 is chosen by measurement (`cargo run
/// --release --example walk_cost`, BENCHMARKS.md): on a 100 000-series rendering it
/// compresses 3.5x for an eighth of the render's own time; the default level 6 saves 6 %
/// more for more than the render's time, paid while a slot is held.
pub const GZIP_LEVEL: u32 = 1;

/// How a scrape's body is encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    /// The exposition as it was rendered.
    Identity,
    /// gzip (`Content-Encoding: gzip`), compressed on the worker that rendered it.
    Gzip,
}

impl Encoding {
    /// What an `Accept-Encoding` value allows, read once (RFC 9110, section 12.5.3): gzip
    /// when `gzip` or `x-gzip` is listed with a quality above zero, or, neither being
    /// listed, `*` is; identity otherwise. `gzip;q=0` refuses gzip whatever `*` says. An
    /// unreadable value (not UTF-8, a quality that is not a number) refuses what it names.
    /// Several header lines are one comma-separated list: join them with `, `.
    ///
    /// # Examples
    ///
    /// ```
    /// use loopguard_exporter::Encoding;
    ///
    /// assert_eq!(Encoding::negotiate(Some(b"gzip")), Encoding::Gzip);
    /// assert_eq!(Encoding::negotiate(Some(b"x-gzip, br")), Encoding::Gzip);
    /// assert_eq!(Encoding::negotiate(Some(b"gzip;q=0, *")), Encoding::Identity);
    /// assert_eq!(Encoding::negotiate(None), Encoding::Identity);
    /// ```
    pub fn negotiate(accept_encoding: Option<&[u8]>) -> Encoding {
        let Some(value) = accept_encoding.and_then(|v| std::str::from_utf8(v).ok()) else {
            return Encoding::Identity;
        };
        // The quality of an explicit gzip (or x-gzip) entry, and of `*`: the highest given.
        let (mut gzip, mut any) = (None::<f32>, None::<f32>);
        for item in value.split(',') {
            let mut parts = item.split(';');
            let coding = parts.next().unwrap_or_default().trim();
            let slot =
                if coding.eq_ignore_ascii_case("gzip") || coding.eq_ignore_ascii_case("x-gzip") {
                    &mut gzip
                } else if coding == "*" {
                    &mut any
                } else {
                    continue;
                };
            let q = quality(parts);
            *slot = Some(slot.map_or(q, |seen| seen.max(q)));
        }
        match gzip.or(any) {
            Some(q) if q > 0.0 => Encoding::Gzip,
            _ => Encoding::Identity,
        }
    }

    /// The `Content-Encoding` value, if any.
    pub(crate) fn header(self) -> Option<&'static str> {
        match self {
            Encoding::Identity => None,
            Encoding::Gzip => Some("gzip"),
        }
    }
}

/// The `q` parameter of an entry (1 without one; 0 if it is not a number).
fn quality<'a>(params: impl Iterator<Item = &'a str>) -> f32 {
    let mut q = 1.0;
    for param in params {
        let param = param.trim();
        // The parameter's name is case-insensitive (`Q=0` refuses too).
        if let Some(value) = param
            .strip_prefix("q=")
            .or_else(|| param.strip_prefix("Q="))
        {
            q = value
                .trim()
                .parse::<f32>()
                .ok()
                .filter(|q| q.is_finite())
                .unwrap_or(0.0);
        }
    }
    q
}

/// The `Accept-Encoding` lines of a request, joined as one list and negotiated.
pub(crate) fn of_request(headers: &hyper::HeaderMap) -> Encoding {
    let mut lines = headers.get_all(hyper::header::ACCEPT_ENCODING).iter();
    let Some(first) = lines.next() else {
        return Encoding::negotiate(None);
    };
    let mut joined = first.as_bytes().to_vec();
    for line in lines {
        joined.extend_from_slice(b", ");
        joined.extend_from_slice(line.as_bytes());
    }
    Encoding::negotiate(Some(&joined))
}

/// Compresses `plain` with gzip at `level` (0 to 9).
pub(crate) fn gzip(plain: &[u8], level: u32) -> io::Result<Vec<u8>> {
    let capacity = plain.len() / 8 + 64;
    let mut encoder = GzEncoder::new(Vec::with_capacity(capacity), Compression::new(level));
    encoder.write_all(plain)?;
    encoder.finish()
}

#[cfg(test)]
mod tests {
    use super::Encoding::{self, Gzip, Identity};

    #[test]
    fn accept_encoding_is_read_as_rfc_9110_says() {
        let cases: &[(&[u8], Encoding)] = &[
            (b"gzip", Gzip),
            (b"GZIP", Gzip),
            (b"identity, gzip;q=0.5", Gzip),
            (b"x-gzip", Gzip),
            (b"X-Gzip;q=1", Gzip),
            (b"*", Gzip),
            (b"br, *;q=0.1", Gzip),
            (b"br, deflate", Identity),
            (b"gzip;q=0", Identity),
            (b"gzip;Q=0", Identity),
            (b"gzip; q=0.000", Identity),
            (b"gzip;q=0, *", Identity),
            (b"*, gzip;q=0", Identity),
            (b"*;q=0", Identity),
            (b"gzip;q=banana", Identity),
            (b"gzipx", Identity),
            (b"", Identity),
            (b"\xff\xfe", Identity),
        ];
        for (value, expected) in cases {
            let got = Encoding::negotiate(Some(value));
            assert_eq!(got, *expected, "{:?}", String::from_utf8_lossy(value));
        }
        assert_eq!(Encoding::negotiate(None), Identity);
    }

    #[test]
    fn several_header_lines_are_one_list() {
        let mut headers = hyper::HeaderMap::new();
        headers.append("accept-encoding", "br".parse().unwrap());
        headers.append("accept-encoding", "gzip;q=0.2".parse().unwrap());
        assert_eq!(super::of_request(&headers), Gzip);
        headers.append("accept-encoding", "gzip;q=0".parse().unwrap());
        // The highest quality given for gzip counts.
        assert_eq!(super::of_request(&headers), Gzip);
        let mut refused = hyper::HeaderMap::new();
        refused.append("accept-encoding", "*".parse().unwrap());
        refused.append("accept-encoding", "gzip;q=0".parse().unwrap());
        assert_eq!(super::of_request(&refused), Identity);
    }
}
