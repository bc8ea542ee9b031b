//! Summaries of timed samples.

/// Per-operation times of one row, in microseconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Summary {
    /// Median.
    pub median_us: f64,
    /// Fastest sample.
    pub min_us: f64,
    /// 99th percentile (nearest rank).
    pub p99_us: f64,
    /// Mean.
    pub mean_us: f64,
    /// Number of samples.
    pub samples: usize,
}

impl Summary {
    /// Summarises `samples` (microseconds per operation); `None` when empty.
    pub fn of(samples: &[f64]) -> Option<Summary> {
        if samples.is_empty() {
            return None;
        }
        let mut s = samples.to_vec();
        s.sort_by(f64::total_cmp);
        let n = s.len();
        let median = if n % 2 == 1 {
            s[n / 2]
        } else {
            (s[n / 2 - 1] + s[n / 2]) / 2.0
        };
        let rank = ((0.99 * n as f64).ceil() as usize).clamp(1, n);
        Some(Summary {
            median_us: median,
            min_us: s[0],
            p99_us: s[rank - 1],
            mean_us: s.iter().sum::<f64>() / n as f64,
            samples: n,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_min_p99() {
        let v: Vec<f64> = (1..=100).rev().map(f64::from).collect();
        let s = Summary::of(&v).unwrap();
        assert_eq!((s.median_us, s.min_us, s.p99_us), (50.5, 1.0, 99.0));
        assert_eq!(s.mean_us, 50.5);
        let one = Summary::of(&[3.0]).unwrap();
        assert_eq!((one.median_us, one.p99_us), (3.0, 3.0));
        assert!(Summary::of(&[]).is_none());
    }
}
