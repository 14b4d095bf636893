//! The results document of `tlslab experiment` (its types live in
//! `tlslab-schema` and are re-exported here), and the median its readers
//! take.

pub use tlslab_schema::study::*;

/// The median of `v` (NaN when empty): [`crate::interval::median`].
pub use crate::interval::median;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_even_and_empty() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(&[]).is_nan());
    }
}
