//! The `--json` reports the binary writes, read back: the file parsed, a
//! number at a path, the error counts.

use std::collections::BTreeMap;
use std::path::Path;

/// Loads a JSON file (a `--json` report).
pub fn load_json(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read JSON report {}: {e}", path.display()));
    serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("{} is not JSON ({e}):\n{text}", path.display()))
}

/// The number at a `/`-separated path in a JSON value (`"reuse/achieved"`),
/// failing the test with the whole report if it is absent.
pub fn num(v: &serde_json::Value, path: &str) -> f64 {
    let ptr = format!("/{path}");
    v.pointer(&ptr)
        .and_then(serde_json::Value::as_f64)
        .unwrap_or_else(|| panic!("report has no number at {path}:\n{v:#}"))
}

/// Asserts [`num`] at each `(path, value)` of `want`, naming the path and
/// showing the whole report on a mismatch.
pub fn assert_nums(v: &serde_json::Value, want: &[(&str, f64)]) {
    for &(path, value) in want {
        assert_eq!(num(v, path), value, "{path}: {v:#}");
    }
}

/// The `errors` object of a load report as kind → count.
pub fn errors(v: &serde_json::Value) -> BTreeMap<String, u64> {
    let e = v
        .get("errors")
        .unwrap_or_else(|| panic!("report has no `errors`:\n{v:#}"));
    let obj = e
        .as_object()
        .unwrap_or_else(|| panic!("report `errors` is not an object:\n{v:#}"));
    obj.iter()
        .map(|(k, n)| {
            let n = n
                .as_u64()
                .unwrap_or_else(|| panic!("errors.{k} is not a count: {n}"));
            (k.clone(), n)
        })
        .collect()
}
