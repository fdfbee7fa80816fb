//! The builder of a [`KeyedGate`].

use std::collections::HashMap;
use std::fmt;
use std::hash::Hash;
use std::io;
use std::time::{Duration, Instant};

use super::KeyedGate;
use crate::gate::MAX_CAPACITY;

/// Configures a [`KeyedGate`]; made by [`KeyedGate::builder`].
///
/// # Examples
///
/// ```
/// use loopguard::keyed::KeyedGate;
///
/// let err = KeyedGate::<u32>::builder("repos").capacity(0).build().unwrap_err();
/// assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
/// assert_eq!(err.to_string(), "key capacity must be at least one");
/// ```
pub struct KeyedGateBuilder<K> {
    pub(super) name: String,
    pub(super) capacity: usize,
    pub(super) overrides: HashMap<K, usize>,
    pub(super) window: Duration,
}

impl<K: Hash + Eq + Clone + Send + Sync + 'static> KeyedGateBuilder<K> {
    /// Slots per key (default 1, at most 65 536).
    ///
    /// # Examples
    ///
    /// ```
    /// let gate = loopguard::keyed::KeyedGate::builder("repos").capacity(3).build()?;
    /// # let _: &loopguard::keyed::KeyedGate<u8> = &gate;
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn capacity(mut self, slots: usize) -> Self {
        self.capacity = slots;
        self
    }

    /// Slots for one particular key, overriding [`capacity`](Self::capacity).
    ///
    /// # Examples
    ///
    /// ```
    /// let gate = loopguard::keyed::KeyedGate::builder("repos").capacity_for("big", 2).build()?;
    /// let _a = gate.try_acquire("big").unwrap();
    /// assert!(gate.try_acquire("big").is_ok());
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn capacity_for(mut self, key: K, slots: usize) -> Self {
        self.overrides.insert(key, slots);
        self
    }

    /// The demand averaging window (default five seconds).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let gate = loopguard::keyed::KeyedGate::<u8>::builder("repos")
    ///     .window(Duration::from_secs(60))
    ///     .build()?;
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn window(mut self, window: Duration) -> Self {
        self.window = window;
        self
    }

    /// Builds the gate.
    ///
    /// # Errors
    ///
    /// [`io::ErrorKind::InvalidInput`] if the name is empty or has a NUL byte, a capacity
    /// is zero or above 65 536 (a key's gate is the crate's admission gate), or the window is zero or too large (the same style as
    /// [`PoolBuilder::build`](crate::pool::PoolBuilder::build)).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use loopguard::keyed::KeyedGate;
    ///
    /// assert!(KeyedGate::<u8>::builder("repos").window(Duration::ZERO).build().is_err());
    /// ```
    pub fn build(self) -> io::Result<KeyedGate<K>> {
        crate::name::check(super::NAME_KIND, &self.name)?;
        let slots = || std::iter::once(self.capacity).chain(self.overrides.values().copied());
        if slots().any(|slots| slots == 0) {
            let message = "key capacity must be at least one";
            return Err(io::Error::new(io::ErrorKind::InvalidInput, message));
        }
        if let Some(slots) = slots().find(|&slots| slots > MAX_CAPACITY) {
            let message = format!("key capacity must be at most {MAX_CAPACITY}, not {slots}");
            return Err(io::Error::new(io::ErrorKind::InvalidInput, message));
        }
        let proto = super::KeyDemand::new(self.window, Instant::now())?;
        Ok(KeyedGate::from_parts(
            &self.name,
            self.capacity,
            self.overrides,
            proto,
        ))
    }
}

impl<K> fmt::Debug for KeyedGateBuilder<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedGateBuilder")
            .field("name", &self.name)
            .field("capacity", &self.capacity)
            .field("overrides", &self.overrides.len())
            .field("window", &self.window)
            .finish()
    }
}
