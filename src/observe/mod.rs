//! What a replica shows: Prometheus metrics (`metrics`), /metrics /healthz
//! /readyz on a thread of their own (`server`), and Kubernetes Events
//! published fairly per namespace (`events`).

pub(crate) mod events;
pub(crate) mod listener;
pub(crate) mod metrics;
pub(crate) mod server;
