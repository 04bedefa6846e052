//! Repeats and interleaving: the one median of the project, and the rotating order in which
//! systems take turns.

/// Median of `values`: the middle value of an odd count, the mean of the two middle values
/// of an even count (the conventional definition); 0 when empty. NaNs sort last.
#[must_use]
pub fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let middle = sorted.len() / 2;
    match sorted.len() {
        0 => 0.0,
        count if count % 2 == 1 => sorted[middle],
        _ => (sorted[middle - 1] + sorted[middle]) / 2.0,
    }
}

/// Median of the values that are present; `None` when none is.
#[must_use]
pub fn median_of_present(values: impl IntoIterator<Item = Option<f64>>) -> Option<f64> {
    let present: Vec<f64> = values.into_iter().flatten().collect();
    (!present.is_empty()).then(|| median(&present))
}

/// The order in which `systems` run in round `round`: rotated by one each round (A B C,
/// B C A, C A B, …), so no system is always first after a rate change or always right after
/// the same neighbour.
#[must_use]
pub fn interleaved_order(systems: usize, round: usize) -> Vec<usize> {
    (0..systems)
        .map(|position| (position + round) % systems.max(1))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::{interleaved_order, median, median_of_present};

    #[test]
    fn median_of_odd_counts_is_the_middle_value() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[7.0]), 7.0);
        assert_eq!(median(&[5.0, 1.0, 9.0, 3.0, 7.0]), 5.0);
    }

    #[test]
    fn median_of_even_counts_is_the_mean_of_the_two_middle_values() {
        // The upper-middle convention would give 3, the lower-middle one 2.
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median(&[10.0, 20.0]), 15.0);
    }

    #[test]
    fn median_of_nothing_is_zero_and_nans_sort_last() {
        assert_eq!(median(&[]), 0.0);
        assert_eq!(median(&[f64::NAN, 1.0, 2.0]), 2.0);
        assert_eq!(median_of_present([None, Some(4.0), Some(2.0)]), Some(3.0));
        assert_eq!(median_of_present([None, None]), None);
    }

    #[test]
    fn interleaving_rotates_and_covers_every_system() {
        for round in 0..6 {
            let mut order = interleaved_order(5, round);
            assert_eq!(order[0], round % 5);
            order.sort_unstable();
            assert_eq!(order, vec![0, 1, 2, 3, 4]);
        }
        // Every system is first once in as many rounds as there are systems.
        let firsts: Vec<usize> = (0..3).map(|round| interleaved_order(3, round)[0]).collect();
        assert_eq!(firsts, vec![0, 1, 2]);
        assert!(interleaved_order(0, 3).is_empty());
    }
}
