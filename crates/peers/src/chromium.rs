//! Headless Chromium, to render a page as a browser does.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::tool::find_tool;

/// Where Chromium is (`chromium` or `chromium-browser`).
pub fn find() -> Option<PathBuf> {
    find_tool("chromium").or_else(|| find_tool("chromium-browser"))
}

/// `browser` rendering `page` (a local file) headless, with its profile
/// in `profile` and no network of its own: stdout is the DOM after up to
/// 3 s of virtual time in a 900 × 1000 px window (the width the report
/// must fit without sideways scrolling), stderr its log (console messages
/// included).
pub fn dump_dom(browser: &Path, page: &Path, profile: &Path) -> Command {
    let mut cmd = Command::new(browser);
    cmd.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--enable-logging=stderr",
        "--v=0",
        "--virtual-time-budget=3000",
        "--window-size=900,1000",
    ])
    .arg(format!("--user-data-dir={}", profile.display()))
    .arg("--dump-dom")
    .arg(format!("file://{}", page.display()));
    cmd
}
