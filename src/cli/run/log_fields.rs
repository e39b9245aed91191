//! The text log's fields with control characters escaped. Names and ids reach the log from the
//! runtime (`pod = %name`); tracing-subscriber escapes ESC in them but writes `\r` and `\n` as
//! they are, so a container named `x\rINFO ...` would rewrite its line in a terminal and forge
//! a line in a file. Every field of every event and span goes through
//! [`align_core::untrusted::printable`] on its way out. The JSON format escapes them already.

use std::fmt;

use tracing_subscriber::field::RecordFields;
use tracing_subscriber::fmt::format::{DefaultFields, Writer};
use tracing_subscriber::fmt::FormatFields;

use crate::untrusted::printable;

/// tracing-subscriber's own field format ([`DefaultFields`]), escaped.
#[derive(Default)]
pub struct PrintableFields(DefaultFields);

impl<'w> FormatFields<'w> for PrintableFields {
    fn format_fields<R: RecordFields>(&self, mut writer: Writer<'w>, fields: R) -> fmt::Result {
        let mut raw = String::new();
        self.0.format_fields(Writer::new(&mut raw), fields)?;
        writer.write_str(&printable(&raw))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::enforce::testing::LogLines as Lines;

    #[test]
    fn names_with_terminal_escapes_are_logged_escaped() {
        let lines = Lines::default();
        let writer = lines.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .fmt_fields(PrintableFields::default())
            .finish();
        let (pod, name) = ("ns/\x1b[31mred", "fake\rINFO forged\nline");
        tracing::subscriber::with_default(subscriber, || {
            let span = tracing::info_span!("event", container = %name);
            let _in = span.enter();
            tracing::info!(pod = %pod, id = ?name, "container {name} admitted");
        });
        let text = lines.text();
        assert_eq!(text.lines().count(), 1, "{text:?}");
        let raw: Vec<char> = text
            .trim_end_matches('\n')
            .chars()
            .filter(|c| c.is_control())
            .collect();
        assert!(raw.is_empty(), "{raw:?} in {text:?}");
        assert!(
            text.contains("container fake\\rINFO forged\\nline admitted")
                && text.contains("pod=ns/\\x1b[31mred")
                && text.contains("event{container=fake\\rINFO forged\\nline}"),
            "{text:?}"
        );
    }
}
