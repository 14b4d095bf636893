//! The SPECweb96 file set, as seed 000 describes it: four classes of nine
//! files each. Class 0 holds 0.1–0.9 KB files, class 1 1–9 KB, class 2
//! 10–90 KB and class 3 100–900 KB (1 KB = 1024 bytes, as in SPECweb96).
//! Requests fall 35/50/14/1 % on the classes.
//!
//! [`Sampler`] draws a seeded request stream from the set: the class by
//! [`CLASS_PERCENT`], the file inside the class from a Poisson distribution
//! centred on the class midpoint ([`POISSON_LAMBDA`], [`index_pmf`]).

/// The number of size classes.
pub const CLASSES: usize = 4;
/// Files in each class.
pub const FILES_PER_CLASS: usize = 9;
/// The share of requests that falls on each class, in percent.
pub const CLASS_PERCENT: [u32; CLASSES] = [35, 50, 14, 1];
/// The URL prefix under which `tlslab serve --fileset specweb96` serves the
/// set and `tlslab fileset` lays it out.
pub const PREFIX: &str = "/specweb96";

/// One file of the set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct File {
    /// Size class, 0–3.
    pub class: usize,
    /// Index within the class, 0–8 (size grows with the index).
    pub index: usize,
    /// Size in bytes.
    pub size: usize,
    /// URL path, such as `/specweb96/class1_3`.
    pub path: String,
}

/// The size of file `index` (0–8) of `class` (0–3): `(index + 1) × 1024 ×
/// 10^class / 10` bytes, so class 0 runs 102…921 bytes and class 3
/// 102,400…921,600 bytes.
pub fn size(class: usize, index: usize) -> usize {
    (index + 1) * 1024 * 10usize.pow(class as u32) / 10
}

/// All 36 files, class by class, smallest first.
pub fn files() -> Vec<File> {
    let mut out = Vec::with_capacity(CLASSES * FILES_PER_CLASS);
    for class in 0..CLASSES {
        for index in 0..FILES_PER_CLASS {
            out.push(File {
                class,
                index,
                size: size(class, index),
                path: format!("{PREFIX}/class{class}_{index}"),
            });
        }
    }
    out
}

/// The bytes of a file of the set.
pub fn contents(file: &File) -> Vec<u8> {
    crate::file_bytes(&file.path, file.size)
}

/// The Poisson mean of the within-class popularity: 4.0, the index of the
/// class midpoint (files 0–8, midpoint 4).
///
/// Seed 000 says accesses inside a class are "allocated using a Poisson
/// distribution centered around the midpoint within the class". A Poisson
/// distribution with λ = 4 has its mean at 4 and its modes at 3 and 4, so
/// the middle files are the popular ones ("index.html") and the ends are
/// rare ("mydog.gif"). Draws above 8 (about 2.1 % of them) are redrawn, so
/// the index follows Poisson(4) truncated to 0–8: see [`index_pmf`].
pub const POISSON_LAMBDA: f64 = 4.0;

/// The probability of each within-class index 0–8 under the truncated
/// Poisson([`POISSON_LAMBDA`]) the [`Sampler`] draws from.
pub fn index_pmf() -> [f64; FILES_PER_CLASS] {
    let mut pmf = [0.0; FILES_PER_CLASS];
    let mut p = (-POISSON_LAMBDA).exp();
    for (k, slot) in pmf.iter_mut().enumerate() {
        if k > 0 {
            p *= POISSON_LAMBDA / k as f64;
        }
        *slot = p;
    }
    let total: f64 = pmf.iter().sum();
    pmf.iter_mut().for_each(|p| *p /= total);
    pmf
}

/// A seeded stream of SPECweb96 requests: the class is drawn 35/50/14/1 %
/// ([`CLASS_PERCENT`]) and the file inside the class from Poisson(λ = 4)
/// truncated to 0–8 ([`POISSON_LAMBDA`]). The same seed gives the same
/// stream.
#[derive(Clone, Debug)]
pub struct Sampler {
    files: Vec<File>,
    rng: crate::Rng,
    classes: rand::distr::weighted::WeightedIndex<u32>,
    poisson: rand_distr::Poisson<f64>,
}

impl Sampler {
    /// A sampler whose stream is fixed by `seed`.
    pub fn new(seed: u64) -> Sampler {
        Sampler::with_rng(crate::rng(seed, 0))
    }

    /// A sampler drawing from `rng` (for engines that give each client its
    /// own stream, e.g. `crate::rng(seed, client)`).
    pub fn with_rng(rng: crate::Rng) -> Sampler {
        Sampler {
            files: files(),
            rng,
            // Constant, non-zero weights and a positive finite λ: these
            // constructors cannot fail.
            classes: rand::distr::weighted::WeightedIndex::new(CLASS_PERCENT)
                .expect("constant class weights are valid"),
            poisson: rand_distr::Poisson::new(POISSON_LAMBDA).expect("constant lambda is valid"),
        }
    }

    /// The next file to request.
    #[allow(clippy::should_implement_trait)] // lends from self: cannot be an Iterator
    pub fn next(&mut self) -> &File {
        use rand::RngExt as _;
        let class = self.rng.sample(&self.classes);
        let index = loop {
            let k: f64 = self.rng.sample(self.poisson);
            if k < FILES_PER_CLASS as f64 {
                break k as usize;
            }
        };
        &self.files[class * FILES_PER_CLASS + index]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thirty_six_files_in_four_classes() {
        let f = files();
        assert_eq!(f.len(), 36);
        assert_eq!(f[0].size, 102);
        assert_eq!(f[8].size, 921);
        assert_eq!(f[9].size, 1024);
        assert_eq!(f[35].size, 921_600);
        for class in 0..CLASSES {
            let sizes: Vec<_> = f
                .iter()
                .filter(|x| x.class == class)
                .map(|x| x.size)
                .collect();
            let lo = 1024 * 10usize.pow(class as u32) / 10;
            assert!(
                sizes.iter().all(|&s| s >= lo && s < lo * 10),
                "{class}: {sizes:?}"
            );
        }
        assert_eq!(CLASS_PERCENT.iter().sum::<u32>(), 100);
    }

    #[test]
    fn same_seed_same_stream_other_seed_other_stream() {
        let take = |seed| {
            let mut s = Sampler::new(seed);
            (0..200).map(|_| s.next().path.clone()).collect::<Vec<_>>()
        };
        assert_eq!(take(1), take(1));
        assert_ne!(take(1), take(2));
    }

    #[test]
    fn index_pmf_is_truncated_poisson_4() {
        let pmf = index_pmf();
        assert!((pmf.iter().sum::<f64>() - 1.0).abs() < 1e-12);
        // Poisson(4): P(3) = P(4) are the modes; P(0) = e^-4 / P(X <= 8).
        assert!((pmf[3] - pmf[4]).abs() < 1e-12);
        assert!(pmf[4] > pmf[5] && pmf[2] < pmf[3]);
        let cdf8 = 0.978_636_5; // P(Poisson(4) <= 8)
        assert!((pmf[0] - (-4f64).exp() / cdf8).abs() < 1e-6);
    }

    /// Pearson's chi-square statistic of `counts` against `pmf`.
    fn chi_square(counts: &[u64], pmf: &[f64]) -> f64 {
        let n: u64 = counts.iter().sum();
        counts
            .iter()
            .zip(pmf)
            .map(|(&c, &p)| {
                let e = p * n as f64;
                (c as f64 - e).powi(2) / e
            })
            .sum()
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(4))]

        /// 100k draws: class shares match 35/50/14/1 and, in every class,
        /// the index histogram matches the truncated Poisson pmf: Pearson's
        /// chi-square stays below its 10^-6 critical value (30.66 for 3
        /// degrees of freedom, 42.70 for 8), so a correct sampler fails
        /// about once in a million runs while a wrong shape (uniform, or
        /// λ off by one) scores in the thousands.
        #[test]
        fn sampler_matches_its_distributions(seed in proptest::prelude::any::<u64>()) {
            let mut s = Sampler::new(seed);
            let mut class = [0u64; CLASSES];
            let mut index = [[0u64; FILES_PER_CLASS]; CLASSES];
            for _ in 0..100_000 {
                let f = s.next();
                class[f.class] += 1;
                index[f.class][f.index] += 1;
                proptest::prop_assert_eq!(f.size, size(f.class, f.index));
            }
            let class_pmf: Vec<f64> = CLASS_PERCENT.iter().map(|&p| f64::from(p) / 100.0).collect();
            let x2 = chi_square(&class, &class_pmf);
            proptest::prop_assert!(x2 < 30.66, "class counts {:?}, chi2 {}", class, x2);
            let pmf = index_pmf();
            // Class 3 gets ~1000 draws: too few for expected counts >= 5 in
            // every cell, so pool its tails into the neighbours' test below.
            for (c, counts) in index.iter().enumerate().take(3) {
                let x2 = chi_square(counts, &pmf);
                proptest::prop_assert!(x2 < 42.70, "class {} counts {:?}, chi2 {}", c, counts, x2);
            }
            // Pooled over all classes the index is the same distribution.
            let mut all = [0u64; FILES_PER_CLASS];
            for counts in &index {
                for (a, c) in all.iter_mut().zip(counts) {
                    *a += c;
                }
            }
            let x2 = chi_square(&all, &pmf);
            proptest::prop_assert!(x2 < 42.70, "pooled {:?}, chi2 {}", all, x2);
        }
    }
}
