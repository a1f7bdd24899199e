//! The start message of a keeper prepared ahead (`--ready`): its command, read from the
//! control socket with the command's descriptors (`SCM_RIGHTS`). The protocol crate's
//! [`start`](toolhost_keeper_protocol::start) module defines the message.

use std::ffi::OsString;
use std::io::{self, Read};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStringExt;
use std::os::unix::net::UnixStream;

use crate::fds::{Received, receive_with_fds};
use toolhost_keeper_protocol::start::{HEADER_LEN, MAX_BODY, STDIN, TERMINAL};

/// A command handed to a keeper prepared ahead.
#[derive(Debug)]
pub(crate) struct Start {
    /// Its stdin is a terminal (the output descriptor too), to become its controlling terminal.
    pub(crate) terminal: bool,
    pub(crate) workdir: OsString,
    pub(crate) program: OsString,
    /// `ARGV0` first.
    pub(crate) argv: Vec<OsString>,
    /// `(NAME, VALUE)`.
    pub(crate) env: Vec<(OsString, OsString)>,
    /// The command's stdout and stderr.
    pub(crate) output: OwnedFd,
    /// The Landlock ruleset current at this start (with `--confine`).
    pub(crate) ruleset: Option<OwnedFd>,
    /// The command's stdin (`None`: `/dev/null`).
    pub(crate) stdin: Option<OwnedFd>,
}

fn bad(message: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("start message: {message}"),
    )
}

/// Wait for the start message on `control`. `Ok(None)`: end-of-file first (the host let the
/// keeper go unused). `confined`: a ruleset descriptor comes after the output.
pub(crate) fn receive(control: &UnixStream, confined: bool) -> io::Result<Option<Start>> {
    let mut header = [0u8; HEADER_LEN];
    let Received {
        read,
        mut fds,
        truncated,
    } = receive_with_fds(control.as_raw_fd(), &mut header, 0)?;
    if truncated {
        return Err(bad("too many descriptors"));
    }
    if read == 0 {
        return Ok(None);
    }
    let mut stream = control;
    stream.read_exact(&mut header[read..])?;
    let length = usize::try_from(u32::from_le_bytes(header)).map_err(|_| bad("too long"))?;
    if length > MAX_BODY {
        return Err(bad("too long"));
    }
    let mut body = vec![0u8; length];
    stream.read_exact(&mut body)?;
    let mut fields = body
        .strip_suffix(b"\0")
        .ok_or_else(|| bad("not NUL-terminated"))?
        .split(|byte| *byte == 0)
        .map(<[u8]>::to_vec);
    let mut next = || fields.next().ok_or_else(|| bad("a field is missing"));
    let flags = next()?;
    let workdir = OsString::from_vec(next()?);
    let program = OsString::from_vec(next()?);
    let count: usize = std::str::from_utf8(&next()?)
        .ok()
        .and_then(|count| count.parse().ok())
        .ok_or_else(|| bad("not an argument count"))?;
    let argv = (0..count)
        .map(|_| next().map(OsString::from_vec))
        .collect::<io::Result<Vec<_>>>()?;
    if argv.is_empty() {
        return Err(bad("no ARGV0"));
    }
    let env = fields
        .map(|pair| {
            let split = pair
                .iter()
                .position(|byte| *byte == b'=')
                .ok_or_else(|| bad("a variable without `=`"))?;
            let (name, value) = pair.split_at(split);
            Ok((
                OsString::from_vec(name.to_vec()),
                OsString::from_vec(value[1..].to_vec()),
            ))
        })
        .collect::<io::Result<Vec<_>>>()?;
    let with_stdin = flags.contains(&STDIN);
    let expected = 1 + usize::from(confined) + usize::from(with_stdin);
    if fds.len() != expected {
        return Err(bad("not the descriptors expected"));
    }
    let stdin = if with_stdin { fds.pop() } else { None };
    let ruleset = if confined { fds.pop() } else { None };
    let output = fds.pop().ok_or_else(|| bad("no output"))?;
    Ok(Some(Start {
        terminal: flags.contains(&TERMINAL),
        workdir,
        program,
        argv,
        env,
        output,
        ruleset,
        stdin,
    }))
}
