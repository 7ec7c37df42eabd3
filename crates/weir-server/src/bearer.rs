//! `Authorization: Bearer <secret>` checks (the API token, the cluster secret on the cluster
//! routes and on a worker's Flight port), compared in constant time: how much of a guess
//! matched must not show in how long the answer took.

use subtle::ConstantTimeEq;

/// Whether `header` (an `Authorization` value, if any) is `Bearer <expected>`.
pub(crate) fn matches(header: Option<&str>, expected: &str) -> bool {
    let given = header.and_then(|v| v.strip_prefix("Bearer ")).unwrap_or_default();
    bool::from(given.as_bytes().ct_eq(expected.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_exact_bearer_value_matches() {
        assert!(matches(Some("Bearer s3cret"), "s3cret"));
        for wrong in [None, Some("s3cret"), Some("Bearer s3cre"), Some("Bearer s3cret "), Some("Basic s3cret")] {
            assert!(!matches(wrong, "s3cret"), "{wrong:?}");
        }
    }
}
