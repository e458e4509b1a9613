//! The `leasehold` command and the embedded demo.
//!
//! [`cli`] is the command line: the demo, running a flow, the server, the
//! runs in a data directory (or on a server), experiments and the effective
//! configuration. [`demo`] is the embedded demo: a real run through the
//! real model client and MCP client, against a scripted model server and
//! an MCP tool server started in process, with no network and no API key.
//!
//! This crate is the product's top: it depends on the engine
//! ([`leasehold`]), the server ([`leasehold_server`]) and the lab
//! ([`leasehold_lab`]); nothing depends on it. An embedder depends on
//! `leasehold` instead.

// What the command says goes through `cli`'s `say!` and `out!`, which
// never panic on a closed terminal or a reader that left.
#![deny(clippy::print_stdout, clippy::print_stderr)]

pub mod cli;
mod columns;
pub mod demo;
