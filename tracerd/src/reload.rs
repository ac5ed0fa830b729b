//! A reload (SIGHUP, `tracerd reload`): the configuration read again and applied to the
//! running daemon without touching the window. What the running programs and tables can
//! take is applied; what was sized or compiled in at start is named and kept as it is.
use anyhow::Result;

use crate::config::Config;
use crate::engine::{check_functions, Engine};
use crate::recorder::Recorder;
use crate::triggers::Triggers;
use crate::uprobes::Relist;

/// Settings a reload applies. Every other setting keeps its value until a restart.
const APPLIED: [&str; 16] = [
    "dump_dir",
    "dump_dir_max_bytes",
    "dump_dir_max_files",
    "dump_on_stop",
    "gap_ms",
    "pause_ms",
    "functions",
    "uprobe",
    "target_comm",
    "target_exe",
    "target_pid",
    "target_unit",
    "metrics_textfile",
    "metrics_interval_ms",
    "redact",
    "triggers",
];

/// The settings of `new` that differ from `old`'s, by name.
fn changed(old: &Config, new: &Config) -> Result<Vec<String>> {
    let (old, new) = (serde_json::to_value(old)?, serde_json::to_value(new)?);
    let (Some(old), Some(new)) = (old.as_object(), new.as_object()) else {
        return Ok(Vec::new());
    };
    Ok(new
        .iter()
        .filter(|(k, v)| old.get(k.as_str()) != Some(v))
        .map(|(k, _)| k.clone())
        .collect())
}

/// What a reload did: the configuration now in force and one line for the log and the client.
pub struct Reloaded {
    pub config: Config,
    pub summary: String,
}

/// Applies what it can of `new` (validated) over `old`. Nothing is changed when a part of
/// it cannot be applied (an executable that does not exist, a trigger rule that does not
/// compile, a function that cannot be attached): the error says why and `old` stays in force.
pub fn apply(engine: &Engine, rec: &mut Recorder, old: &Config, new: Config) -> Result<Reloaded> {
    let changed = changed(old, &new)?;
    let mut kept: Vec<String> = changed
        .iter()
        .filter(|k| !APPLIED.contains(&k.as_str()))
        .cloned()
        .collect();
    let mut applied: Vec<String> = changed
        .iter()
        .filter(|k| APPLIED.contains(&k.as_str()))
        .cloned()
        .collect();
    let mut config = old.clone();
    let selection_changes = new.has_targets() != old.has_targets();
    if selection_changes {
        // the programs were loaded either filtering on a target set or tracing everything
        kept.push("the choice between targets and every process".into());
    } else {
        config.target_comm = new.target_comm.clone();
        config.target_exe = new.target_exe.clone();
        config.target_pid = new.target_pid.clone();
        config.target_unit = new.target_unit.clone();
    }
    config.dump_dir = new.dump_dir.clone();
    config.dump_dir_max_bytes = new.dump_dir_max_bytes;
    config.dump_dir_max_files = new.dump_dir_max_files;
    config.dump_on_stop = new.dump_on_stop;
    config.gap_ms = new.gap_ms;
    config.pause_ms = new.pause_ms;
    config.metrics_textfile = new.metrics_textfile.clone();
    config.metrics_interval_ms = new.metrics_interval_ms;
    config.redact = new.redact.clone();
    config.triggers = new.triggers.clone();
    // everything that can fail comes before anything changes, or is undone
    let mut triggers = Triggers::new(&config.triggers)?;
    let list = new.function_specs()?;
    check_functions(&new, &list)?;
    let relist = engine.relist_functions(&list, old.tolerate_unattachable_functions)?;
    let retargeted = if selection_changes || !config.has_targets() {
        Ok(Vec::new())
    } else {
        engine.retarget(old, &config)
    };
    let found = match retargeted {
        Ok(found) => found,
        Err(e) => {
            if let Relist::Changed(r) = relist {
                engine.undo_functions(r);
            }
            return Err(e);
        }
    };
    let functions = match relist {
        Relist::TooMany { needed, room } => {
            applied.retain(|k| k != "functions" && k != "uprobe");
            kept.push(format!(
                "the function list ({needed} functions listed since start, the call counters hold {room})"
            ));
            String::new()
        }
        relist => {
            config.uprobe = new.uprobe.clone();
            config.functions = new.functions.clone();
            commit_functions(engine, relist, &mut applied)?
        }
    };
    rec.watch_execs = engine.listed_functions() > 0;
    engine.set_thresholds(config.gap_ms, config.pause_ms)?;
    if let Some(before) = rec.triggers.take() {
        triggers.carry_over(before);
    }
    rec.triggers = Some(triggers);
    let newly = found.len();
    rec.add_processes(
        found
            .into_iter()
            .filter(|p| rec.procs.get(p.pid).is_none())
            .collect(),
    );
    let mut summary = if applied.is_empty() {
        "reloaded: nothing to apply".to_string()
    } else {
        format!("reloaded: applied {}", applied.join(", "))
    };
    summary += &functions;
    summary += &format!(
        "; {} processes traced now, {newly} selected by the new targets",
        engine.targets_now()
    );
    if !kept.is_empty() {
        summary += &format!("; needs a restart, kept as it was: {}", kept.join(", "));
    }
    Ok(Reloaded { config, summary })
}

/// Puts a changed function list in force (its additions attached already); returns what the
/// summary says of it. A functions file that changed under the same name is applied too.
fn commit_functions(engine: &Engine, relist: Relist, applied: &mut Vec<String>) -> Result<String> {
    let Relist::Changed(r) = relist else {
        return Ok(String::new());
    };
    let (added, dropped) = (r.added, r.dropped());
    if !applied.iter().any(|k| k == "functions" || k == "uprobe") {
        applied.push("the functions file's list".into());
    }
    engine.commit_functions(r)?;
    let said = format!(
        "; functions: {added} attached, {dropped} detached, {} listed",
        engine.listed_functions()
    );
    Ok(said)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_are_named_by_setting() {
        let old = Config::default();
        let new = Config::parse(
            "ring_events = 10\ngap_ms = 100\n[triggers]\nnonzero_exit = true\n",
            "t",
        )
        .unwrap();
        let mut names = changed(&old, &new).unwrap();
        names.sort();
        assert_eq!(names, ["gap_ms", "ring_events", "triggers"]);
        assert!(
            !APPLIED.contains(&"ring_events"),
            "the window's size needs a restart"
        );
        assert!(APPLIED.contains(&"gap_ms"));
    }
}
