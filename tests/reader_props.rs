//! Property tests of the reproducer's readers of files a user hands over: scenarios,
//! schedules and profiles. Truncations, single flipped bytes and random bytes must give an
//! error naming the file, never a panic, and never an allocation beyond a multiple of the
//! file's length. (The dump reader's are tracedump's: tracedump/tests/dump_props.rs.)
#[path = "common/read_back.rs"]
mod read_back;

use std::path::PathBuf;

use proptest::prelude::*;

use read_back::read_back;

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn scenario_schedule_profile_damaged(seed in any::<u64>(), mode in 0u8..3, which in 0u8..3) {
        let (name, good): (&str, Vec<u8>) = match which {
            0 => ("s.toml", scenario_text().into_bytes()),
            1 => ("f.toml", schedule_text().into_bytes()),
            _ => ("p.json", profile_bytes()),
        };
        let bytes = damage(&good, seed, mode);
        let len = bytes.len();
        let outcome = match which {
            0 => read_back(&bytes, name, reproducer::model::scenario::Scenario::load),
            1 => read_back(&bytes, name, reproducer::model::schedule::Schedule::load),
            _ => read_back(&bytes, name, reproducer::analysis::profile::load),
        };
        if let Some(err) = &outcome.0 {
            prop_assert!(err.contains(name), "{}", err);
        }
        prop_assert!(outcome.1 <= 64 * len + (1 << 16), "allocated {} bytes reading {} bytes", outcome.1, len);
    }
}

/// `good` cut short (mode 0), with one byte flipped (1), or replaced by random bytes (2).
fn damage(good: &[u8], seed: u64, mode: u8) -> Vec<u8> {
    let mut x = seed | 1;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    match mode {
        0 => good[..(next() as usize) % good.len()].to_vec(),
        1 => {
            let mut b = good.to_vec();
            let at = (next() as usize) % b.len();
            b[at] ^= (next() % 255 + 1) as u8;
            b
        }
        _ => (0..(next() % 2048)).map(|_| next() as u8).collect(),
    }
}

fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn scenario_text() -> String {
    std::fs::read_to_string(workspace().join("tests/bugbench/nth-connect/scenario.toml")).unwrap()
}

fn schedule_text() -> String {
    std::fs::read_to_string(workspace().join("tests/bugbench/nth-connect/truth.toml")).unwrap()
}

fn profile_bytes() -> Vec<u8> {
    let scenario = reproducer::model::scenario::Scenario::load(
        &workspace().join("tests/bugbench/nth-connect/scenario.toml"),
    )
    .unwrap();
    let profile = reproducer::analysis::profile::aggregate(&scenario, &[], &[], 0.5);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.json");
    reproducer::analysis::profile::write(&profile, &path).unwrap();
    std::fs::read(path).unwrap()
}

#[test]
fn samples_read_when_undamaged() {
    assert_eq!(
        read_back(
            scenario_text().as_bytes(),
            "s.toml",
            reproducer::model::scenario::Scenario::load
        )
        .0,
        None
    );
    assert_eq!(
        read_back(
            schedule_text().as_bytes(),
            "f.toml",
            reproducer::model::schedule::Schedule::load
        )
        .0,
        None
    );
    assert_eq!(
        read_back(&profile_bytes(), "p.json", reproducer::analysis::profile::load).0,
        None
    );
}
