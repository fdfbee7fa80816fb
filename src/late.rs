//! The one rule for late outputs: a failure handed to a caller is never dropped on the
//! way out, whichever way the caller composed its waits.
//!
//! A deadline refuses a result that completes after it ([`Within`](crate::deadline::Within),
//! [`Run`](crate::pool::Run)). For a success that is right. For a failure (a panic, an `Err`
//! of [`Fallible`](crate::Fallible) work) it would break exactly-once: the failure was taken
//! from its hand-off, so nobody else will report it. So each hand-off counts, on the polling
//! thread, every failure it hands out; a deadline that sees the count move during its own
//! inner poll returns the output instead of refusing it, and a future that refuses a failure
//! itself (and reports it) takes it back off the count.
//!
//! The count is thread-local and only ever compared before and after one poll on that
//! thread, so other tasks polled on the same thread in between do not disturb it. Each
//! loopguard combinator keeps it true: [`Run`](crate::pool::Run) takes back a failure it
//! refuses and reports; [`Retry`](crate::retry::Retry) takes back the failures it keeps
//! for later (or retries, which consumes them) and hands out again those it returns later.
//!
//! # Where the rule ends
//!
//! The count describes one poll. A failure your own future took in an earlier poll and
//! still holds (inside a `zip`, in a local of an `async` block) is yours: a deadline that
//! drops your future then drops it, as any code dropping a value would.

use std::cell::Cell;

thread_local! {
    static HANDED_OUT: Cell<u64> = const { Cell::new(0) };
}

/// The count now; compare with a later [`handed_out_since`].
pub(crate) fn mark() -> u64 {
    HANDED_OUT.with(Cell::get)
}

/// Whether failures were handed out (and not taken back) since `mark`.
pub(crate) fn handed_out_since(mark: u64) -> bool {
    count_since(mark) != 0
}

/// How many failures were handed out (and not taken back) since `mark`.
pub(crate) fn count_since(mark: u64) -> u64 {
    HANDED_OUT.with(Cell::get).wrapping_sub(mark)
}

/// A combinator holding `n` failures it took in earlier polls returns them now.
pub(crate) fn handed_out_again(n: u64) {
    HANDED_OUT.with(|count| count.set(count.get().wrapping_add(n)));
}

/// A combinator keeps (or consumes) `n` failures handed out in this poll instead of
/// returning them now.
pub(crate) fn taken_back_n(n: u64) {
    HANDED_OUT.with(|count| count.set(count.get().wrapping_sub(n)));
}

/// A hand-off gave a failure to whoever polls it.
pub(crate) fn handed_out() {
    HANDED_OUT.with(|count| count.set(count.get().wrapping_add(1)));
}

/// A failure handed out during this poll was refused by its receiver, which reports it.
pub(crate) fn taken_back() {
    HANDED_OUT.with(|count| count.set(count.get().wrapping_sub(1)));
}
