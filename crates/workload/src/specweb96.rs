//! The SPECweb96 file set, as seed 000 describes it: four classes of nine
//! files each. Class 0 holds 0.1–0.9 KB files, class 1 1–9 KB, class 2
//! 10–90 KB and class 3 100–900 KB (1 KB = 1024 bytes, as in SPECweb96).
//! Requests fall 35/50/14/1 % on the classes.

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
}
