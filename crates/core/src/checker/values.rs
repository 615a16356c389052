//! The values of the Secret and ConfigMap keys a checker's spec references,
//! as the intake resolved them (`crate::intake::secrets`): what the engine
//! plans a probe with and the confirmer probes with. Values are never
//! logged: Debug prints only their length.

use std::collections::BTreeMap;
use std::fmt;

use webchecker_plan::ValueRef;

/// The resolved values of one checker's references: the value, or why it
/// could not be read (a message naming the object and key, never a value);
/// or none at all, because they do not fit in the namespace's budget.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Resolved {
    values: BTreeMap<ValueRef, Result<Vec<u8>, String>>,
    /// The QuotaExceeded message (crate::namespace_budget): the values are not kept.
    over_budget: Option<String>,
}

impl Resolved {
    /// The value of `r`, or the InvalidSpec message.
    pub fn get(&self, r: &ValueRef) -> Result<Vec<u8>, String> {
        match self.values.get(r) {
            Some(Ok(v)) => Ok(v.clone()),
            Some(Err(e)) => Err(e.clone()),
            None => Err(format!("{r} was not read")),
        }
    }

    pub fn set(&mut self, r: ValueRef, v: Result<Vec<u8>, String>) {
        self.values.insert(r, v);
    }

    /// In place of values that do not fit in the namespace's budget.
    pub fn over_budget(message: String) -> Self {
        Resolved {
            values: BTreeMap::new(),
            over_budget: Some(message),
        }
    }

    /// The QuotaExceeded message, when the values did not fit.
    pub fn quota_exceeded(&self) -> Option<&str> {
        self.over_budget.as_deref()
    }

    /// Bytes of the values held.
    pub fn bytes(&self) -> usize {
        self.values
            .values()
            .map(|v| v.as_ref().map_or(0, Vec::len))
            .sum()
    }
}

impl FromIterator<(ValueRef, Result<Vec<u8>, String>)> for Resolved {
    fn from_iter<I: IntoIterator<Item = (ValueRef, Result<Vec<u8>, String>)>>(iter: I) -> Self {
        Resolved {
            values: iter.into_iter().collect(),
            over_budget: None,
        }
    }
}

impl fmt::Debug for Resolved {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(m) = &self.over_budget {
            return write!(f, "OverBudget({m:?})");
        }
        let mut m = f.debug_map();
        for (k, v) in &self.values {
            match v {
                Ok(bytes) => m.entry(&k.to_string(), &format_args!("<{} bytes>", bytes.len())),
                Err(e) => m.entry(&k.to_string(), e),
            };
        }
        m.finish()
    }
}
