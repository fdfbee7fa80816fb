//! The `keyed` families: each key's demand as the gate's last `publish_metrics` set it
//! (keys displayed there, so an encode runs no key code and takes no table lock), and the
//! gate's refusals and expiries.

use std::fmt::{self, Display};
use std::hash::Hash;
use std::sync::Arc;

use prometheus_client::encoding::DescriptorEncoder;

use super::encode::{counters, gauges};
use crate::emit::{
    KEYED_DEMAND_AVG, KEYED_EXPIRED_TOTAL, KEYED_REJECTED_TOTAL, LABEL_GATE, LABEL_KEY,
};
use crate::keyed::{KeyedGate, Shown};

/// A keyed gate of any key type, as the collector reads it.
pub(super) trait ReadKeyed: Send + Sync {
    fn name(&self) -> &str;
    fn rejected(&self) -> u64;
    fn expired(&self) -> u64;
    /// Each key, displayed, with the value the gate's last `publish_metrics` set: no key
    /// code runs and no table lock is taken here.
    fn shown(&self) -> Shown;
    /// The address of the state a gate's clones share.
    fn identity(&self) -> *const ();
}

impl<K> ReadKeyed for KeyedGate<K>
where
    K: Hash + Eq + Clone + Display + Send + Sync + 'static,
{
    fn name(&self) -> &str {
        KeyedGate::name(self)
    }

    fn rejected(&self) -> u64 {
        KeyedGate::rejected(self)
    }

    fn expired(&self) -> u64 {
        KeyedGate::expired(self)
    }

    fn shown(&self) -> Shown {
        KeyedGate::shown(self)
    }

    fn identity(&self) -> *const () {
        KeyedGate::identity(self)
    }
}

/// Encodes the `keyed` families of `gates`; nothing when there are none.
pub(super) fn encode(e: &mut DescriptorEncoder<'_>, gates: &[Arc<dyn ReadKeyed>]) -> fmt::Result {
    if gates.is_empty() {
        return Ok(());
    }
    let shown: Vec<(&str, Shown)> = gates
        .iter()
        .map(|gate| (gate.name(), gate.shown()))
        .collect();
    let keys: Vec<(&str, &str, f64)> = shown
        .iter()
        .flat_map(|(gate, keys)| {
            keys.iter()
                .map(move |(key, value)| (*gate, key.as_str(), *value))
        })
        .collect();
    gauges(e, KEYED_DEMAND_AVG, &keys, |(gate, key, value)| {
        ([(LABEL_GATE, *gate), (LABEL_KEY, *key)], *value)
    })?;
    counters(e, KEYED_REJECTED_TOTAL, gates, |gate| {
        vec![([(LABEL_GATE, gate.name())], gate.rejected())]
    })?;
    counters(e, KEYED_EXPIRED_TOTAL, gates, |gate| {
        vec![([(LABEL_GATE, gate.name())], gate.expired())]
    })
}
