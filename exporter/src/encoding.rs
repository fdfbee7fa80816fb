//! `Accept-Encoding` negotiation and the compression done on the worker.

use std::io::{self, Write as _};

use flate2::Compression;
use flate2::write::GzEncoder;

/// The gzip level of a compressed scrape. Level 1 is chosen by measurement (`cargo run
/// --release --example walk_cost`, BENCHMARKS.md): on a 100 000-series rendering it
/// compresses 3.5x for an eighth of the render's own time; the default level 6 saves 6 %
/// more for more than the render's time, paid while a slot is held.
pub const GZIP_LEVEL: u32 = 1;

/// The zstd level of a compressed scrape: 1, zstd's fastest regular level, as
/// client_golang's promhttp uses its encoder's fastest (`SpeedFastest`). Measured beside
/// gzip in BENCHMARKS.md (`cargo run --release --example walk_cost`).
pub const ZSTD_LEVEL: i32 = 1;

/// How a scrape's body is encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Encoding {
    /// The exposition as it was rendered.
    Identity,
    /// gzip (`Content-Encoding: gzip`), compressed on the worker that rendered it.
    Gzip,
    /// zstd (`Content-Encoding: zstd`) at [`ZSTD_LEVEL`], compressed on the worker that
    /// rendered it. Offered only when the crate is built with its feature `zstd`;
    /// [`walk`](crate::walk) without it is an [`Unsupported`](io::ErrorKind::Unsupported)
    /// error.
    Zstd,
}

impl Encoding {
    /// What an `Accept-Encoding` value allows, read once (RFC 9110, section 12.5.3), as
    /// client_golang's promhttp negotiates it: the coding of the highest quality among
    /// gzip (`gzip` or `x-gzip`), zstd (with the feature `zstd`) and identity, each
    /// weighted by its own entry or, not listed, by `*`'s. When weights tie, gzip comes
    /// first, then zstd, then identity; an identity that is not listed (nor `*`) is only the
    /// fallback. `gzip;q=0` refuses gzip whatever `*` says. Nothing acceptable (`br`,
    /// `identity;q=0`, `*;q=0`): identity all the same, as promhttp falls back, rather than
    /// a `406`. An unreadable value (not UTF-8, a quality that is not a number) refuses
    /// what it names. Several header lines are one comma-separated list: join them with
    /// `, `.
    ///
    /// promhttp offers identity first, so that `*` or `identity, gzip` get identity there;
    /// here a tie compresses (a scraper that lists a coding beside identity can read it).
    ///
    /// # Examples
    ///
    /// ```
    /// use loopguard_exporter::Encoding;
    ///
    /// assert_eq!(Encoding::negotiate(Some(b"gzip")), Encoding::Gzip);
    /// assert_eq!(Encoding::negotiate(Some(b"x-gzip, br")), Encoding::Gzip);
    /// assert_eq!(Encoding::negotiate(Some(b"zstd, gzip")), Encoding::Gzip, "a tie");
    /// assert_eq!(Encoding::negotiate(Some(b"gzip;q=0, identity")), Encoding::Identity);
    /// assert_eq!(Encoding::negotiate(Some(b"identity, gzip;q=0.5")), Encoding::Identity);
    /// assert_eq!(Encoding::negotiate(None), Encoding::Identity);
    /// # #[cfg(feature = "zstd")]
    /// assert_eq!(Encoding::negotiate(Some(b"gzip;q=0.5, zstd")), Encoding::Zstd);
    /// ```
    pub fn negotiate(accept_encoding: Option<&[u8]>) -> Encoding {
        let Some(value) = accept_encoding.and_then(|v| std::str::from_utf8(v).ok()) else {
            return Encoding::Identity;
        };
        // The quality of each entry we know, and of `*`: the highest given.
        let [gzip, zstd, identity, any] = weights(value, |coding| {
            let is = |name: &str| coding.eq_ignore_ascii_case(name);
            if is("gzip") || is("x-gzip") {
                Some(0)
            } else if is("zstd") {
                Some(1)
            } else if is("identity") {
                Some(2)
            } else {
                (coding == "*").then_some(3)
            }
        });
        // In the order ties are broken: the first of the highest weight wins.
        let offered = [
            (Encoding::Gzip, gzip.or(any)),
            (
                Encoding::Zstd,
                zstd.or(any).filter(|_| cfg!(feature = "zstd")),
            ),
            (Encoding::Identity, identity.or(any)),
        ];
        let mut best = (Encoding::Identity, 0.0);
        for (encoding, q) in offered {
            if let Some(q) = q.filter(|&q| q > best.1) {
                best = (encoding, q);
            }
        }
        best.0
    }

    /// The `Content-Encoding` value, if any.
    pub(crate) fn header(self) -> Option<&'static str> {
        match self {
            Encoding::Identity => None,
            Encoding::Gzip => Some("gzip"),
            Encoding::Zstd => Some("zstd"),
        }
    }
}

/// The highest quality given to each of `N` names in a comma-separated list of entries
/// (`name;param;q=…`, as `Accept` and `Accept-Encoding` write them): `slot` says which
/// name an entry's (trimmed) name is, if any.
pub(crate) fn weights<const N: usize>(
    value: &str,
    slot: impl Fn(&str) -> Option<usize>,
) -> [Option<f32>; N] {
    let mut weights = [None::<f32>; N];
    for item in value.split(',') {
        let mut parts = item.split(';');
        let Some(i) = slot(parts.next().unwrap_or_default().trim()) else {
            continue;
        };
        let q = quality(parts);
        weights[i] = Some(weights[i].map_or(q, |seen| seen.max(q)));
    }
    weights
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

/// Compresses `plain` with zstd at [`ZSTD_LEVEL`] (feature `zstd`; without it, an
/// `Unsupported` error).
pub(crate) fn zstd(plain: &[u8]) -> io::Result<Vec<u8>> {
    #[cfg(feature = "zstd")]
    {
        // Streamed into a buffer sized as gzip's is: the one-shot API reserves the input's
        // worst-case bound, a whole rendering more, and keeps it.
        let capacity = plain.len() / 8 + 64;
        let mut encoder =
            zstd::stream::write::Encoder::new(Vec::with_capacity(capacity), ZSTD_LEVEL)?;
        encoder.write_all(plain)?;
        encoder.finish()
    }
    #[cfg(not(feature = "zstd"))]
    {
        let _ = plain;
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "zstd needs loopguard-exporter's feature `zstd`",
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::Encoding::{self, Gzip, Identity, Zstd};

    /// zstd where the feature offers it, `otherwise` where it does not.
    fn zstd_or(otherwise: Encoding) -> Encoding {
        if cfg!(feature = "zstd") {
            Zstd
        } else {
            otherwise
        }
    }

    #[test]
    fn accept_encoding_is_read_as_rfc_9110_and_promhttp_say() {
        let cases: &[(&[u8], Encoding)] = &[
            // One coding.
            (b"gzip", Gzip),
            (b"GZIP", Gzip),
            (b"x-gzip", Gzip),
            (b"X-Gzip;q=1", Gzip),
            (b"zstd", zstd_or(Identity)),
            (b"ZSTD;q=0.3", zstd_or(Identity)),
            (b"identity", Identity),
            // Ties: gzip first, then zstd, then identity.
            (b"gzip, zstd", Gzip),
            (b"zstd, gzip", Gzip),
            (b"zstd;q=0.5, gzip;q=0.5", Gzip),
            (b"identity, zstd", zstd_or(Identity)),
            (b"identity, gzip", Gzip),
            (b"*", Gzip),
            (b"br, *;q=0.1", Gzip),
            // The highest weight wins.
            (b"gzip;q=0.5, zstd", zstd_or(Gzip)),
            (b"zstd;q=0.9, gzip;q=0.8", zstd_or(Gzip)),
            (b"identity, gzip;q=0.5", Identity),
            (b"identity;q=0.4, gzip;q=0.5", Gzip),
            (b"*;q=0.5, gzip;q=0.1", zstd_or(Identity)),
            (b"*;q=0.5, gzip;q=0.1, zstd;q=0.1", Identity),
            // q=0 refuses what it names, whatever `*` says.
            (b"gzip;q=0", Identity),
            (b"gzip;Q=0", Identity),
            (b"gzip; q=0.000", Identity),
            (b"gzip;q=0, *", zstd_or(Identity)),
            (b"*, gzip;q=0", zstd_or(Identity)),
            (b"*, gzip;q=0, zstd;q=0", Identity),
            (b"zstd;q=0, gzip", Gzip),
            (b"zstd;q=0, *", Gzip),
            (b"zstd;q=0", Identity),
            (b"*;q=0", Identity),
            (b"*;q=0, zstd", zstd_or(Identity)),
            // identity;q=0 with nothing else acceptable: identity all the same (promhttp's
            // fallback), never a refusal of the scrape.
            (b"identity;q=0", Identity),
            (b"identity;q=0, gzip", Gzip),
            (b"identity;q=0, zstd;q=0.2", zstd_or(Identity)),
            // Unknown codings and garbage refuse nothing but themselves.
            (b"br, deflate", Identity),
            (b"br, zstd", zstd_or(Identity)),
            (b"gzip;q=banana", Identity),
            (b"zstd;q=banana, gzip;q=0.1", Gzip),
            (b"gzipx", Identity),
            (b"zstdx, x-zstd", Identity),
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
        headers.append("accept-encoding", "zstd;q=0.3".parse().unwrap());
        assert_eq!(super::of_request(&headers), zstd_or(Gzip));
        let mut refused = hyper::HeaderMap::new();
        refused.append("accept-encoding", "*".parse().unwrap());
        refused.append("accept-encoding", "gzip;q=0".parse().unwrap());
        refused.append("accept-encoding", "zstd;q=0".parse().unwrap());
        assert_eq!(super::of_request(&refused), Identity);
    }

    #[test]
    fn zstd_compresses_with_the_feature_and_is_unsupported_without() {
        let plain: Vec<u8> = (0..100_000).map(|i| b"abcdefgh\n"[i % 9]).collect();
        match super::zstd(&plain) {
            #[cfg(feature = "zstd")]
            Ok(packed) => {
                assert!(packed.len() < plain.len() / 10, "{} bytes", packed.len());
                assert_eq!(&packed[..4], &[0x28, 0xb5, 0x2f, 0xfd], "a zstd frame");
            }
            #[cfg(not(feature = "zstd"))]
            Err(err) => assert_eq!(err.kind(), std::io::ErrorKind::Unsupported),
            #[allow(unreachable_patterns)]
            other => panic!("{other:?}"),
        }
    }
}
