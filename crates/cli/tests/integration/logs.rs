//! Log lines carry colour codes only on a terminal, unless `--log-color`
//! says otherwise.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::fresh_dir;

/// Start `berth serve` with stderr on a pipe and return its stderr up to and
/// including the "berth serving" line.
fn first_log_lines(tag: &str, extra: &[&str]) -> String {
    let dir = fresh_dir(tag);
    let mut child = Command::new(env!("CARGO_BIN_EXE_berth"))
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(&dir)
        .args(["--log", "info"])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn berth");
    let stderr = child.stderr.take().expect("stderr");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut seen = String::new();
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            seen.push_str(&line);
            seen.push('\n');
            if line.contains("berth serving") {
                break;
            }
        }
        let _ = tx.send(seen);
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    let seen = rx.recv_timeout(deadline - Instant::now()).expect("berth logged its start within 30 s");
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(seen.contains("berth serving"), "no start line in {seen:?}");
    seen
}

#[test]
fn colour_only_on_a_terminal_or_when_asked() {
    let piped = first_log_lines("log-auto", &[]);
    assert!(!piped.contains('\x1b'), "escape codes written to a pipe: {piped:?}");
    let never = first_log_lines("log-never", &["--log-color", "never"]);
    assert!(!never.contains('\x1b'), "escape codes with --log-color never: {never:?}");
    let always = first_log_lines("log-always", &["--log-color", "always"]);
    assert!(always.contains("\x1b["), "no escape codes with --log-color always: {always:?}");
    let json = first_log_lines("log-json", &["--log-color", "always", "--log-format", "json"]);
    assert!(!json.contains('\x1b'), "escape codes in JSON lines: {json:?}");
}
