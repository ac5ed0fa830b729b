//! render.rs: the text of a diagnosis.
use crate::analysis::timeline::DumpInfo;

use super::super::*;
use super::fixtures::*;

#[test]
fn lost_events_are_a_note_and_render_lists_every_part() {
    let mut t = timeline(vec![
        at(1.0, Some(0), 10, killed(libc::SIGKILL, Some(999))),
        at(2.0, Some(1), 20, exited(1)),
    ]);
    t.dumps.push(DumpInfo {
        path: "/d/x.tdump".into(),
        host: "h".into(),
        events: 2,
        mapped_processes: 2,
        processes: 2,
        nodes: Vec::new(),
        interfaces: Vec::new(),
        taken_ns: 3 * SEC,
        lost_events: 7,
        process_starts: Default::default(),
        parents: Default::default(),
        node_starts: Vec::new(),
        workdir: None,
    });
    let d = diagnose(&t, Some(&scenario()), None);
    assert!(
        d.notes.iter().any(|n| n.contains("7 events were lost")),
        "{:?}",
        d.notes
    );
    let text = render(&d, Some(&scenario()));
    for needle in [
        "symptoms (1):",
        "db2: exited with status 1",
        "fault candidates (1)",
        "db1: crash (SIGKILL)",
        "note: dump /d/x.tdump: 7 events",
    ] {
        assert!(text.contains(needle), "{needle} in\n{text}");
    }
}
