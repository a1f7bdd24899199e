"""The run_command policy: a toolhost tool in Python that runs shell commands.

It targets the world `shell-tools` of wit/toolhost.wit: its tools may start processes through
the host's process capability, which the manifest run_command.toml grants. It offers one tool,
`run_command_run`. componentize-py builds this module into a WebAssembly component (see README.md).
The host makes a fresh instance for every call, so nothing here keeps state between calls.
"""

import json

from componentize_py_types import Err
from wit_world import exports
from wit_world.exports import tool
from wit_world.imports import process

NAME = "run_command_run"

# How long a command may run when the call does not say, in milliseconds.
DEFAULT_TIMEOUT_MS = 30_000

INPUT_SCHEMA = json.dumps({
    "type": "object",
    "properties": {
        "command": {"type": "string", "description": "The shell command to run."},
        "timeout_ms": {
            "type": "integer",
            "minimum": 1,
            "description": "How long it may run, in milliseconds (default 30000).",
        },
    },
    "required": ["command"],
    "additionalProperties": False,
})

OUTPUT_SCHEMA = json.dumps({
    "type": "object",
    "properties": {
        "exit_code": {
            "type": ["integer", "null"],
            "description": "The command's exit status; null when a signal ended it.",
        },
        "output": {"type": "string", "description": "What it wrote, stdout and stderr."},
        "timed_out": {
            "type": "boolean",
            "description": "It was still running at the timeout and was stopped.",
        },
    },
    "required": ["exit_code", "output", "timed_out"],
    "additionalProperties": False,
})


def arguments_of(arguments):
    """The command and timeout of the JSON `arguments`; raises Err with a message for the model."""
    try:
        parsed = json.loads(arguments)
    except ValueError as error:
        raise Err(f"the arguments are not JSON: {error}")
    if not isinstance(parsed, dict):
        raise Err("the arguments must be a JSON object such as {\"command\": \"ls\"}")
    command = parsed.get("command")
    if not isinstance(command, str) or not command.strip():
        raise Err("`command` is missing or empty: give the shell command to run as a string")
    timeout_ms = parsed.get("timeout_ms", DEFAULT_TIMEOUT_MS)
    if isinstance(timeout_ms, bool) or not isinstance(timeout_ms, int) or timeout_ms < 1:
        raise Err("`timeout_ms` must be a whole number of milliseconds, at least 1")
    return command, timeout_ms


def described(error):
    """A process error of the host, in words: its kind and the host's message."""
    kind = type(error).__name__.removeprefix("ProcessError_")
    return f"{kind}: {error.value}"


class Tool(exports.Tool):
    """The `tool` interface this component exports."""

    def tools(self, config, settings):
        """The one tool this policy offers (its configuration is not used)."""
        return [tool.ToolDefinition(
            name=NAME,
            description="Run a shell command and return its exit status and output "
                        "(a policy written in Python).",
            input_schema=INPUT_SCHEMA,
            output_schema=OUTPUT_SCHEMA,
            title="Run a command (run_command)",
            annotations=tool.ToolAnnotations(read_only=False, destructive=True,
                                             idempotent=False, open_world=True),
        )]

    def call(self, name, arguments, context):
        """Run the tool `name`; a bad call raises Err, which the host reports as a tool error."""
        if name != NAME:
            raise Err(f"unknown tool {name!r}: this policy offers only {NAME}")
        command, timeout_ms = arguments_of(arguments)
        request = process.StartRequest(
            command=command,
            workdir=None,
            env=[],
            background=False,
            confinement=None,
            stdin=process.StdinMode_Closed(),
            secrets=[],
        )
        try:
            id = process.start(request)
            output = process.wait(id, timeout_ms, process.ReadFrom_All())
            timed_out = output.running
            if timed_out:
                process.send_signal(id, process.Signal.KILL)
                output = process.wait(id, 5_000, process.ReadFrom_All())
        except Err as error:
            raise Err(f"the command could not run: {described(error.value)}")
        result = {"exit_code": output.exit_code, "output": output.text, "timed_out": timed_out}
        done = tool.CallResult(output=json.dumps(result), full_output=[], content=[])
        return tool.CallOutcome_Done(done)
