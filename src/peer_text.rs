//! Text from a peer, made safe to show: every report, log line, metrics page and error
//! that quotes what another host sent goes through [`printable`], so that a peer can
//! neither move a terminal's cursor, colour it or clear it, nor start a line of its own
//! in a log or on a metrics page, nor fill either.

use serde::{Deserialize, Deserializer};

/// Most characters of a peer's text shown; more are cut, and [`CUT`] says so.
pub const MAX_CHARS: usize = 300;

/// What ends a text that was cut.
pub const CUT: &str = "...";

/// `text` as one printable line: control characters (line breaks, tabs, the escape that
/// starts a terminal's control sequences), the characters that reorder or hide text
/// (bidirectional overrides, zero-width marks) and Unicode's line and paragraph
/// separators are written as escapes (`\n`, `\u{1b}`); the whole is cut after
/// [`MAX_CHARS`] characters, on a character's boundary, ending with [`CUT`].
pub fn printable(text: &str) -> String {
    let mut out = String::with_capacity(text.len().min(MAX_CHARS + CUT.len()));
    for (i, c) in text.chars().enumerate() {
        if i == MAX_CHARS {
            out.push_str(CUT);
            break;
        }
        if hidden(c) {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// Whether `c` would act on a terminal or a line, or hide or reorder the text around
/// it, rather than show as itself.
fn hidden(c: char) -> bool {
    c.is_control()
        || matches!(c,
            // Zero-width marks and joiners, left-to-right and right-to-left marks.
            '\u{200b}'..='\u{200f}'
            // Line and paragraph separators; bidirectional embeddings and overrides.
            | '\u{2028}'..='\u{202e}'
            // Word joiner, invisible operators, bidirectional isolates.
            | '\u{2060}'..='\u{206f}'
            | '\u{061c}' | '\u{feff}' | '\u{fff9}'..='\u{fffb}')
}

/// A string a peer sent in a document, made [`printable`] as it is read: what a peer
/// reports about itself (its host name, kernel, a stream's address or congestion
/// control) can be shown as it is.
pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    let text = String::deserialize(deserializer)?;
    Ok(printable(&text))
}

/// [`deserialize`] for a string that may be absent.
pub fn deserialize_option<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<String>, D::Error> {
    let text = Option::<String>::deserialize(deserializer)?;
    Ok(text.as_deref().map(printable))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_escapes_and_line_breaks_are_shown_escaped() {
        assert_eq!(printable("a\nb\x1b[2J\r\t"), "a\\nb\\u{1b}[2J\\r\\t");
        assert_eq!(printable("\u{7f}\u{9b}31m"), "\\u{7f}\\u{9b}31m");
        assert_eq!(printable("x\u{202e}y\u{2028}z"), "x\\u{202e}y\\u{2028}z");
        assert_eq!(printable("caf\u{e9} \u{1f600}"), "caf\u{e9} \u{1f600}");
        let shown = printable("fperf_probe_success 1\nfperf_probe_success 1");
        assert!(!shown.contains('\n'), "{shown}");
    }

    #[test]
    fn long_text_is_cut_on_a_character_with_a_marker() {
        let long = "x".repeat(1000);
        assert_eq!(printable(&long), format!("{}{CUT}", "x".repeat(MAX_CHARS)));
        // Multi-byte characters at and around the cut.
        let wide = "\u{e9}\u{1f600}".repeat(MAX_CHARS);
        let shown = printable(&wide);
        assert_eq!(shown.chars().count(), MAX_CHARS + CUT.len());
        assert!(shown.ends_with(CUT));
        let exact = "\u{1f600}".repeat(MAX_CHARS);
        assert_eq!(printable(&exact), exact, "nothing to cut");
    }

    #[test]
    fn strings_read_from_a_peer_are_made_printable() {
        #[derive(Deserialize)]
        struct Doc {
            #[serde(deserialize_with = "deserialize")]
            name: String,
            #[serde(default, deserialize_with = "deserialize_option")]
            kernel: Option<String>,
        }
        let doc: Doc =
            serde_json::from_str(r#"{"name":"h\u001b[2J\nx","kernel":"6\n"}"#).expect("doc");
        assert_eq!(doc.name, "h\\u{1b}[2J\\nx");
        assert_eq!(doc.kernel.as_deref(), Some("6\\n"));
        let doc: Doc = serde_json::from_str(r#"{"name":"h"}"#).expect("doc");
        assert_eq!(doc.kernel, None);
    }
}
