//! The one rule for the names users give loopguard's objects (a pool, a shield, a gate...):
//! each becomes a metric label value, so it must be non-empty and free of NUL bytes. Every
//! constructor and builder that takes a name checks it here and refuses a bad one with the
//! same [`io::ErrorKind::InvalidInput`] error, naming the kind of thing.

use std::io;

/// `Ok` for a name loopguard can label series with; otherwise an
/// [`io::ErrorKind::InvalidInput`] error whose message starts with `kind`, as in "a shield
/// name must not be empty".
pub(crate) fn check(kind: &str, name: &str) -> io::Result<()> {
    if name.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{kind} name must not be empty"),
        ));
    }
    if name.contains('\0') {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{kind} name must not contain NUL bytes, got {name:?}"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::check;

    #[test]
    fn a_name_is_refused_when_empty_or_with_a_nul_byte() {
        assert!(check("a pool", "registry").is_ok());
        assert!(
            check("a pool", " ").is_ok(),
            "only empty and NUL are refused"
        );
        let empty = check("a shield", "").unwrap_err();
        assert_eq!(empty.kind(), std::io::ErrorKind::InvalidInput);
        assert_eq!(empty.to_string(), "a shield name must not be empty");
        let nul = check("a keyed gate", "a\0b").unwrap_err();
        assert_eq!(nul.kind(), std::io::ErrorKind::InvalidInput);
        assert_eq!(
            nul.to_string(),
            "a keyed gate name must not contain NUL bytes, got \"a\\0b\""
        );
    }
}
