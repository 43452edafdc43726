//! The AWS commercial regions a scenario may name, so a typo is caught before any AWS call
//! (and before credentials are needed), with a "did you mean" suggestion.
//!
//! Not a source of truth for what an account has enabled: opt-in regions still fail at AWS with
//! AWS's own message. The list is as of [`LIST_DATE`]; a newer region is refused until added here.

/// When [`KNOWN_REGIONS`] was last compared with AWS's list.
pub const LIST_DATE: &str = "2025-06-01";

/// Commercial AWS regions (no GovCloud, no China: they need separate accounts and endpoints).
pub const KNOWN_REGIONS: &[&str] = &[
    "us-east-1",
    "us-east-2",
    "us-west-1",
    "us-west-2",
    "af-south-1",
    "ap-east-1",
    "ap-east-2",
    "ap-south-1",
    "ap-south-2",
    "ap-southeast-1",
    "ap-southeast-2",
    "ap-southeast-3",
    "ap-southeast-4",
    "ap-southeast-5",
    "ap-southeast-7",
    "ap-northeast-1",
    "ap-northeast-2",
    "ap-northeast-3",
    "ca-central-1",
    "ca-west-1",
    "eu-central-1",
    "eu-central-2",
    "eu-west-1",
    "eu-west-2",
    "eu-west-3",
    "eu-south-1",
    "eu-south-2",
    "eu-north-1",
    "il-central-1",
    "me-south-1",
    "me-central-1",
    "mx-central-1",
    "sa-east-1",
];

/// The region Global Accelerator's API lives in, whatever region the endpoints are in.
pub const ACCELERATOR_API_REGION: &str = "us-west-2";

/// Whether `name` is a known region.
pub fn is_known(name: &str) -> bool {
    KNOWN_REGIONS.contains(&name)
}

/// The known region closest to `name` by edit distance, if it is close enough to be a typo.
pub fn suggest(name: &str) -> Option<&'static str> {
    KNOWN_REGIONS
        .iter()
        .map(|r| (edit_distance(name, r), *r))
        .filter(|(d, _)| *d <= 3)
        .min_by_key(|(d, _)| *d)
        .map(|(_, r)| r)
}

/// Each region of `regions` once, in first-use order: the order a scenario's and a plan's
/// regions are visited in.
pub fn distinct<'a>(regions: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for r in regions {
        if !out.iter().any(|o| o == r) {
            out.push(r.to_owned());
        }
    }
    out
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let subst = prev[j] + usize::from(ca != *cb);
            cur[j + 1] = subst.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggests_near_misses_only() {
        assert_eq!(suggest("us-east1"), Some("us-east-1"));
        assert_eq!(suggest("ap-southeast-22"), Some("ap-southeast-2"));
        assert_eq!(suggest("mars-north-1"), None);
        assert!(is_known("eu-west-2"));
    }
}
