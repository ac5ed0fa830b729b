//! What a cgroup v2 path says about the container a process runs in: the runtime and the
//! container id from the runtime's scope name (docker-, cri-containerd-, crio-, libpod-; or
//! the cgroupfs driver's bare id under /docker, /kubepods or /libpod_parent), and the
//! Kubernetes pod uid from the kubepods slices (systemd driver, `_` for `-`) or the `pod<uid>`
//! directory (cgroupfs driver). Only the path is read: nothing here asks a runtime.

/// The container fields of one cgroup path; all empty for a process outside containers.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Container {
    /// "docker", "containerd", "cri-o" or "podman"; None when the path names a container
    /// without saying whose (the cgroupfs driver's kubepods/pod<uid>/<id>)
    pub runtime: Option<&'static str>,
    pub id: Option<String>,
    pub pod_uid: Option<String>,
}

/// Scope-name prefixes of the systemd cgroup driver, with the runtime each names. The
/// runtimes' monitor processes (conmon) have scopes of their own and are not the container.
const SCOPES: [(&str, &str); 4] = [
    ("docker-", "docker"),
    ("cri-containerd-", "containerd"),
    ("crio-", "cri-o"),
    ("libpod-", "podman"),
];

/// Parent directories under which the cgroupfs driver names a container by its bare id.
const CGROUPFS_PARENTS: [(&str, Option<&str>); 2] =
    [("docker", Some("docker")), ("libpod_parent", Some("podman"))];

/// Shortest id taken for a container id (runtimes print 12 of their 64 hex digits).
const MIN_ID_LEN: usize = 12;

fn is_container_id(s: &str) -> bool {
    s.len() >= MIN_ID_LEN && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The container a systemd-driver scope name (`docker-<id>.scope`, ...) stands for.
fn scope(component: &str) -> Option<(&'static str, &str)> {
    let name = component.strip_suffix(".scope")?;
    SCOPES.iter().find_map(|&(prefix, runtime)| {
        let id = name.strip_prefix(prefix)?;
        is_container_id(id).then_some((runtime, id))
    })
}

/// The pod uid of a kubepods component: `kubepods-<qos>-pod<uid>.slice` or
/// `kubepods-pod<uid>.slice` (systemd driver, `_` for `-`), or `pod<uid>` (cgroupfs driver).
fn pod_uid(component: &str) -> Option<String> {
    if let Some(slice) = component.strip_suffix(".slice") {
        if !slice.starts_with("kubepods-") {
            return None;
        }
        let uid = &slice[slice.rfind("-pod")? + 4..];
        return (!uid.is_empty()).then(|| uid.replace('_', "-"));
    }
    let uid = component.strip_prefix("pod")?;
    let uuid_like = uid.len() >= 32 && uid.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-');
    uuid_like.then(|| uid.to_string())
}

/// Whether the component after `before` is where the cgroupfs driver puts a container, and
/// whose: right under /docker or /libpod_parent, or anywhere under /kubepods.
fn cgroupfs_parent(before: &[&str], under_kubepods: bool) -> Option<Option<&'static str>> {
    if under_kubepods {
        return (before.len() > 1).then_some(None);
    }
    let parent = before.last()?;
    CGROUPFS_PARENTS
        .iter()
        .find(|(p, _)| p == parent)
        .map(|&(_, runtime)| runtime)
}

/// Parses a cgroup v2 path as /proc/PID/cgroup shows it (after `0::`). The innermost
/// container wins (a container's own sub-cgroups keep its id).
pub fn parse(path: &str) -> Container {
    let mut c = Container::default();
    let components: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let under_kubepods = components.first().is_some_and(|f| f.starts_with("kubepods"));
    for (i, component) in components.iter().enumerate() {
        if under_kubepods && c.pod_uid.is_none() {
            c.pod_uid = pod_uid(component);
        }
        if let Some((runtime, id)) = scope(component) {
            c.runtime = Some(runtime);
            c.id = Some(id.to_string());
        } else if let Some(runtime) = cgroupfs_parent(&components[..i], under_kubepods) {
            // podman's cgroupfs driver names it libpod-<id>, the others by the bare id
            let id = component.strip_prefix("libpod-").unwrap_or(component);
            if is_container_id(id) {
                c.runtime = runtime;
                c.id = Some(id.to_string());
            }
        }
    }
    c
}

/// A short name for track names and summaries: "docker 0123456789ab", "pod <uid>".
pub fn label(runtime: Option<&str>, id: Option<&str>, pod_uid: Option<&str>) -> Option<String> {
    let id = id.map(|id| &id[..id.len().min(MIN_ID_LEN)]);
    match (runtime, id, pod_uid) {
        (Some(rt), Some(id), _) => Some(format!("{rt} {id}")),
        (None, Some(id), _) => Some(format!("container {id}")),
        (_, None, Some(pod)) => Some(format!("pod {pod}")),
        _ => None,
    }
}

impl Container {
    pub fn is_empty(&self) -> bool {
        self.id.is_none() && self.pod_uid.is_none()
    }

    pub fn label(&self) -> Option<String> {
        label(self.runtime, self.id.as_deref(), self.pod_uid.as_deref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "3f2a1b0c9d8e7f6a5b4c3d2e1f0a9b8c7d6e5f4a3b2c1d0e9f8a7b6c5d4e3f2a";
    const POD: &str = "8d2c6f1e-4b3a-4c5d-9e8f-0a1b2c3d4e5f";

    fn container(runtime: Option<&'static str>, id: &str, pod: Option<&str>) -> Container {
        Container {
            runtime,
            id: Some(id.to_string()),
            pod_uid: pod.map(str::to_string),
        }
    }

    #[test]
    fn docker_systemd_and_cgroupfs_drivers() {
        let want = container(Some("docker"), ID, None);
        assert_eq!(parse(&format!("/system.slice/docker-{ID}.scope")), want);
        assert_eq!(parse(&format!("/docker/{ID}")), want);
        assert_eq!(want.label().unwrap(), "docker 3f2a1b0c9d8e");
    }

    #[test]
    fn containerd_and_crio_in_kubepods_slices() {
        let pod_slice = format!("kubepods-burstable-pod{}.slice", POD.replace('-', "_"));
        let path = format!("/kubepods.slice/kubepods-burstable.slice/{pod_slice}/cri-containerd-{ID}.scope");
        assert_eq!(parse(&path), container(Some("containerd"), ID, Some(POD)));
        let guaranteed = format!(
            "/kubepods.slice/kubepods-pod{}.slice/crio-{ID}.scope",
            POD.replace('-', "_")
        );
        assert_eq!(parse(&guaranteed), container(Some("cri-o"), ID, Some(POD)));
    }

    #[test]
    fn conmon_is_not_the_container() {
        let c = parse(&format!("/machine.slice/libpod-conmon-{ID}.scope"));
        assert_eq!(c, Container::default());
        let c = parse(&format!(
            "/kubepods.slice/kubepods-besteffort.slice/crio-conmon-{ID}.scope"
        ));
        assert_eq!(c.id, None);
    }

    #[test]
    fn kubepods_cgroupfs_driver() {
        let c = parse(&format!("/kubepods/burstable/pod{POD}/{ID}"));
        assert_eq!(c, container(None, ID, Some(POD)));
        assert_eq!(c.label().unwrap(), "container 3f2a1b0c9d8e");
        let c = parse(&format!("/kubepods/pod{POD}/{ID}"));
        assert_eq!(c, container(None, ID, Some(POD)));
        // the pod's own cgroup: a pod, no container
        let c = parse(&format!("/kubepods/besteffort/pod{POD}"));
        assert_eq!((c.id, c.pod_uid.as_deref()), (None, Some(POD)));
    }

    #[test]
    fn podman_rootful_rootless_nested_and_cgroupfs() {
        let want = container(Some("podman"), ID, None);
        assert_eq!(parse(&format!("/machine.slice/libpod-{ID}.scope")), want);
        let rootless = format!("/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{ID}.scope");
        assert_eq!(parse(&rootless), want);
        assert_eq!(
            parse(&format!("/machine.slice/libpod-{ID}.scope/container")),
            want
        );
        assert_eq!(parse(&format!("/libpod_parent/libpod-{ID}")), want);
        assert_eq!(parse(&format!("/libpod_parent/{ID}")), want);
    }

    #[test]
    fn services_and_the_root_are_no_container() {
        for path in [
            "/",
            "",
            "/system.slice/redis-server.service",
            "/user.slice/user-1000.slice/session-3.scope",
            "/system.slice/docker.service",
            "/init.scope",
            "/docker/not-an-id",
        ] {
            let c = parse(path);
            assert!(c.is_empty() && c.label().is_none(), "{path}: {c:?}");
        }
    }
}
