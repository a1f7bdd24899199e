//! Tests of real confinement and resource limits, each through a `toolhost` subprocess: what a
//! confined command cannot reach, and what a fork bomb or a memory hog runs into.
//!
//! - `confinement`: escape attempts on fake machines under [`toolhost_e2e::machines_root`]
//!   (CI runs this module a second time with the machines' root under `/tmp`);
//! - `copies`: copies of hidden files (a dotfiles repository, backups) and secret values
//!   under innocent names;
//! - `limits`: the process and memory limits of commands;
//! - `git_guard`: what git would run later outside the sandbox, undone within a session;
//! - `live`: what a session's later commands see of the directories around hidden paths;
//! - `network`: an allow-list of hosts, reached through the session's proxy;
//! - `secret_scan`: credential stores hidden by the list and by what the content scan finds;
//! - `unix_sockets`: which Unix sockets a confined command may connect to.
//!
//! The `limits` tests lower the priority of their own threads, and the fork bombs they start
//! inherit it: the bombs cannot starve the tests running beside them on a small machine. Linux
//! keeps a nice value per thread, and the test harness runs each test on a thread of its own,
//! so the other tests keep their priority.

mod confinement;
mod copies;
mod git_guard;
mod limits;
mod live;
mod network;
mod secret_scan;
mod unix_sockets;
