//! The answer to a request that gets no slot: `503 Service Unavailable` with `Retry-After`
//! in whole seconds and an empty body.
//!
//! # Allocations
//!
//! The status, the empty body and, for hints under 100 s, the header value are built
//! without allocating (the value is a slice of a static string). Inserting the one header
//! into the response's `HeaderMap` allocates its two tables: two allocations per refusal,
//! the least an `http::Response` with a header can cost.

use std::time::Duration;

use http::header::{HeaderValue, RETRY_AFTER};
use http::{Response, StatusCode};

use super::body::AdmissionBody;
use crate::gate::limit::whole_secs;

/// "0", "1", ... "99" as two digits each, sliced without allocating.
const TWO_DIGITS: &str = "00010203040506070809\
                          10111213141516171819\
                          20212223242526272829\
                          30313233343536373839\
                          40414243444546474849\
                          50515253545556575859\
                          60616263646566676869\
                          70717273747576777879\
                          80818283848586878889\
                          90919293949596979899";

/// `secs` as a header value, without allocating below 100.
fn header_value(secs: u64) -> HeaderValue {
    match usize::try_from(secs) {
        Ok(n) if n < 100 => {
            let digits = &TWO_DIGITS[2 * n..2 * n + 2];
            HeaderValue::from_static(digits.strip_prefix('0').unwrap_or(digits))
        }
        _ => HeaderValue::from(secs),
    }
}

/// A 503 telling the client to come back after `hint`.
pub(crate) fn refusal<B>(hint: Duration) -> Response<AdmissionBody<B>> {
    let mut response = Response::new(AdmissionBody::empty());
    *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
    response
        .headers_mut()
        .insert(RETRY_AFTER, header_value(whole_secs(hint)));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_values_are_plain_numbers() {
        for n in [1u64, 7, 9, 10, 42, 99, 100, 3600, u64::MAX] {
            assert_eq!(header_value(n).to_str().unwrap(), n.to_string());
        }
    }
}
