use super::{Ids, permute48, random_seed};

#[test]
fn the_permutation_is_a_bijection_on_a_counter_range() {
    let mut seen = std::collections::HashSet::new();
    for n in 0..100_000 {
        assert!(seen.insert(permute48(n, 0x1234_5678_9abc_def0)));
    }
    let id = format!("{:012x}", permute48(7, random_seed()));
    assert_eq!(id.len(), 12);
}

#[test]
fn ids_are_unique_short_lowercase_hex_in_start_order() {
    let ids = Ids::new();
    let mut seen = std::collections::HashSet::new();
    for expected_seq in 0..1_000 {
        let (seq, id) = ids.next();
        assert_eq!(seq, expected_seq);
        assert_eq!(id.len(), 12, "{id}");
        assert!(
            id.chars()
                .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()),
            "{id}"
        );
        assert!(seen.insert(id));
    }
}
