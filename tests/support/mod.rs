//! The shared end-to-end kit (kit/, package webchecker-kit) under the name
//! the tests use: `mod support;` then `support::Cluster`, `support::faults`, ...
#![allow(unused_imports)]

pub use webchecker_kit::*;
