//! One declaration per test option: its flags, value, help text and what it sets, and
//! the names it goes by in the other front ends (`fperf mesh`, the exporter's probe
//! query, an iperf3 client's parameters). Each transport declares its own options in a
//! table ([`crate::transport::tcp::options`]); the front ends make their flags and read
//! their parameters from it, so a new option reaches all of them at once. What the
//! options may be, together and against the run, stays in the settings' `validate`,
//! which every front end runs.

use serde_json::{Map, Value};

/// One capability a test may need of the peer beyond the protocol's major version:
/// declared beside the option that needs it, by its owner (a transport, or the test's
/// own in [`crate::settings`]); [`crate::features`] collects them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Feature {
    name: &'static str,
    option: &'static str,
    since_minor: u32,
}

impl Feature {
    /// The feature `name` on the wire, for the option a user gives as `option`, that
    /// peers of the protocol's first minor have.
    pub const fn new(name: &'static str, option: &'static str) -> Feature {
        Feature {
            name,
            option,
            since_minor: 0,
        }
    }

    /// This feature, brought by the protocol's minor version `minor`: peers of an older
    /// minor lack it.
    pub const fn since(self, minor: u32) -> Feature {
        Feature {
            since_minor: minor,
            ..self
        }
    }

    /// Its name on the wire.
    pub fn name(self) -> &'static str {
        self.name
    }

    /// The option a user gives for it, for messages.
    pub fn option(self) -> &'static str {
        self.option
    }

    /// The protocol minor version that brought it; peers of an older minor lack it.
    /// Minor 0 is what a peer that announces no features supports.
    pub fn since_minor(self) -> u32 {
        self.since_minor
    }
}

/// The value a flag that takes none is set with when given: on, as a probe's query
/// writes it.
pub const FLAG_GIVEN: &str = "1";

/// What an option's flag takes after it.
#[derive(Clone, Copy, Debug)]
pub enum Takes {
    /// Nothing: the flag alone turns the option on.
    Nothing,
    /// A value, shown in the help as `<NAME>`.
    Value(&'static str),
    /// A value that may be left out (`--flag` or `--flag=VALUE`): `missing` when it is.
    OptionalValue {
        name: &'static str,
        missing: &'static str,
    },
}

/// How `fperf mesh` takes an option.
#[derive(Clone, Copy, Debug)]
pub enum Mesh {
    /// Not at all.
    No,
    /// With the command line's help text: the same option, for every test of the mesh.
    AsClient,
    /// With this help text: the same option, for every test of the mesh.
    Help(&'static str),
}

/// How an iperf3 client sends an option in its parameters, under `key`.
#[derive(Clone, Copy, Debug)]
pub enum Iperf3 {
    /// Not at all.
    No,
    /// On when the key is present.
    Present(&'static str),
    /// On when the key is present and neither 0 nor false (iperf3 writes 1).
    Flag(&'static str),
    /// A whole number; 0 is what iperf3 sends for an option left out.
    Number(&'static str),
    /// A whole number, 0 included.
    Count(&'static str),
    /// A string.
    Text(&'static str),
}

/// One option of a test, setting a field of `T` (a transport's settings).
pub struct TestOption<T: 'static> {
    /// clap's name for it, as the other flags name it in their conflicts.
    pub id: &'static str,
    /// `--long`, without the dashes.
    pub long: &'static str,
    pub short: Option<char>,
    /// A hidden other spelling of `--long`.
    pub alias: Option<&'static str>,
    pub takes: Takes,
    /// The values it takes, when they are a fixed list.
    pub choices: &'static [&'static str],
    /// The command line's other flags it cannot go with, by their clap names.
    pub conflicts: &'static [&'static str],
    /// The command line's help: paragraphs apart by a blank line; `-h` shows the first
    /// without its closing period.
    pub help: &'static str,
    pub mesh: Mesh,
    /// Its name in the exporter's probe query, if a probe may set it.
    pub probe: Option<&'static str>,
    pub iperf3: Iperf3,
    /// What a value must be, for a probe's or an iperf3 client's refusal ("a number of
    /// bytes"); empty where a probe's refusal is the parser's own words (see
    /// [`apply_query`]).
    pub what: &'static str,
    /// Sets the option from its value ([`FLAG_GIVEN`] for [`Takes::Nothing`]); why the value is
    /// wrong otherwise.
    pub set: fn(&mut T, &str) -> Result<(), String>,
}

/// Which command line a flag is made for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Front {
    /// `fperf`'s own: under its topic's heading, and only in `--help`, not `-h`.
    Cli,
    /// `fperf mesh`'s.
    Mesh,
}

impl<T: Default + 'static> TestOption<T> {
    /// The flag as a user writes it: `--long`.
    pub fn flag(&self) -> String {
        format!("--{}", self.long)
    }

    /// The flag as the mesh's messages name it: `-S` where it has a short one.
    pub fn short_flag(&self) -> String {
        match self.short {
            Some(c) => format!("-{c}"),
            None => self.flag(),
        }
    }

    /// The value's name in the help (`BYTES`), if it takes one.
    pub fn value_name(&self) -> Option<&'static str> {
        match self.takes {
            Takes::Nothing => None,
            Takes::Value(name) | Takes::OptionalValue { name, .. } => Some(name),
        }
    }

    /// Its clap argument for `front`, whose value the argument keeps as given (checked
    /// by [`TestOption::set`]).
    pub fn arg(&'static self, front: Front) -> clap::Arg {
        let text = match (front, self.mesh) {
            (Front::Mesh, Mesh::Help(text)) => text,
            _ => self.help,
        };
        let (short, long) = help_texts(text);
        let mut arg = clap::Arg::new(self.id).long(self.long).help(short);
        if let Some(long) = long {
            arg = arg.long_help(long);
        }
        if let Some(c) = self.short {
            arg = arg.short(c);
        }
        if let Some(alias) = self.alias {
            arg = arg.alias(alias);
        }
        if front == Front::Cli {
            arg = arg.hide_short_help(true).conflicts_with_all(self.conflicts);
        }
        match self.takes {
            Takes::Nothing => return arg.action(clap::ArgAction::SetTrue),
            Takes::Value(name) => arg = arg.value_name(name),
            Takes::OptionalValue { name, missing } => {
                arg = arg
                    .value_name(name)
                    .num_args(0..=1)
                    .default_missing_value(missing)
            }
        }
        let arg = arg.action(clap::ArgAction::Set);
        if self.choices.is_empty() {
            let set = self.set;
            arg.value_parser(move |text: &str| {
                set(&mut T::default(), text).map(|()| text.to_owned())
            })
        } else {
            arg.value_parser(clap::builder::PossibleValuesParser::new(self.choices))
        }
    }

    /// The option's value in `matches`, as given ([`FLAG_GIVEN`] for a flag), if it was.
    fn given(&self, matches: &clap::ArgMatches) -> Option<String> {
        match self.takes {
            Takes::Nothing => matches.get_flag(self.id).then(|| FLAG_GIVEN.to_owned()),
            _ => matches.get_one::<String>(self.id).cloned(),
        }
    }
}

/// The options of one table given on a command line, with their values as given.
pub struct Given<T: 'static> {
    values: Vec<(&'static TestOption<T>, String)>,
}

impl<T: Default + 'static> Given<T> {
    /// Adds `options`' arguments for `front` to `cmd`.
    pub fn augment(
        cmd: clap::Command,
        options: impl IntoIterator<Item = &'static TestOption<T>>,
        front: Front,
    ) -> clap::Command {
        options
            .into_iter()
            .fold(cmd, |cmd, option| cmd.arg(option.arg(front)))
    }

    /// The options of `options` that `matches` holds.
    pub fn from_matches(
        matches: &clap::ArgMatches,
        options: impl IntoIterator<Item = &'static TestOption<T>>,
    ) -> Given<T> {
        let values = options
            .into_iter()
            .filter_map(|option| option.given(matches).map(|value| (option, value)))
            .collect();
        Given { values }
    }

    /// The flags given, as `--long`.
    pub fn flags(&self) -> Vec<String> {
        self.values
            .iter()
            .map(|(option, _)| option.flag())
            .collect()
    }

    /// Whether the option of clap name `id` was given.
    pub fn has(&self, id: &str) -> bool {
        self.values.iter().any(|(option, _)| option.id == id)
    }

    /// Sets every option given on `target` (their values were checked as they were
    /// parsed).
    pub fn apply(&self, target: &mut T) -> Result<(), String> {
        for (option, value) in &self.values {
            (option.set)(target, value)?;
        }
        Ok(())
    }
}

impl<T: 'static> std::fmt::Debug for Given<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.values.iter().map(|(o, v)| (o.id, v)))
            .finish()
    }
}

/// `(help, long help)` of a help text as clap's derive makes them of a doc comment: the
/// first paragraph without its closing period, and the whole text when there is more
/// than one paragraph.
pub fn help_texts(text: &str) -> (String, Option<String>) {
    match text.split_once("\n\n") {
        Some((first, _)) => (remove_period(first), Some(text.to_owned())),
        None => (remove_period(text), None),
    }
}

fn remove_period(text: &str) -> String {
    match text.strip_suffix('.') {
        Some(rest) if !rest.ends_with('.') => rest.to_owned(),
        _ => text.to_owned(),
    }
}

/// Sets on `target` each option of `options` that a probe's query names (`get` finds a
/// parameter's value); a value it cannot take is refused as "`key` must be `what`", or
/// where the option says no `what`, in the parser's words, after "`key`: " unless they
/// name the option already.
pub fn apply_query<'a, T: Default + 'static>(
    options: impl IntoIterator<Item = &'static TestOption<T>>,
    get: impl Fn(&str) -> Option<&'a str>,
    target: &mut T,
) -> Result<(), String> {
    for option in options {
        let (Some(key), Some(text)) = (option.probe, option.probe.and_then(&get)) else {
            continue;
        };
        (option.set)(target, text).map_err(|e| match option.what {
            "" if e.starts_with(&option.flag()) => e,
            "" => format!("{key}: {e}"),
            what => format!("{key} must be {what}, not {text:?}"),
        })?;
    }
    Ok(())
}

/// Why an iperf3 client's parameter was refused: its key, what it must be, and the
/// value it had.
pub type Iperf3Refusal = (&'static str, &'static str, Value);

/// Sets on `target` each option of `options` that an iperf3 client's `params` hold.
pub fn apply_iperf3<T: Default + 'static>(
    options: impl IntoIterator<Item = &'static TestOption<T>>,
    params: &Map<String, Value>,
    target: &mut T,
) -> Result<(), Iperf3Refusal> {
    for option in options {
        let (key, value) = match option.iperf3 {
            Iperf3::No => continue,
            Iperf3::Present(key)
            | Iperf3::Flag(key)
            | Iperf3::Number(key)
            | Iperf3::Count(key)
            | Iperf3::Text(key) => match params.get(key) {
                Some(value) => (key, value),
                None => continue,
            },
        };
        let text = match (option.iperf3, value) {
            (Iperf3::Present(_), _) => FLAG_GIVEN.to_owned(),
            (Iperf3::Flag(_), v) if v.as_u64() == Some(0) || v.as_bool() == Some(false) => continue,
            (Iperf3::Flag(_), _) => FLAG_GIVEN.to_owned(),
            (Iperf3::Number(_), Value::Number(n)) if n.as_u64() == Some(0) => continue,
            (Iperf3::Number(_) | Iperf3::Count(_), Value::Number(n)) => match n.as_u64() {
                Some(v) => v.to_string(),
                None => return Err((key, "a whole number in range", value.clone())),
            },
            (Iperf3::Number(_) | Iperf3::Count(_), _) => {
                return Err((key, "a whole number", value.clone()))
            }
            (Iperf3::Text(_), Value::String(text)) => text.clone(),
            _ => return Err((key, option.what, value.clone())),
        };
        (option.set)(target, &text).map_err(|_| {
            let what = match option.iperf3 {
                Iperf3::Number(_) | Iperf3::Count(_) => "a whole number in range",
                _ => option.what,
            };
            (key, what, value.clone())
        })?;
    }
    Ok(())
}

/// A whole number within `least..=most`, refused as the command line refuses one for
/// its other flags, so that a declared option reads as they do.
pub fn whole_number(text: &str, least: i64, most: i64) -> Result<i64, String> {
    let value = text.parse::<i64>().map_err(|e| {
        plain_number_error(&e)
            .map(str::to_owned)
            .unwrap_or_else(|| e.to_string())
    })?;
    if !(least..=most).contains(&value) {
        return Err(format!("{value} is not in {least}..={most}"));
    }
    Ok(value)
}

/// Rust's own words for a number that does not parse ("invalid digit found in
/// string"), in users' words.
pub fn plain_number_error(e: &std::num::ParseIntError) -> Option<&'static str> {
    use std::num::IntErrorKind;
    match e.kind() {
        IntErrorKind::Empty => Some("a whole number is needed"),
        IntErrorKind::InvalidDigit => Some("not a whole number"),
        IntErrorKind::PosOverflow | IntErrorKind::NegOverflow => Some("too large a number"),
        _ => None,
    }
}

/// `items` as a sentence's list: `a`, `a and b`, `a, b and c`.
pub fn and_list(items: &[String]) -> String {
    match items {
        [] => String::new(),
        [one] => one.clone(),
        [first @ .., last] => format!("{} and {last}", first.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn help_texts_are_as_clap_derives_them_from_doc_comments() {
        assert_eq!(help_texts("One line."), ("One line".into(), None));
        assert_eq!(
            help_texts("First.\n\nSecond."),
            ("First".into(), Some("First.\n\nSecond.".into()))
        );
        assert_eq!(help_texts("Ends in..."), ("Ends in...".into(), None));
    }

    #[test]
    fn whole_numbers_are_refused_as_clap_refuses_them() {
        assert_eq!(whole_number("7", 1, 9), Ok(7));
        assert_eq!(
            whole_number("0", 1, 9),
            Err("0 is not in 1..=9".to_string())
        );
        assert_eq!(
            whole_number("1K", 1, 9),
            Err("not a whole number".to_string())
        );
    }

    #[test]
    fn lists_read_as_sentences() {
        let list =
            |items: &[&str]| and_list(&items.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert_eq!(list(&["a"]), "a");
        assert_eq!(list(&["a", "b"]), "a and b");
        assert_eq!(list(&["a", "b", "c"]), "a, b and c");
    }
}
