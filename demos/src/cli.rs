//! Command-line parsing for the examples: `--flag value` or `--flag=value`, switches, and
//! exit status 2 with a message on bad input.

use std::str::FromStr;

/// The arguments after the program name, split into `(flag, inline value)` pairs.
#[derive(Debug)]
pub struct Args {
    args: std::vec::IntoIter<String>,
}

impl Args {
    /// The process's arguments.
    pub fn from_env() -> Args {
        Args::new(std::env::args().skip(1).collect())
    }

    /// Given arguments (without the program name).
    pub fn new(args: Vec<String>) -> Args {
        Args {
            args: args.into_iter(),
        }
    }

    /// The next flag and its inline (`--flag=value`) value, if any.
    pub fn next_flag(&mut self) -> Option<Result<(String, Option<String>), String>> {
        let arg = self.args.next()?;
        if !arg.starts_with("--") {
            return Some(Err(format!("unexpected argument `{arg}`")));
        }
        Some(Ok(match arg.split_once('=') {
            Some((flag, value)) => (flag.to_string(), Some(value.to_string())),
            None => (arg, None),
        }))
    }

    /// The value of `flag`: its inline value or the next argument, parsed.
    pub fn value<T: FromStr>(&mut self, flag: &str, inline: Option<String>) -> Result<T, String>
    where
        T::Err: std::fmt::Display,
    {
        let raw = inline
            .or_else(|| self.args.next())
            .ok_or_else(|| format!("{flag} needs a value"))?;
        raw.parse()
            .map_err(|e| format!("{flag}: invalid value `{raw}`: {e}"))
    }
}

/// Prints `message` and the usage to stderr and exits with status 2.
pub fn fail(usage: &str, message: &str) -> ! {
    eprintln!("error: {message}\n\nusage: {usage}");
    std::process::exit(2)
}

/// A comma-separated list of values for `flag`, such as `10000,100000`.
pub fn list<T: FromStr>(flag: &str, raw: &str) -> Result<Vec<T>, String>
where
    T::Err: std::fmt::Display,
{
    raw.split(',')
        .map(|item| {
            item.trim()
                .parse()
                .map_err(|e| format!("{flag}: invalid value `{item}`: {e}"))
        })
        .collect()
}
