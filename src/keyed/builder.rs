//! The builder of a [`KeyedGate`] and its configuration error.

use std::collections::HashMap;
use std::fmt;
use std::hash::Hash;
use std::time::{Duration, Instant};

use super::KeyedGate;
use crate::demand::{DemandCore, InvalidWindow};

/// Configures a [`KeyedGate`]; made by [`KeyedGate::builder`].
///
/// # Examples
///
/// ```
/// use loopguard::keyed::{ConfigError, KeyedGate};
///
/// let err = KeyedGate::<u32>::builder("repos").capacity(0).build().unwrap_err();
/// assert_eq!(err, ConfigError::ZeroCapacity);
/// ```
pub struct KeyedGateBuilder<K> {
    pub(super) name: String,
    pub(super) capacity: usize,
    pub(super) overrides: HashMap<K, usize>,
    pub(super) window: Duration,
}

impl<K: Hash + Eq + Clone + Send + Sync + 'static> KeyedGateBuilder<K> {
    /// Slots per key (default 1).
    ///
    /// # Examples
    ///
    /// ```
    /// let gate = loopguard::keyed::KeyedGate::builder("repos").capacity(3).build()?;
    /// # let _: &loopguard::keyed::KeyedGate<u8> = &gate;
    /// # Ok::<(), loopguard::keyed::ConfigError>(())
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
    /// # Ok::<(), loopguard::keyed::ConfigError>(())
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
    /// # Ok::<(), loopguard::keyed::ConfigError>(())
    /// ```
    pub fn window(mut self, window: Duration) -> Self {
        self.window = window;
        self
    }

    /// Builds the gate.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] if a capacity is zero or the window is invalid.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use loopguard::keyed::KeyedGate;
    ///
    /// assert!(KeyedGate::<u8>::builder("repos").window(Duration::ZERO).build().is_err());
    /// ```
    pub fn build(self) -> Result<KeyedGate<K>, ConfigError> {
        if self.capacity == 0 || self.overrides.values().any(|&slots| slots == 0) {
            return Err(ConfigError::ZeroCapacity);
        }
        let proto = DemandCore::new(self.window, Instant::now()).map_err(ConfigError::Window)?;
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

/// An invalid [`KeyedGate`] configuration.
///
/// # Examples
///
/// ```
/// use loopguard::keyed::{ConfigError, KeyedGate};
///
/// let err = KeyedGate::<u8>::builder("repos").capacity(0).build().unwrap_err();
/// assert_eq!(err.to_string(), "key capacity must be at least one");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigError {
    /// A per-key capacity (default or override) was zero.
    ZeroCapacity,
    /// The demand window was zero or too large.
    Window(InvalidWindow),
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ZeroCapacity => f.write_str("key capacity must be at least one"),
            Self::Window(err) => err.fmt(f),
        }
    }
}

impl std::error::Error for ConfigError {}
