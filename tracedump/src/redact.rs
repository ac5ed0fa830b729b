//! Redaction: the `[[redact]]` rules (regex → replacement), applied in user space to
//! everything a dump says about commands and files before it is written — command lines
//! (each argument on its own), exe and cwd, the configuration files of process environments
//! (paths and captured contents), the open-file table, the paths of failed calls and the
//! trigger's event. The default rule hides `password|passwd|secret|token|…key=VALUE`.
use std::collections::HashMap;

use regex::Regex;
use serde::{Deserialize, Serialize};

use crate::process::ProcInfo;
use crate::record::{BlobRef, Payload, Record};

/// A rule whose pattern does not compile: one line naming where and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadRule(pub String);

impl std::fmt::Display for BadRule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BadRule {}

/// One rule: every match of `pattern` (Rust regex syntax) is replaced by `replacement`
/// (`$1`, `${name}` refer to groups).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct RedactRule {
    pub pattern: String,
    pub replacement: String,
}

/// Keeps the key (`--password=`, `?token=`), so that what is left still says what it was.
pub const DEFAULT_PATTERN: &str = r"(?i)((?:password|passwd|secret|token|[a-z0-9_.-]*key)=)[^\s&;,]+";
pub const DEFAULT_REPLACEMENT: &str = "${1}<redacted>";

pub fn default_rules() -> Vec<RedactRule> {
    vec![RedactRule {
        pattern: DEFAULT_PATTERN.into(),
        replacement: DEFAULT_REPLACEMENT.into(),
    }]
}

#[derive(Clone, Debug, Default)]
pub struct Redactor {
    rules: Vec<(Regex, String)>,
}

impl Redactor {
    pub fn new(rules: &[RedactRule], origin: &str) -> Result<Redactor, BadRule> {
        let mut out = Vec::new();
        for (i, r) in rules.iter().enumerate() {
            let re = Regex::new(&r.pattern).map_err(|e| {
                BadRule(format!(
                    "config {origin}: redact[{i}] pattern '{}': {}",
                    r.pattern,
                    e.to_string().replace('\n', " ")
                ))
            })?;
            out.push((re, r.replacement.clone()));
        }
        Ok(Redactor { rules: out })
    }

    /// The redactor a dump was written with (its effective config's `redact`); the default
    /// rules for dumps older than redaction, none when its rules cannot be read.
    pub fn of_dump_config(config: &serde_json::Value) -> Redactor {
        let rules = match config.get("redact") {
            Some(v) => serde_json::from_value(v.clone()).unwrap_or_default(),
            None => default_rules(),
        };
        Redactor::new(&rules, "dump").unwrap_or_default()
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// `text` with every rule applied in order; None when nothing matched.
    pub fn apply(&self, text: &str) -> Option<String> {
        let mut out: Option<String> = None;
        for (re, replacement) in &self.rules {
            let current = out.as_deref().unwrap_or(text);
            if re.is_match(current) {
                out = Some(re.replace_all(current, replacement.as_str()).into_owned());
            }
        }
        out
    }

    pub fn apply_in_place(&self, text: &mut String) {
        if let Some(r) = self.apply(text) {
            *text = r;
        }
    }

    pub fn process(&self, p: &mut ProcInfo) {
        for arg in p.cmdline.iter_mut().chain(p.exec_cmdline.iter_mut()).flatten() {
            self.apply_in_place(arg);
        }
        for s in [&mut p.exe, &mut p.cwd].into_iter().flatten() {
            self.apply_in_place(s);
        }
        for c in p.environment.iter_mut().flat_map(|e| e.config_files.iter_mut()) {
            self.apply_in_place(&mut c.file.path);
            if let Some(text) = &mut c.contents {
                self.apply_in_place(text);
            }
        }
        for d in p.environment.iter_mut().flat_map(|e| e.storage.iter_mut()) {
            for s in [&mut d.path, &mut d.mount_point, &mut d.source] {
                self.apply_in_place(s);
            }
            if let Some(r) = &mut d.resolved {
                self.apply_in_place(r);
            }
        }
    }
}

/// Where redaction moved the paths of failed calls: old blob reference → new.
#[derive(Debug, Default)]
pub struct MovedBlobs(HashMap<u64, BlobRef>);

impl MovedBlobs {
    /// `r` pointing at its redacted path, if its path was redacted.
    pub fn apply(&self, mut r: Record) -> Record {
        if self.0.is_empty() {
            return r;
        }
        if let Payload::SyscallFailure { blob, .. } = &mut r.payload {
            if let Some(&moved) = self.0.get(&blob.raw()) {
                *blob = moved;
            }
        }
        r
    }
}

/// Redacts the paths of failed calls among `records`, whose blobs are the live bytes
/// `blobs` (base offset, bytes). A changed path is overwritten with zeros where it was and
/// appended redacted; the records that pointed there are rewritten as they are written
/// (`MovedBlobs::apply`), so that a dump needs no second copy of its window.
pub fn redact_paths<'a>(
    redactor: &Redactor,
    records: impl Iterator<Item = &'a Record>,
    blobs: &mut (u64, Vec<u8>),
) -> MovedBlobs {
    // every path looked at: once zeroed, its old place no longer says what it was
    let mut seen: HashMap<u64, BlobRef> = HashMap::new();
    if redactor.is_empty() {
        return MovedBlobs::default();
    }
    for r in records {
        let Payload::SyscallFailure { blob, .. } = r.payload else {
            continue;
        };
        if !blob.is_none() && !seen.contains_key(&blob.raw()) {
            let moved = redact_blob(redactor, blob, blobs);
            seen.insert(blob.raw(), moved);
        }
    }
    seen.retain(|old, new| *old != new.raw());
    MovedBlobs(seen)
}

/// Where `value` would be in a blob window: docs/dump-format.md, blob reference.
fn blob_span(r: BlobRef, base: u64, len: usize) -> Option<std::ops::Range<usize>> {
    let offset = (r.raw() >> 16).checked_sub(1)?;
    let start = usize::try_from(offset.checked_sub(base)?).ok()?;
    let end = start.checked_add((r.raw() & 0xffff) as usize)?;
    (end <= len).then_some(start..end)
}

fn redact_blob(redactor: &Redactor, r: BlobRef, blobs: &mut (u64, Vec<u8>)) -> BlobRef {
    let (base, bytes) = blobs;
    let Some(span) = blob_span(r, *base, bytes.len()) else {
        return r;
    };
    // address blobs start with a 0 byte; paths never do
    if bytes[span.start] == 0 {
        return r;
    }
    let Some(text) = std::str::from_utf8(&bytes[span.clone()])
        .ok()
        .and_then(|t| redactor.apply(t))
    else {
        return r;
    };
    bytes[span].fill(0);
    if text.is_empty() || text.len() >= 1 << 16 {
        return BlobRef::NONE;
    }
    let offset = *base + bytes.len() as u64;
    bytes.extend_from_slice(text.as_bytes());
    BlobRef::from_raw(((offset + 1) << 16) | text.len() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_command_lines_of_a_renamed_process_are_redacted() {
        let r = Redactor::new(&default_rules(), "t").unwrap();
        let mut p = ProcInfo {
            cmdline: Some(vec!["server: worker --token=abc".into()]),
            exec_cmdline: Some(vec!["server".into(), "--token=abc".into()]),
            ..Default::default()
        };
        r.process(&mut p);
        assert_eq!(p.cmdline.unwrap(), ["server: worker --token=<redacted>"]);
        assert_eq!(p.exec_cmdline.unwrap(), ["server", "--token=<redacted>"]);
    }

    #[test]
    fn default_rule_hides_values_and_keeps_keys() {
        let r = Redactor::new(&default_rules(), "t").unwrap();
        let cases = [
            ("--password=hunter2", "--password=<redacted>"),
            ("--db-passwd=x", "--db-passwd=<redacted>"),
            (
                "https://h/x?token=abc&page=2",
                "https://h/x?token=<redacted>&page=2",
            ),
            ("API_KEY=0123", "API_KEY=<redacted>"),
            ("client_secret=s3;rest", "client_secret=<redacted>;rest"),
            ("--port=7001", "--port=7001"),
        ];
        for (input, want) in cases {
            assert_eq!(r.apply(input).as_deref().unwrap_or(input), want, "{input}");
        }
        assert!(Redactor::new(
            &[RedactRule {
                pattern: "(".into(),
                replacement: "".into()
            }],
            "f"
        )
        .unwrap_err()
        .0
        .contains("redact[0]"));
    }

    #[test]
    fn configuration_contents_and_paths_are_redacted() {
        use crate::environment::{ConfigFile, FileIdentity, ProcEnvironment};
        let r = Redactor::new(&default_rules(), "t").unwrap();
        let mut p = ProcInfo {
            environment: Some(ProcEnvironment {
                config_files: vec![ConfigFile {
                    file: FileIdentity {
                        path: "/srv/token=abc/app.conf".into(),
                        ..Default::default()
                    },
                    source: "argument".into(),
                    contents: Some("port 7000\nadmin_password=hunter2\n".into()),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            ..Default::default()
        };
        r.process(&mut p);
        let c = &p.environment.unwrap().config_files[0];
        // the default rule takes the value up to a space, &, ; or ,
        assert_eq!(c.file.path, "/srv/token=<redacted>");
        assert_eq!(
            c.contents.as_deref(),
            Some("port 7000\nadmin_password=<redacted>\n")
        );
    }
}
