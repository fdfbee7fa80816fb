//! The `keyed` families: each key's demand as `publish_metrics` read it, and the gate's
//! refusals.

use std::fmt::{self, Display};
use std::hash::Hash;
use std::sync::Arc;

use prometheus_client::encoding::DescriptorEncoder;

use super::encode::{counters, gauges};
use crate::emit::{KEYED_DEMAND_AVG, KEYED_REJECTED_TOTAL, LABEL_GATE, LABEL_KEY};
use crate::keyed::KeyedGate;
use crate::sync::contain;

/// A keyed gate of any key type, as the collector reads it.
pub(super) trait ReadKeyed: Send + Sync {
    fn name(&self) -> &str;
    fn rejected(&self) -> u64;
    /// Each key, displayed, with its published demand. A key whose `Display` panics is
    /// left out (contained, as `publish_metrics` leaves its gauge alone).
    fn published(&self) -> Vec<(String, f64)>;
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

    fn published(&self) -> Vec<(String, f64)> {
        // Outside the gate's lock: `Display` and the keys' `Drop` are user code.
        KeyedGate::published(self)
            .into_iter()
            .filter_map(|(key, value)| {
                contain("a key's Display or Drop", move || key.to_string()).map(|key| (key, value))
            })
            .collect()
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
    let keys: Vec<(&str, String, f64)> = gates
        .iter()
        .flat_map(|gate| {
            let name = gate.name();
            gate.published()
                .into_iter()
                .map(move |(key, value)| (name, key, value))
        })
        .collect();
    gauges(
        e,
        KEYED_DEMAND_AVG,
        "Time-weighted average of holders plus waiters of one key over the gate's window.",
        &keys,
        |(gate, key, value)| ([(LABEL_GATE, *gate), (LABEL_KEY, key.as_str())], *value),
    )?;
    counters(
        e,
        KEYED_REJECTED_TOTAL,
        "Reject-when-busy admissions refused because the key was busy.",
        gates,
        |gate| vec![([(LABEL_GATE, gate.name())], gate.rejected())],
    )
}
