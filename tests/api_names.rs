//! Every constructor and builder that takes a name checks it the same way: an empty name, or
//! one with a NUL byte, is refused with `io::ErrorKind::InvalidInput` and a message naming
//! the kind of thing ("a shield name must not be empty"), never accepted, clamped or
//! panicked on. A name is a metric label value.

use std::io;
use std::time::Duration;

use loopguard::keyed::KeyedGate;
use loopguard::lag::LoopLag;
use loopguard::operation::Operation;
use loopguard::orphan::OrphanHandler;
use loopguard::pool::Pool;
use loopguard::refresh::Refresh;
use loopguard::retry::RetryBudget;
use loopguard::shield::Shield;

/// Drops what a constructor built.
fn ok<T>(_: T) {}

/// A constructor, as a function of the name it is given.
type Make<'a> = Box<dyn Fn(&str) -> io::Result<()> + 'a>;

/// Each constructor, by the kind its message names, as a function of the name.
fn constructors(pool: &Pool) -> Vec<(&'static str, Make<'_>)> {
    let mut all: Vec<(&'static str, Make<'_>)> = vec![
        (
            "a pool",
            Box::new(|name| Pool::builder().name(name).workers(1).build().map(ok)),
        ),
        (
            "a keyed gate",
            Box::new(|name| KeyedGate::<u8>::new(name).map(ok)),
        ),
        (
            "a keyed gate",
            Box::new(|name| KeyedGate::<u8>::builder(name).capacity(2).build().map(ok)),
        ),
        ("a shield", Box::new(|name| Shield::new(name).map(ok))),
        (
            "a shield",
            Box::new(|name| Shield::with_handler(name, OrphanHandler::log()).map(ok)),
        ),
        (
            "an operation",
            Box::new(|name| Operation::new(name.to_string()).map(ok)),
        ),
        ("a loop lag", Box::new(|name| LoopLag::new(name).map(ok))),
        (
            "a loop lag",
            Box::new(|name| LoopLag::builder(name).build().map(ok)),
        ),
        (
            "a retry budget",
            Box::new(|name| {
                RetryBudget::new(Duration::from_secs(10), 1, 0.1)?
                    .named(name)
                    .map(ok)
            }),
        ),
    ];
    all.push((
        "a refresh cache",
        Box::new(move |name| {
            Refresh::builder(name)
                .on_pool(pool, || Ok::<u8, String>(1))
                .map(ok)
        }),
    ));
    all.push((
        "a refresh cache",
        Box::new(|name| {
            let shield = Shield::new("names-refresh")?;
            Refresh::builder(name)
                .spawned(&shield, drop, || async { Ok::<u8, String>(1) })
                .map(ok)
        }),
    ));
    #[cfg(feature = "tower")]
    all.push((
        "an admission layer",
        Box::new(|name| loopguard::tower::AdmissionLayer::new(name, 2).map(ok)),
    ));
    all
}

/// What each constructor says of `name`, where it differs from `expected(kind)`: one line
/// per constructor that breaks the rule, so a failure names every one.
fn mismatches(names: &[&str], expected: impl Fn(&str, &str) -> Option<String>) -> Vec<String> {
    let pool = Pool::builder().name("names").workers(1).build().unwrap();
    let mut wrong = Vec::new();
    for (index, (kind, make)) in constructors(&pool).iter().enumerate() {
        for name in names {
            let got = match make(name) {
                Ok(()) => None,
                Err(err) if err.kind() == io::ErrorKind::InvalidInput => Some(err.to_string()),
                Err(err) => Some(format!("{:?}: {err}", err.kind())),
            };
            let want = expected(kind, name);
            if got != want {
                wrong.push(format!(
                    "#{index} ({kind}) for {name:?}: {got:?}, not {want:?}"
                ));
            }
        }
    }
    wrong
}

#[test]
fn every_constructor_refuses_an_empty_name_the_same_way() {
    let wrong = mismatches(&[""], |kind, _| {
        Some(format!("{kind} name must not be empty"))
    });
    assert!(wrong.is_empty(), "{wrong:#?}");
}

#[test]
fn every_constructor_refuses_a_name_with_a_nul_byte_the_same_way() {
    let wrong = mismatches(&["\0", "repo\0", "a\0b"], |kind, name| {
        Some(format!(
            "{kind} name must not contain NUL bytes, got {name:?}"
        ))
    });
    assert!(wrong.is_empty(), "{wrong:#?}");
}

#[test]
fn every_constructor_accepts_any_other_name() {
    let wrong = mismatches(
        &["registry", " ", "ünïcode/☃", "with\nnewline"],
        |_, _| None,
    );
    assert!(wrong.is_empty(), "{wrong:#?}");
}
