//! Repeats and interleaving: the one median of the project (the bench's, re-exported), and the rotating order in which
//! systems take turns.

pub use tailtrim_bench::report::median;

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
    fn median_of_the_present_values() {
        assert_eq!(median(&[]), 0.0);
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
