//! The confirmer's side of confirmation (the asking side is `crate::ask`):
//! the owner sends only the checker's identity and generation
//! ([`crate::ask::Ask`]); the confirmer reads the checker and its Secrets
//! itself, under its own permissions and the same tenancy rules as any probe
//! (forgery guard, a bounded share per namespace), and answers with its
//! probe's result ([`crate::ask::Reply`]). Asks are authenticated by a
//! ServiceAccount token made for this audience only and bound to the asking
//! replica's pod ([`crate::ask::tokens`], [`review`]), so it is worth nothing
//! to the API server or anyone else.

pub mod claims;
pub mod endpoint;
pub mod plans;
pub mod review;
pub mod service;
pub mod shares;
