//! Scenarios of the checker table.
