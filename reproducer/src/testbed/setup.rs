//! A scenario's `[[setup]]` steps: commands that prepare each run before its nodes start
//! (initialize a data directory, write a config), in the run's workdir, in order, each as
//! its `user` and bounded by its `timeout_s`. A step that fails or hangs stops the run with
//! an error that names the step and shows the end of its log (`{workdir}/setup.log`).
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};

use super::nodes;
use super::runas::RunAs;
use crate::model::scenario::{Placeholders, Scenario};

pub fn run_setup(scenario: &Scenario, workdir: &Path, vars: &Placeholders) -> Result<()> {
    let log = workdir.join("setup.log");
    for (i, step) in scenario.setup.iter().enumerate() {
        let argv = vars.expand_all(&step.command)?;
        let user = step.user.as_deref().map(RunAs::lookup).transpose()?;
        let what = format!("scenario {}: setup {} ({})", scenario.name, i + 1, argv.join(" "));
        if let Some(u) = &user {
            u.check_reachable(workdir)?;
        }
        let deadline = Instant::now() + Duration::from_secs(step.timeout_s);
        let status = nodes::run_until_as(&argv, None, workdir, &log, deadline, user.as_ref())?;
        match status {
            _ if crate::interrupt::requested() => bail!("interrupted"),
            None => bail!(
                "{what} did not finish within {} s (timeout_s); its log ends: {}",
                step.timeout_s,
                nodes::log_tail(&log, 5)
            ),
            Some(s) if !s.success() => {
                bail!("{what} failed ({s}); its log ends: {}", nodes::log_tail(&log, 5))
            }
            Some(_) => {}
        }
    }
    Ok(())
}
