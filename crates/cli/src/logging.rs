//! Log set-up shared by `serve` and `agent`.

use std::io::IsTerminal;

/// When log lines carry colour escape codes (`--log-color`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum LogColor {
    /// Only when stderr is a terminal.
    #[default]
    Auto,
    /// Always (e.g. piped into a pager that renders them).
    Always,
    /// Never.
    Never,
}

impl LogColor {
    /// Should lines written to stderr carry colour codes?
    pub(crate) fn enabled(self) -> bool {
        match self {
            LogColor::Auto => std::io::stderr().is_terminal(),
            LogColor::Always => true,
            LogColor::Never => false,
        }
    }
}

/// Install the global subscriber: `filter` in env-filter syntax, key=value
/// text or one JSON object per line, on stderr. JSON never carries colour.
pub(crate) fn init(filter: &str, json: bool, color: LogColor) {
    let subscriber = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
        .with_target(false)
        .with_writer(std::io::stderr);
    if json {
        subscriber.json().flatten_event(true).with_ansi(false).init();
    } else {
        subscriber.with_ansi(color.enabled()).init();
    }
}
