//! The one error type of configuration checks (config file, flags, trigger and redaction
//! rules), apart from `config` so that the rule modules it checks need not import it.
use std::fmt;

/// A configuration mistake, phrased for the operator.
#[derive(Debug)]
pub struct ConfigError(pub String);

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConfigError {}

impl From<tracedump::redact::BadRule> for ConfigError {
    fn from(e: tracedump::redact::BadRule) -> ConfigError {
        ConfigError(e.0)
    }
}
