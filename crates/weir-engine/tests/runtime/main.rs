//! The runtime against the contract (DESIGN.md): each checkpoint mode, failures at random and
//! at every named step, concurrent checkpoints, failing snapshot writes, rescaling, retention.

mod harness;

mod aligned;
mod at_least_once;
mod exactly_once;
mod lifecycle;
mod unaligned;
