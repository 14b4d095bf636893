//! Reading back the floats a report wrote as `null`: serde_json writes a
//! NaN or an infinite `f64` as `null`, which a plain `f64` field refuses.

use serde::{Deserialize, Deserializer};

/// An `f64` written as a number, or as `null` for a NaN or infinite
/// value (read back as NaN: not a finite figure either way, and written
/// again as `null`).
pub fn or_nan<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
}

/// As [`or_nan`], for a half-width that is infinite when there is no
/// interval (fewer than two samples): `null` reads back as infinity.
pub fn or_inf<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::INFINITY))
}

/// NaN: the default of a figure an older schema version did not write.
pub fn nan() -> f64 {
    f64::NAN
}
