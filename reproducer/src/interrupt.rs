//! Ctrl-C and SIGTERM: turned into a flag that every wait loop checks, so that a run is
//! torn down by the normal path (and its cleanup) instead of dying half-way.
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

static FLAG: OnceLock<Arc<AtomicBool>> = OnceLock::new();

/// Routes SIGINT and SIGTERM to the flag. Idempotent.
pub fn install() -> std::io::Result<()> {
    let flag = FLAG.get_or_init(|| Arc::new(AtomicBool::new(false)));
    signal_hook::flag::register(signal_hook::consts::SIGINT, flag.clone())?;
    signal_hook::flag::register(signal_hook::consts::SIGTERM, flag.clone())?;
    Ok(())
}

pub fn requested() -> bool {
    FLAG.get().is_some_and(|f| f.load(Ordering::Relaxed))
}
