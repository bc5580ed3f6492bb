//! `--batch VAR=LO..HI` or `VAR=LIST`: the variable, its values, and how a value reaches the program.

use std::ffi::OsString;
use std::fmt;

/// The values `--batch` may try, smallest first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Values {
    /// Every integer from `lo` to `hi` (`lo >= 1`, `lo < hi`).
    Range { lo: u64, hi: u64 },
    /// These, increasing, at least two.
    List(Vec<u64>),
}

impl Values {
    /// How many values there are.
    pub fn len(&self) -> u64 {
        match self {
            Values::Range { lo, hi } => hi - lo + 1,
            Values::List(v) => v.len() as u64,
        }
    }

    /// The `i`-th value.
    pub fn at(&self, i: u64) -> u64 {
        match self {
            Values::Range { lo, .. } => lo + i,
            Values::List(v) => v[i as usize],
        }
    }

    /// Where the largest value at most `value` is (the first when `value` is below them all).
    pub fn index_at_most(&self, value: u64) -> u64 {
        match self {
            Values::Range { lo, hi } => value.clamp(*lo, *hi) - lo,
            Values::List(v) => v.iter().rposition(|&x| x <= value).unwrap_or(0) as u64,
        }
    }

    /// Where `value` is, if it is one of them.
    pub fn index_of(&self, value: u64) -> Option<u64> {
        match self {
            Values::Range { lo, hi } => (*lo..=*hi).contains(&value).then(|| value - lo),
            Values::List(v) => v.iter().position(|&x| x == value).map(|i| i as u64),
        }
    }
}

/// A parsed `--batch`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BatchSpec {
    /// The environment variable, and `{VAR}` in the command.
    pub var: String,
    pub values: Values,
}

impl BatchSpec {
    /// Reads `BS=1..512` or `BS=8,16,32`; the error names the input and shows the right form.
    pub fn parse(text: &str) -> Result<BatchSpec, String> {
        let form = "give VAR=LO..HI (e.g. BS=1..256) or VAR=LIST (e.g. BS=8,16,24,32)";
        let Some((var, values)) = text.split_once('=') else {
            return Err(format!("--batch {text:?}: no '='; {form}"));
        };
        let var = var.trim();
        let identifier = var.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && var.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !identifier {
            return Err(format!("--batch {text:?}: {var:?} is not an environment variable name (letters, digits, _); {form}"));
        }
        let number = |s: &str| -> Result<u64, String> {
            s.trim().parse::<u64>().map_err(|_| format!("--batch {text:?}: {:?} is not a whole number; {form}", s.trim()))
        };
        let values = if let Some((lo, hi)) = values.split_once("..") {
            let (lo, hi) = (number(lo)?, number(hi)?);
            if lo == 0 || lo >= hi {
                return Err(format!("--batch {text:?}: the range must run from at least 1 up to a larger value, e.g. {var}=1..{}", hi.max(64)));
            }
            Values::Range { lo, hi }
        } else {
            let list = values.split(',').map(number).collect::<Result<Vec<u64>, String>>()?;
            if list.len() < 2 || list.windows(2).any(|w| w[0] >= w[1]) {
                return Err(format!("--batch {text:?}: a list holds at least two values, increasing, e.g. {var}=8,16,24,32"));
            }
            Values::List(list)
        };
        Ok(BatchSpec { var: var.to_string(), values })
    }

    /// `{VAR}` replaced by `value` in each argument (arguments that are not UTF-8 are kept as they are).
    pub fn substitute(&self, args: &[OsString], value: u64) -> Vec<OsString> {
        let placeholder = self.placeholder();
        args.iter()
            .map(|a| match a.to_str() {
                Some(s) if s.contains(&placeholder) => OsString::from(s.replace(&placeholder, &value.to_string())),
                _ => a.clone(),
            })
            .collect()
    }

    /// Whether `{VAR}` appears in the command.
    pub fn appears_in(&self, args: &[OsString]) -> bool {
        args.iter().any(|a| a.to_str().is_some_and(|s| s.contains(&self.placeholder())))
    }

    fn placeholder(&self) -> String {
        format!("{{{}}}", self.var)
    }
}

impl fmt::Display for BatchSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.values {
            Values::Range { lo, hi } => write!(f, "{}={lo}..{hi}", self.var),
            Values::List(v) => write!(f, "{}={}", self.var, v.iter().map(u64::to_string).collect::<Vec<_>>().join(",")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_and_lists_are_read() {
        assert_eq!(BatchSpec::parse("BS=1..512").unwrap().values, Values::Range { lo: 1, hi: 512 });
        assert_eq!(BatchSpec::parse("MICRO_BS=8, 16,32").unwrap().values, Values::List(vec![8, 16, 32]));
        assert_eq!(BatchSpec::parse("BS=1..512").unwrap().to_string(), "BS=1..512");
        let values = Values::List(vec![8, 16, 32]);
        assert_eq!((values.len(), values.at(2), values.index_of(16), values.index_of(9)), (3, 32, Some(1), None));
        assert_eq!([1, 8, 20, 99].map(|v| values.index_at_most(v)), [0, 0, 1, 2]);
        let range = Values::Range { lo: 4, hi: 9 };
        assert_eq!((range.len(), range.at(2), range.index_of(9), range.index_of(10)), (6, 6, Some(5), None));
        assert_eq!([1, 5, 99].map(|v| range.index_at_most(v)), [0, 1, 5]);
    }

    #[test]
    fn bad_specs_name_the_input_and_the_form() {
        for (spec, says) in [
            ("BS", "no '='"),
            ("1BS=1..4", "not an environment variable name"),
            ("BS=0..8", "from at least 1"),
            ("BS=8..8", "from at least 1"),
            ("BS=1..x", "\"x\" is not a whole number"),
            ("BS=8", "at least two values"),
            ("BS=16,8", "increasing"),
        ] {
            let err = BatchSpec::parse(spec).unwrap_err();
            assert!(err.contains(&format!("{spec:?}")) && err.contains(says), "{spec}: {err}");
        }
    }

    #[test]
    fn the_value_replaces_the_placeholder_in_every_argument() {
        let spec = BatchSpec::parse("BS=1..8").unwrap();
        let args: Vec<OsString> = ["train.py", "--batch={BS}", "--tag", "bs{BS}x{BS}", "{bs}"].map(OsString::from).to_vec();
        assert!(spec.appears_in(&args));
        let got = spec.substitute(&args, 12);
        assert_eq!(got, ["train.py", "--batch=12", "--tag", "bs12x12", "{bs}"].map(OsString::from).to_vec());
        assert!(!spec.appears_in(&got));
    }
}
