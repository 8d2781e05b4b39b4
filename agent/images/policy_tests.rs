use super::*;

const S: Duration = Duration::from_secs(1);

fn listed(id: &str, size: u64, pinned: bool) -> Listed {
    Listed { id: id.into(), size, pinned }
}

fn set(ids: &[&str]) -> HashSet<String> {
    ids.iter().map(|s| s.to_string()).collect()
}

#[test]
fn policy_validation() {
    let m2 = Duration::from_secs(120);
    // (case, high, low, min age, max age, the error's start or None)
    type Case<'a> = (&'a str, i64, i64, Duration, Duration, Option<&'a str>);
    let cases: [Case; 7] = [
        ("the kubelet's defaults", 85, 80, m2, Duration::ZERO, None),
        ("100 disables, still valid", 100, 80, m2, Duration::ZERO, None),
        ("high over 100", 101, 80, m2, Duration::ZERO, Some("--image-gc-high-threshold 101")),
        ("negative low", 85, -1, m2, Duration::ZERO, Some("--image-gc-low-threshold -1")),
        ("low equal to high", 80, 80, m2, Duration::ZERO, Some("--image-gc-low-threshold 80 must be less")),
        ("max age not over min age", 85, 80, m2, m2, Some("--image-maximum-gc-age")),
        ("max age over min age", 85, 80, m2, 3 * m2, None),
    ];
    for (name, high, low, min, max, want) in cases {
        match (Policy::new(high, low, min, max), want) {
            (Ok(_), None) => {}
            (Err(e), Some(w)) => assert!(e.starts_with(w), "{name}: {e}"),
            (got, want) => panic!("{name}: got {got:?}, want {want:?}"),
        }
    }
    assert!(!Policy::new(100, 80, m2, Duration::ZERO).unwrap().enabled());
    assert!(Policy::default().enabled());
}

#[test]
fn bytes_to_free_follows_the_kubelet_arithmetic() {
    let p = Policy { high_percent: 85, low_percent: 80, ..Policy::default() };
    // (case, capacity, available, wanted)
    let cases = [
        ("under the high threshold", 1000, 200, None),
        ("at the high threshold: down to the low one", 1000, 150, Some(50)),
        ("full", 1000, 0, Some(200)),
        ("available over capacity counts as capacity", 1000, 5000, None),
        ("no capacity: nothing to compute", 0, 0, None),
    ];
    for (name, capacity, available, want) in cases {
        assert_eq!(p.bytes_to_free(capacity, available), want, "{name}");
    }
}

#[test]
fn eviction_order_and_eligibility() {
    let t0 = Instant::now();
    let mut r = Records::default();
    // First seen together: old-used, never-used, pinned, in-use.
    let all = [
        listed("a", 10, false),
        listed("b", 20, false),
        listed("pause", 1, true),
        listed("run", 5, false),
        listed("sandbox", 2, false),
    ];
    r.detect(&all, &set(&["a", "run"]), t0);
    // Later "c" appears, and "a" stops being used.
    let mut later = all.to_vec();
    later.push(listed("c", 30, false));
    r.detect(&later, &set(&["run"]), t0 + 10 * S);
    let in_use = set(&["run"]);
    let protected = set(&["sandbox"]);
    let order: Vec<String> = r.eviction_order(&in_use, &protected).into_iter().map(|c| c.id).collect();
    // Never used first (b before c: detected first), then a (last used at t0).
    assert_eq!(order, ["b", "c", "a"]);

    // The minimum age keeps c (first seen 30 s ago) with a 31 s minimum; b and a are old enough.
    let p = Policy { min_age: 31 * S, ..Policy::default() };
    let now = t0 + 40 * S;
    let ids = |v: Vec<Candidate>| v.into_iter().map(|c| c.id).collect::<Vec<_>>();
    assert_eq!(ids(removable_for_space(r.eviction_order(&in_use, &protected), &p, now)), ["b", "a"]);
    let p0 = Policy { min_age: Duration::ZERO, ..Policy::default() };
    assert_eq!(ids(removable_for_space(r.eviction_order(&in_use, &protected), &p0, now)), ["b", "c", "a"]);

    // An image gone from the runtime is forgotten.
    r.detect(&later[1..], &in_use, now);
    assert_eq!(r.ids(), ["b", "c", "pause", "run", "sandbox"]);
    r.forget("b");
    assert_eq!(r.ids(), ["c", "pause", "run", "sandbox"]);
}

#[test]
fn maximum_age() {
    let t0 = Instant::now();
    let mut r = Records::default();
    r.detect(&[listed("used", 1, false), listed("never", 1, false)], &set(&["used"]), t0);
    r.detect(
        &[listed("used", 1, false), listed("never", 1, false), listed("new", 1, false)],
        &set(&["used"]),
        t0 + 50 * S,
    );
    let order = || r.eviction_order(&set(&[]), &set(&[]));
    let ids = |v: &[Candidate]| v.iter().map(|c| c.id.clone()).collect::<Vec<_>>();
    let p = Policy { max_age: Some(60 * S), ..Policy::default() };
    // (case, now, began, removed, kept)
    type Case<'a> = (&'a str, Duration, Duration, &'a [&'a str], &'a [&'a str]);
    let cases: [Case; 4] = [
        (
            "agent up for less than the maximum age: nothing",
            59 * S,
            Duration::ZERO,
            &[],
            &["never", "new", "used"],
        ),
        (
            "never used counts as unused for ever; used 20 s ago is kept",
            70 * S,
            Duration::ZERO,
            &["never", "new"],
            &["used"],
        ),
        ("used 61 s ago: removed too", 111 * S, Duration::ZERO, &["never", "new", "used"], &[]),
        ("off", 1000 * S, Duration::ZERO, &[], &["never", "new", "used"]),
    ];
    for (i, (name, now, began, removed, kept)) in cases.into_iter().enumerate() {
        let policy = if i == 3 { Policy { max_age: None, ..p } } else { p };
        let (old, rest) = too_old(order(), &policy, t0 + now, t0 + began);
        assert_eq!(
            (ids(&old), ids(&rest)),
            (removed.iter().map(|s| s.to_string()).collect(), kept.iter().map(|s| s.to_string()).collect()),
            "{name}"
        );
    }
}
