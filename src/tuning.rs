//! Tuning overrides from the environment (`KEISAN_*`): launch shapes and kernel choices for
//! measurement runs on a GPU host, without a rebuild. Unset: the solver's default. Set but
//! not valid: an error naming the variable (exit 2), never a quiet fall-back to the
//! default — a timing taken with an override that did not take would be mislabelled.

use std::fmt::Display;
use std::ops::RangeInclusive;
use std::str::FromStr;

use crate::error::{Error, Result};

/// `name`'s value through `parse`, if set; `expect` says what is valid.
pub fn knob<T>(name: &str, expect: &str, parse: impl Fn(&str) -> Option<T>) -> Result<Option<T>> {
    match std::env::var(name) {
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(v)) => {
            Err(Error::invalid(name, v.to_string_lossy(), expect))
        }
        Ok(v) => parse(v.trim())
            .map(Some)
            .ok_or_else(|| Error::invalid(name, &v, expect)),
    }
}

/// A number in `range`.
pub fn number<T>(name: &str, range: RangeInclusive<T>) -> Result<Option<T>>
where
    T: FromStr + PartialOrd + Display,
{
    let expect = format!("a whole number in {}..={}", range.start(), range.end());
    knob(name, &expect, |v| {
        v.parse().ok().filter(|x| range.contains(x))
    })
}

/// A number no smaller than `min`.
pub fn at_least<T>(name: &str, min: T) -> Result<Option<T>>
where
    T: FromStr + PartialOrd + Display,
{
    let expect = format!("a whole number >= {min}");
    knob(name, &expect, |v| v.parse().ok().filter(|x| *x >= min))
}

/// Two numbers written `A<sep>B` (e.g. `32x8`, `2,16`), the pair accepted by `valid`.
pub fn pair<A: FromStr, B: FromStr>(
    name: &str,
    sep: char,
    expect: &str,
    valid: impl Fn(&A, &B) -> bool,
) -> Result<Option<(A, B)>> {
    knob(name, expect, |v| {
        let (a, b) = v.split_once(sep)?;
        let (a, b) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
        valid(&a, &b).then_some((a, b))
    })
}

/// `0` or `1`.
pub fn switch(name: &str) -> Result<Option<bool>> {
    either(name, "0", "1")
}

/// One of two words: `off` (false) or `on` (true).
pub fn either(name: &str, off: &str, on: &str) -> Result<Option<bool>> {
    knob(name, &format!("{off} or {on}"), |v| match v {
        _ if v == off => Some(false),
        _ if v == on => Some(true),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    // Each test owns its variable: tests run in parallel within this binary.
    #[test]
    fn unset_is_none_and_set_values_parse() {
        assert_eq!(
            number::<usize>("KEISAN_TEST_TUNING_UNSET", 1..=4).unwrap(),
            None
        );
        // SAFETY: only this test reads or writes this variable.
        unsafe { std::env::set_var("KEISAN_TEST_TUNING_N", " 3 ") };
        assert_eq!(
            number::<usize>("KEISAN_TEST_TUNING_N", 1..=4).unwrap(),
            Some(3)
        );
        unsafe { std::env::set_var("KEISAN_TEST_TUNING_P", "64x2") };
        let p = pair::<u32, u32>("KEISAN_TEST_TUNING_P", 'x', "AxB", |a, _| a % 32 == 0).unwrap();
        assert_eq!(p, Some((64, 2)));
        unsafe { std::env::set_var("KEISAN_TEST_TUNING_S", "0") };
        assert_eq!(switch("KEISAN_TEST_TUNING_S").unwrap(), Some(false));
    }

    #[test]
    fn a_value_that_does_not_take_is_an_error_naming_the_variable() {
        // SAFETY: only this test reads or writes these variables.
        unsafe { std::env::set_var("KEISAN_TEST_TUNING_BAD_N", "9") };
        let e = number::<usize>("KEISAN_TEST_TUNING_BAD_N", 1..=4).unwrap_err();
        assert!(e.to_string().contains("KEISAN_TEST_TUNING_BAD_N"), "{e}");
        assert!(e.to_string().contains("1..=4"), "{e}");
        unsafe { std::env::set_var("KEISAN_TEST_TUNING_BAD_P", "48x2") };
        let e = pair::<u32, u32>(
            "KEISAN_TEST_TUNING_BAD_P",
            'x',
            "AxB, A a multiple of 32",
            |a, _| a % 32 == 0,
        )
        .unwrap_err();
        assert!(e.to_string().contains("KEISAN_TEST_TUNING_BAD_P"), "{e}");
        unsafe { std::env::set_var("KEISAN_TEST_TUNING_BAD_S", "yes") };
        assert!(switch("KEISAN_TEST_TUNING_BAD_S").is_err());
    }
}
