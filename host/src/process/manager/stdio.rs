//! A command's stdio as the host opens it: one pipe for stdout and stderr together (so output
//! keeps the order it was written in), a pipe for stdin when asked for, or a terminal for all
//! three (`pty.rs`).

use std::io;
use std::os::fd::OwnedFd;

use tokio::net::unix::pipe;

use super::input::InputSide;
use super::pty;
use super::spec::ChildStdio;
use crate::process::{ProcessError, Stdin};

/// A command's stdio as the host sets it up.
pub(super) struct Stdio {
    /// What the host reads the output from.
    pub(super) output: pipe::Receiver,
    /// The command's ends.
    pub(super) child: ChildStdio,
    /// The host's side of its input.
    pub(super) input: InputSide,
}

/// Open the command's stdio for `stdin`: one pipe for stdout and stderr (and one for stdin if
/// asked for), or a terminal for all three.
pub(super) fn open(stdin: Stdin) -> Result<Stdio, ProcessError> {
    let pipe_error =
        |error: io::Error| ProcessError::Failed(format!("cannot create the output pipe: {error}"));
    // The default capacity: asking for more (`F_SETPIPE_SZ`) would count against the user's
    // pipe allowance (`pipe-user-pages-soft`), past which every new pipe of the user gets a
    // single page. Both ends close-on-exec in the parent.
    let output_pipe = || -> Result<(pipe::Receiver, OwnedFd), ProcessError> {
        let (reader, writer) = io::pipe().map_err(pipe_error)?;
        let output = pipe::Receiver::from_owned_fd(OwnedFd::from(reader)).map_err(pipe_error)?;
        Ok((output, OwnedFd::from(writer)))
    };
    match stdin {
        Stdin::Closed => {
            let (output, output_fd) = output_pipe()?;
            Ok(Stdio {
                output,
                child: ChildStdio {
                    output: output_fd,
                    stdin: None,
                },
                input: InputSide::closed(),
            })
        }
        Stdin::Pipe => {
            let (output, output_fd) = output_pipe()?;
            let input_error = |error: io::Error| {
                ProcessError::Failed(format!("cannot create the input pipe: {error}"))
            };
            let (reader, writer) = io::pipe().map_err(input_error)?;
            let writer = pipe::Sender::from_owned_fd(OwnedFd::from(writer)).map_err(input_error)?;
            Ok(Stdio {
                output,
                child: ChildStdio {
                    output: output_fd,
                    stdin: Some((OwnedFd::from(reader), false)),
                },
                input: InputSide::pipe(writer),
            })
        }
        Stdin::Terminal(size) => {
            let pty_error =
                |error: io::Error| ProcessError::Failed(format!("cannot open a terminal: {error}"));
            let terminal = pty::open(size).map_err(pty_error)?;
            let dup = |fd: &OwnedFd| fd.try_clone().map_err(pty_error);
            let output = pipe::Receiver::from_owned_fd_unchecked(dup(&terminal.master)?)
                .map_err(pty_error)?;
            let writer =
                pipe::Sender::from_owned_fd_unchecked(dup(&terminal.master)?).map_err(pty_error)?;
            Ok(Stdio {
                output,
                child: ChildStdio {
                    output: dup(&terminal.slave)?,
                    stdin: Some((terminal.slave, true)),
                },
                input: InputSide::terminal(writer, terminal.master, size),
            })
        }
    }
}
