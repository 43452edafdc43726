//! Which settings two test specs differ in, each named by its path in the spec's JSON
//! (`socket.window`): what a resumed sweep says of a saved run made with other flags, and what
//! a deployment says of a run that did not run as planned. Not a general JSON diff: objects
//! are walked key by key, and any other value that differs is one difference.

use serde_json::Value;
use xbench::config::TestSpec;

/// The settings in which `a` and `b` differ, in path order, each as `PATH: A_WORD a, B_WORD b`
/// with `words` = `[A_WORD, B_WORD]` (`end.duration: saved 10.0, now 5.0`); empty when they
/// agree, `None` when either spec does not serialize.
pub fn spec_differences(a: &TestSpec, b: &TestSpec, words: [&str; 2]) -> Option<Vec<String>> {
    let (Ok(a), Ok(b)) = (serde_json::to_value(a), serde_json::to_value(b)) else {
        return None;
    };
    let mut out = Vec::new();
    walk("", &a, &b, words, &mut out);
    Some(out)
}

fn walk(path: &str, a: &Value, b: &Value, words: [&str; 2], out: &mut Vec<String>) {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            for k in keys {
                let p = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                let null = Value::Null;
                let (x, y) = (x.get(k).unwrap_or(&null), y.get(k).unwrap_or(&null));
                walk(&p, x, y, words, out);
            }
        }
        _ if a != b => {
            let [wa, wb] = words;
            out.push(format!("{path}: {wa} {a}, {wb} {b}"));
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A nested setting is named by its whole path, a setting one side lacks is compared with
    /// null, and the words say which side is which.
    #[test]
    fn a_difference_names_its_path_and_both_sides() {
        let a = TestSpec::throughput();
        let mut b = TestSpec::throughput();
        b.socket.window = Some(262_144);
        assert_eq!(
            spec_differences(&a, &b, ["ran", "planned"]).unwrap(),
            ["socket.window: ran null, planned 262144"]
        );
        assert_eq!(spec_differences(&a, &a, ["ran", "planned"]), Some(vec![]));
    }
}
