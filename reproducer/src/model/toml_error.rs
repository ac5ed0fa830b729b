//! One-line, located error messages for the TOML files users write (scenario, schedule).

/// "ORIGIN, line L: message" from a TOML parse error.
pub fn toml_error(e: &toml::de::Error, text: &str, origin: &str) -> anyhow::Error {
    let msg = e.message().replace('\n', " ");
    match e.span() {
        Some(span) => {
            let line = text[..span.start.min(text.len())].matches('\n').count() + 1;
            anyhow::anyhow!("{origin}, line {line}: {msg}")
        }
        None => anyhow::anyhow!("{origin}: {msg}"),
    }
}

/// Line (1-based) of `key = ...` inside the `index`-th `[[table]]`, if written there.
pub fn line_of_key(text: &str, table: &str, index: usize, key: &str) -> Option<usize> {
    let header = format!("[[{table}]]");
    let mut seen = 0usize;
    let mut inside = false;
    for (i, line) in text.lines().enumerate() {
        let t = line.trim();
        if t.starts_with('[') {
            inside = t == header && {
                seen += 1;
                seen == index + 1
            };
            continue;
        }
        if inside {
            if let Some(rest) = t.strip_prefix(key) {
                if rest.trim_start().starts_with('=') {
                    return Some(i + 1);
                }
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_keys_per_table() {
        let text = "[[faults]]\nnode = \"a\"\n\n[[faults]]\nkind = \"crash\"\nnode = \"b\"\n";
        assert_eq!(line_of_key(text, "faults", 0, "node"), Some(2));
        assert_eq!(line_of_key(text, "faults", 1, "node"), Some(6));
        assert_eq!(line_of_key(text, "faults", 1, "nth"), None);
    }
}
