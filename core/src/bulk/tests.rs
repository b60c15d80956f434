use super::*;

fn fits_anthropic(id: &str) -> bool {
    crate::provider::anthropic::bulk_id_fits(id)
}

/// Ids, as a table: (ids, what each is filed under).
#[test]
fn an_id_that_fits_is_kept_and_one_that_does_not_is_mapped_never_refused() {
    let ids: Vec<String> = ["q1", "a.b", "café", "q1-x", ""]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
    let got = custom_ids(&ids, fits_anthropic);
    assert_eq!(got[0], "q1");
    assert_eq!(got[3], "q1-x");
    for (i, g) in got.iter().enumerate() {
        assert!(fits_anthropic(g), "{:?} → {g:?}", ids[i]);
    }
    let unique: HashSet<&String> = got.iter().collect();
    assert_eq!(unique.len(), got.len(), "{got:?}");
    // The same ids map the same way (a rerun plans the same batch).
    assert_eq!(custom_ids(&ids, fits_anthropic), got);
}

/// An item whose mapped id is already an item's own id gets another.
#[test]
fn a_mapped_id_never_takes_an_id_in_use() {
    let odd = "a.b".to_owned();
    let mapped = custom_ids(std::slice::from_ref(&odd), fits_anthropic)[0].clone();
    let ids = vec![mapped.clone(), odd];
    let got = custom_ids(&ids, fits_anthropic);
    assert_eq!(got[0], mapped);
    assert_ne!(got[1], mapped);
    assert!(fits_anthropic(&got[1]), "{got:?}");
}

/// One row: (sizes, max requests, max bytes, runs).
type SplitRow = (&'static [usize], usize, usize, &'static [(usize, usize)]);

/// Splits, as a table.
#[test]
fn items_are_split_by_count_and_bytes_in_order() {
    let table: &[SplitRow] = &[
        (&[], 10, 100, &[]),
        (&[10, 10, 10], 10, 100, &[(0, 3)]),
        (&[10, 10, 10], 2, 100, &[(0, 2), (2, 3)]),
        (&[60, 50, 40], 10, 100, &[(0, 1), (1, 3)]),
        // An item larger than the byte limit goes alone (the provider will say).
        (&[10, 500, 10], 10, 100, &[(0, 1), (1, 2), (2, 3)]),
        (
            &[1, 1, 1, 1, 1],
            1,
            100,
            &[(0, 1), (1, 2), (2, 3), (3, 4), (4, 5)],
        ),
    ];
    for (sizes, n, bytes, want) in table {
        assert_eq!(split(sizes, *n, *bytes), *want, "{sizes:?} {n} {bytes}");
    }
}
