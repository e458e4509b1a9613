//! The binary's log, scrubbed of secrets.
//!
//! The binary's tracing subscriber writes each log line through
//! [`ScrubbedStderr`], which passes it through
//! [`scrub_log`](leasehold::secret::scrub_log): every URL redacted, every
//! secret the process knows hidden — the configuration's (registered by
//! [`hide_configured_secrets`] when a command loads it) and those of each
//! tool server a client is built for. A library's own log line (rmcp's,
//! reqwest's) is scrubbed like leasehold's.

use std::io::Write;

use tracing_subscriber::fmt::MakeWriter;

use leasehold::config::Config;
use leasehold::secret::{Secrets, hide_in_logs, scrub_log};

/// Standard error, each log line scrubbed before it is written.
#[derive(Clone, Copy, Debug, Default)]
pub struct ScrubbedStderr;

impl<'a> MakeWriter<'a> for ScrubbedStderr {
    type Writer = ScrubbedLine;

    fn make_writer(&'a self) -> Self::Writer {
        ScrubbedLine(Vec::new())
    }
}

/// One log line, held until it is complete (the subscriber drops its
/// writer after each event), then scrubbed and written at once.
#[derive(Debug)]
pub struct ScrubbedLine(Vec<u8>);

impl Write for ScrubbedLine {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for ScrubbedLine {
    fn drop(&mut self) {
        if self.0.is_empty() {
            return;
        }
        let line = scrub_log(&String::from_utf8_lossy(&self.0));
        let _ = std::io::stderr().lock().write_all(line.as_bytes());
    }
}

/// Remembers, for the log, the secrets `config` holds: its tool servers',
/// the model endpoints' URLs and keys, the store's URL, the API token.
pub(crate) fn hide_configured_secrets(config: &Config) {
    for server in &config.tools {
        hide_in_logs(&Secrets::of_server(server));
    }
    let urls = [
        &config.model_base_url.value,
        &config.fast_model_base_url.value,
        &config.store_url.value,
    ];
    for url in urls.into_iter().flatten() {
        hide_in_logs(&Secrets::of_url(url));
    }
    let mut keys = Secrets::new();
    keys.extend(
        [
            &config.model_api_key.value,
            &config.fast_model_api_key.value,
            &config.api_token.value,
        ]
        .into_iter()
        .flatten()
        .cloned(),
    );
    hide_in_logs(&keys);
}
