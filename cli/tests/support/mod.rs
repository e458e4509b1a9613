//! What the tests of real `leasehold` processes share: the binary's
//! command and `leasehold serve` ([`process`]), how long to wait and how
//! ([`wait`]), the served API ([`http`]), and the peers the runs call
//! ([`peers`], [`gate`], [`hanging_tool`], [`PythonPeer`]). Each test
//! binary uses a part of it.
#![allow(dead_code)]

pub mod gate;
pub mod hanging_tool;
mod http;
pub mod llama_stage;
mod peers;
mod process;
pub mod proxy;
#[path = "../../../runtime/tests/support/python.rs"]
mod python;
pub mod sse;
mod wait;

#[allow(unused_imports, reason = "each test binary uses part of the helpers")]
pub use {
    http::{authorized, get_json, get_run, owner_id, post_run, posted, view_until},
    peers::{LEDGER_MCP_SERVER, journal, judge_requests, serve_peer, write_flow},
    process::{
        Leasehold, Output, clean_leasehold, free_port, leasehold, leasehold_on_store, output,
        serve, serve_on, served_base, signal, signal_pid, start_serve,
    },
    python::PythonPeer,
    wait::{CROWDED_PATIENCE, PATIENCE, finished, output_within, until},
};
