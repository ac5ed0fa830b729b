//! Running a node or a setup step as another user (a scenario's `user`): the account
//! looked up once, the identity switched in the child between fork and exec (after the
//! steps that need root: entering the BPF maps, installing the seccomp filter), and the
//! directories that user must reach checked up front.
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use anyhow::{anyhow, bail, Context, Result};

use crate::model::scenario::Scenario;

/// The pre-flight of every command that runs the scenario: each account it names exists
/// here (one line naming where the missing one is written).
pub fn check_accounts(scenario: &Scenario) -> Result<()> {
    for (place, user) in &scenario.accounts {
        RunAs::lookup(user).map_err(|e| anyhow!("{place}: {e}"))?;
    }
    Ok(())
}

/// An account to run as, resolved before any fork.
#[derive(Clone, Debug)]
pub struct RunAs {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
    /// supplementary groups (from the group database)
    pub groups: Vec<libc::gid_t>,
    pub home: String,
}

impl RunAs {
    /// Looks `name` up in the user and group databases.
    pub fn lookup(name: &str) -> Result<RunAs> {
        let user = nix::unistd::User::from_name(name)
            .map_err(|e| anyhow!("user '{name}': {e}"))?
            .ok_or_else(|| anyhow!("no user '{name}' on this host"))?;
        let cname = std::ffi::CString::new(name).map_err(|_| anyhow!("user '{name}': not a user name"))?;
        let groups = nix::unistd::getgrouplist(&cname, user.gid)
            .map_err(|e| anyhow!("user '{name}': its groups: {e}"))?
            .into_iter()
            .map(|g| g.as_raw())
            .collect();
        Ok(RunAs {
            name: name.to_string(),
            uid: user.uid.as_raw(),
            gid: user.gid.as_raw(),
            groups,
            home: user.dir.display().to_string(),
        })
    }

    /// Sets HOME, USER and LOGNAME as a login would.
    pub fn set_env(&self, cmd: &mut std::process::Command) {
        cmd.env("HOME", &self.home)
            .env("USER", &self.name)
            .env("LOGNAME", &self.name);
    }

    /// Switches the calling process to this account: groups, then gid, then uid.
    ///
    /// # Safety
    /// Meant for a `pre_exec` closure: makes raw syscalls only and does not allocate.
    pub unsafe fn switch(&self) -> std::io::Result<()> {
        let check = |r: libc::c_int| {
            if r == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        };
        // SAFETY: the pointer and length describe self.groups, alive for the call.
        check(unsafe { libc::setgroups(self.groups.len(), self.groups.as_ptr()) })?;
        // SAFETY: integer arguments.
        check(unsafe { libc::setresgid(self.gid, self.gid, self.gid) })?;
        // SAFETY: integer arguments.
        check(unsafe { libc::setresuid(self.uid, self.uid, self.uid) })
    }

    /// Gives `dir` to this account (a node's `{workdir}/NAME`).
    pub fn own(&self, dir: &Path) -> Result<()> {
        std::os::unix::fs::chown(dir, Some(self.uid), Some(self.gid))
            .with_context(|| format!("giving {} to user {}", dir.display(), self.name))
    }

    /// Refuses a run directory this account cannot reach: every directory above it must be
    /// searchable by it (by owner, group or others), as a real deployment's would be.
    pub fn check_reachable(&self, dir: &Path) -> Result<()> {
        for ancestor in dir.ancestors().skip(1) {
            let md = std::fs::metadata(ancestor).with_context(|| format!("{}", ancestor.display()))?;
            let mode = md.permissions().mode();
            let searchable = if md.uid() == self.uid {
                mode & 0o100 != 0
            } else if md.gid() == self.gid || self.groups.contains(&md.gid()) {
                mode & 0o010 != 0
            } else {
                mode & 0o001 != 0
            };
            if !searchable {
                bail!(
                    "user {} cannot reach the run directory {}: {} (mode {:o}) is not searchable by it; put the run under a directory others may enter",
                    self.name,
                    dir.display(),
                    ancestor.display(),
                    mode & 0o7777
                );
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn looks_up_accounts_and_refuses_unknown_ones() {
        let nobody = RunAs::lookup("nobody").unwrap();
        assert_eq!(nobody.uid, 65534);
        let e = RunAs::lookup("no-such-user-here").unwrap_err().to_string();
        assert!(e.contains("no user 'no-such-user-here'"), "{e}");
    }

    #[test]
    fn the_pre_flight_names_where_an_unknown_account_is_written() {
        let text =
            "name = \"s\"\n[[nodes]]\nname = \"a\"\ncommand = [\"true\"]\nuser = \"no-such-user-here\"\n\
                    [workload]\ncommand = [\"true\"]\n[oracle]\ncommand = [\"true\"]\n";
        let sc = Scenario::parse(text, "s.toml").unwrap();
        let e = check_accounts(&sc).unwrap_err().to_string();
        assert!(
            e.starts_with("scenario s.toml, line 5: node 1 field user: no user 'no-such-user-here'"),
            "{e}"
        );
        check_accounts(&Scenario::parse(&text.replace("no-such-user-here", "nobody"), "s.toml").unwrap())
            .unwrap();
    }

    #[test]
    fn a_private_directory_above_the_run_is_refused() {
        let nobody = RunAs::lookup("nobody").unwrap();
        let top = tempfile::tempdir().unwrap();
        let run = top.path().join("run");
        std::fs::create_dir(&run).unwrap();
        std::fs::set_permissions(top.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        let e = nobody.check_reachable(&run).unwrap_err().to_string();
        assert!(
            e.contains(&top.path().display().to_string()) && e.contains("700"),
            "{e}"
        );
        std::fs::set_permissions(top.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
        nobody.check_reachable(&run).unwrap();
    }
}
