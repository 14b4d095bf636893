//! Think time: how long a simulated user waits between pages.
//!
//! Parsed from `--think-time` strings (durations in humantime syntax:
//! `500ms`, `2s`, `1m 30s`):
//!
//! | spec | distribution | mean |
//! | --- | --- | --- |
//! | `0` or `none` | no wait | 0 |
//! | `const:2s` | always 2 s | 2 s |
//! | `exp:mean=7s` | exponential | 7 s |
//! | `uniform:1s..5s` | uniform on [1 s, 5 s] | 3 s |
//! | `pareto:min=1s,shape=1.5` | Pareto (heavy tail) with scale `min` | shape·min/(shape−1) if shape > 1 |
//!
//! `exp:mean=7s` is the TPC-W/RUBiS convention the client emulators of
//! seed 002 follow. Every sample is capped at [`MAX_SAMPLE`] (one hour) so a
//! heavy tail cannot stall a bounded run; the cap changes the mean of the
//! listed distributions by less than 10^-9 except for Pareto with shape ≤ 1,
//! whose mean is infinite without it.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use rand::RngExt as _;
use rand_distr::Distribution as _;

use crate::Error;

/// The largest think time ever returned: one hour.
pub const MAX_SAMPLE: Duration = Duration::from_secs(3600);

/// A think-time distribution; see the [module docs](self) for the syntax.
#[derive(Clone, Copy, Debug, PartialEq, Default)]
#[non_exhaustive]
pub enum ThinkTime {
    /// No wait.
    #[default]
    Zero,
    /// Always the same wait.
    Const(Duration),
    /// Exponential with this mean.
    Exp {
        /// The mean.
        mean: Duration,
    },
    /// Uniform on `[lo, hi]`.
    Uniform {
        /// The shortest wait.
        lo: Duration,
        /// The longest wait.
        hi: Duration,
    },
    /// Pareto with scale `min` (the shortest wait) and tail index `shape`.
    Pareto {
        /// The shortest wait (the scale).
        min: Duration,
        /// The tail index; the mean is finite only above 1.
        shape: f64,
    },
}

impl ThinkTime {
    /// Draws one think time.
    pub fn sample<R: rand::Rng + ?Sized>(&self, rng: &mut R) -> Duration {
        let secs = match *self {
            ThinkTime::Zero => return Duration::ZERO,
            ThinkTime::Const(d) => return d.min(MAX_SAMPLE),
            ThinkTime::Exp { mean } => {
                if mean.is_zero() {
                    return Duration::ZERO;
                }
                let e: f64 = rand_distr::Exp1.sample(rng);
                e * mean.as_secs_f64()
            }
            ThinkTime::Uniform { lo, hi } => {
                let (lo, hi) = (lo.as_nanos() as u64, hi.as_nanos() as u64);
                return Duration::from_nanos(rng.random_range(lo..=hi)).min(MAX_SAMPLE);
            }
            ThinkTime::Pareto { min, shape } => {
                match rand_distr::Pareto::new(min.as_secs_f64(), shape) {
                    Ok(p) => p.sample(rng),
                    // Validated at construction; a zero scale means no wait.
                    Err(_) => 0.0,
                }
            }
        };
        Duration::try_from_secs_f64(secs)
            .unwrap_or(MAX_SAMPLE)
            .min(MAX_SAMPLE)
    }

    /// The mean of the distribution before the [`MAX_SAMPLE`] cap, or `None`
    /// when it is infinite (Pareto with shape ≤ 1).
    pub fn mean(&self) -> Option<Duration> {
        match *self {
            ThinkTime::Zero => Some(Duration::ZERO),
            ThinkTime::Const(d) => Some(d),
            ThinkTime::Exp { mean } => Some(mean),
            ThinkTime::Uniform { lo, hi } => Some((lo + hi) / 2),
            ThinkTime::Pareto { min, shape } => {
                (shape > 1.0).then(|| min.mul_f64(shape / (shape - 1.0)))
            }
        }
    }
}

fn duration(spec: &str, what: &str, s: &str) -> Result<Duration, Error> {
    humantime::parse_duration(s.trim()).map_err(|e| {
        Error::Invalid(format!(
            "think time '{spec}': {what} '{s}' is not a duration ({e}); write it like 500ms, 7s or 1m 30s"
        ))
    })
}

fn key_values<'a>(spec: &str, body: &'a str, keys: &[&str]) -> Result<Vec<&'a str>, Error> {
    let mut out = vec![None; keys.len()];
    for part in body.split(',') {
        let (k, v) = part.split_once('=').ok_or_else(|| {
            Error::Invalid(format!(
                "think time '{spec}': '{part}' is not key=value; expected {}",
                keys.iter()
                    .map(|k| format!("{k}=…"))
                    .collect::<Vec<_>>()
                    .join(",")
            ))
        })?;
        let i = keys.iter().position(|x| *x == k.trim()).ok_or_else(|| {
            Error::Invalid(format!(
                "think time '{spec}': unknown key '{}'; use {}",
                k.trim(),
                keys.join(", ")
            ))
        })?;
        out[i] = Some(v.trim());
    }
    out.into_iter()
        .zip(keys)
        .map(|(v, k)| {
            v.ok_or_else(|| Error::Invalid(format!("think time '{spec}': missing {k}=…")))
        })
        .collect()
}

impl FromStr for ThinkTime {
    type Err = Error;

    fn from_str(spec: &str) -> Result<ThinkTime, Error> {
        let s = spec.trim();
        if s == "0" || s == "none" {
            return Ok(ThinkTime::Zero);
        }
        let (kind, body) = s.split_once(':').ok_or_else(|| {
            Error::Invalid(format!(
                "think time '{spec}' has no kind; use 0, const:2s, exp:mean=7s, uniform:1s..5s or pareto:min=1s,shape=1.5"
            ))
        })?;
        match kind.trim() {
            "const" => Ok(ThinkTime::Const(duration(spec, "value", body)?)),
            "exp" => {
                let v = key_values(spec, body, &["mean"])?;
                Ok(ThinkTime::Exp {
                    mean: duration(spec, "mean", v[0])?,
                })
            }
            "uniform" => {
                let (lo, hi) = body.split_once("..").ok_or_else(|| {
                    Error::Invalid(format!("think time '{spec}': write the range as uniform:LO..HI, e.g. uniform:1s..5s"))
                })?;
                let (lo, hi) = (
                    duration(spec, "low end", lo)?,
                    duration(spec, "high end", hi)?,
                );
                if lo > hi {
                    return Err(Error::Invalid(format!(
                        "think time '{spec}': the low end is above the high end; swap them"
                    )));
                }
                Ok(ThinkTime::Uniform { lo, hi })
            }
            "pareto" => {
                let v = key_values(spec, body, &["min", "shape"])?;
                let min = duration(spec, "min", v[0])?;
                let shape: f64 = v[1].parse().map_err(|_| {
                    Error::Invalid(format!(
                        "think time '{spec}': shape '{}' is not a number; use e.g. shape=1.5",
                        v[1]
                    ))
                })?;
                if !(shape.is_finite() && shape > 0.0) || min.is_zero() {
                    return Err(Error::Invalid(format!(
                        "think time '{spec}': Pareto needs min > 0 and a finite shape > 0; use e.g. pareto:min=1s,shape=1.5"
                    )));
                }
                Ok(ThinkTime::Pareto { min, shape })
            }
            other => Err(Error::Invalid(format!(
                "think time '{spec}': unknown kind '{other}'; use const, exp, uniform or pareto"
            ))),
        }
    }
}

impl fmt::Display for ThinkTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let h = humantime::format_duration;
        match *self {
            ThinkTime::Zero => write!(f, "0"),
            ThinkTime::Const(d) => write!(f, "const:{}", h(d)),
            ThinkTime::Exp { mean } => write!(f, "exp:mean={}", h(mean)),
            ThinkTime::Uniform { lo, hi } => write!(f, "uniform:{}..{}", h(lo), h(hi)),
            ThinkTime::Pareto { min, shape } => write!(f, "pareto:min={},shape={shape}", h(min)),
        }
    }
}

impl serde::Serialize for ThinkTime {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for ThinkTime {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<ThinkTime, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn t(s: &str) -> ThinkTime {
        s.parse().unwrap()
    }

    #[test]
    fn parses_the_documented_forms() {
        assert_eq!(t("0"), ThinkTime::Zero);
        assert_eq!(t("const:2s"), ThinkTime::Const(Duration::from_secs(2)));
        assert_eq!(
            t("exp:mean=7s"),
            ThinkTime::Exp {
                mean: Duration::from_secs(7)
            }
        );
        assert_eq!(
            t("uniform:1s..5s"),
            ThinkTime::Uniform {
                lo: Duration::from_secs(1),
                hi: Duration::from_secs(5)
            }
        );
        assert_eq!(
            t("pareto:min=1s,shape=1.5"),
            ThinkTime::Pareto {
                min: Duration::from_secs(1),
                shape: 1.5
            }
        );
        for bad in [
            "",
            "7",
            "exp",
            "exp:7s",
            "exp:mean=seven",
            "uniform:5s..1s",
            "uniform:1s-5s",
            "pareto:min=1s",
            "pareto:min=0s,shape=2",
            "pareto:min=1s,shape=-1",
            "gauss:mean=1s",
        ] {
            let e = bad.parse::<ThinkTime>().unwrap_err().to_string();
            assert!(e.contains("think time"), "{bad}: {e}");
        }
    }

    fn mean_of(tt: ThinkTime, seed: u64, n: u32) -> f64 {
        let mut rng = crate::rng(seed, 9);
        (0..n)
            .map(|_| tt.sample(&mut rng).as_secs_f64())
            .sum::<f64>()
            / f64::from(n)
    }

    #[test]
    fn zero_and_const_are_exact() {
        assert_eq!(mean_of(t("0"), 1, 100), 0.0);
        assert_eq!(mean_of(t("const:250ms"), 1, 100), 0.25);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(8))]

        /// Sample means of 50k draws sit within 6 standard errors of the
        /// distribution mean (exp: sd = mean; uniform: sd = (hi-lo)/√12;
        /// Pareto shape 4: sd = min·√(4/(3²·2)) ≈ 0.471·min).
        #[test]
        fn sample_means_match(seed in any::<u64>(), mean_ms in 1u64..20_000) {
            let n = 50_000u32;
            let se = |sd: f64| 6.0 * sd / f64::from(n).sqrt();
            let m = mean_ms as f64 / 1000.0;
            let exp = ThinkTime::Exp { mean: Duration::from_millis(mean_ms) };
            prop_assert!((mean_of(exp, seed, n) - m).abs() < se(m));
            let uni = ThinkTime::Uniform { lo: Duration::ZERO, hi: Duration::from_millis(2 * mean_ms) };
            prop_assert!((mean_of(uni, seed, n) - m).abs() < se(2.0 * m / 12f64.sqrt()));
            let par = ThinkTime::Pareto { min: Duration::from_millis(mean_ms), shape: 4.0 };
            let pm = par.mean().unwrap().as_secs_f64();
            prop_assert!((pm - m * 4.0 / 3.0).abs() < 1e-6);
            prop_assert!((mean_of(par, seed, n) - pm).abs() < se(0.4714 * m));
        }

        /// The exponential's median is mean·ln 2: checks the shape, not
        /// just the mean.
        #[test]
        fn exp_median_matches(seed in any::<u64>()) {
            let tt = ThinkTime::Exp { mean: Duration::from_secs(7) };
            let mut rng = crate::rng(seed, 3);
            let n = 20_000;
            let below = (0..n).filter(|_| tt.sample(&mut rng).as_secs_f64() < 7.0 * std::f64::consts::LN_2).count();
            // Binomial(20000, 1/2): sd ≈ 70.7; allow 6 sd.
            prop_assert!((below as f64 - 10_000.0).abs() < 425.0, "{}", below);
        }

        #[test]
        fn display_round_trips(ms in 0u64..10_000_000, shape in 0.1f64..10.0) {
            let d = Duration::from_millis(ms);
            for tt in [ThinkTime::Zero, ThinkTime::Const(d), ThinkTime::Exp { mean: d },
                       ThinkTime::Uniform { lo: d, hi: d * 2 }] {
                prop_assert_eq!(tt.to_string().parse::<ThinkTime>().unwrap(), tt);
            }
            if ms > 0 {
                let p = ThinkTime::Pareto { min: d, shape };
                prop_assert_eq!(p.to_string().parse::<ThinkTime>().unwrap(), p);
            }
        }
    }
}
