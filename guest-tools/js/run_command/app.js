// The run_command policy: a toolhost tool in JavaScript that runs shell commands.
//
// It targets the world `shell-tools` of wit/toolhost.wit: its tools may start processes
// through the host's process capability, which the manifest run_command.toml grants. It
// offers one tool, `run_command_run`. componentize-js builds this module into a WebAssembly component
// (`npm run build`, see README.md). The host makes a fresh instance for every call, so nothing
// here keeps state between calls.

import { start, wait, sendSignal } from "toolhost:plugin/process@0.6.0";

/** The tool's name. */
const NAME = "run_command_run";

/** How long a command may run when the call does not say, in milliseconds. */
const DEFAULT_TIMEOUT_MS = 30000;

/** The JSON Schema of the tool's arguments. */
const INPUT_SCHEMA = JSON.stringify({
  type: "object",
  properties: {
    command: { type: "string", description: "The shell command to run." },
    timeout_ms: {
      type: "integer",
      minimum: 1,
      description: "How long it may run, in milliseconds (default 30000).",
    },
  },
  required: ["command"],
  additionalProperties: false,
});

/** The JSON Schema of the tool's results. */
const OUTPUT_SCHEMA = JSON.stringify({
  type: "object",
  properties: {
    exit_code: {
      type: ["integer", "null"],
      description: "The command's exit status; null when a signal ended it.",
    },
    output: { type: "string", description: "What it wrote, stdout and stderr." },
    timed_out: {
      type: "boolean",
      description: "It was still running at the timeout and was stopped.",
    },
  },
  required: ["exit_code", "output", "timed_out"],
  additionalProperties: false,
});

/** The command and timeout of the JSON `args`; throws a message for the model. */
function argumentsOf(args) {
  let parsed;
  try {
    parsed = JSON.parse(args);
  } catch (error) {
    throw `the arguments are not JSON: ${error}`;
  }
  if (parsed === null || typeof parsed !== "object" || Array.isArray(parsed)) {
    throw 'the arguments must be a JSON object such as {"command": "ls"}';
  }
  const command = parsed.command;
  if (typeof command !== "string" || command.trim() === "") {
    throw "`command` is missing or empty: give the shell command to run as a string";
  }
  const timeoutMs = parsed.timeout_ms ?? DEFAULT_TIMEOUT_MS;
  if (!Number.isInteger(timeoutMs) || timeoutMs < 1) {
    throw "`timeout_ms` must be a whole number of milliseconds, at least 1";
  }
  return { command, timeoutMs };
}

/** A process error of the host, in words: its kind and the host's message. */
function described(error) {
  const payload = error?.payload ?? error;
  if (payload && typeof payload === "object" && "tag" in payload) {
    return `${payload.tag}: ${payload.val}`;
  }
  return String(payload);
}

/** The `tool` interface this component exports. */
export const tool = {
  /** The one tool this policy offers (its configuration is not used). */
  tools(_config, _settings) {
    return [
      {
        name: NAME,
        description:
          "Run a shell command and return its exit status and output " +
          "(a policy written in JavaScript).",
        inputSchema: INPUT_SCHEMA,
        outputSchema: OUTPUT_SCHEMA,
        title: "Run a command (run_command)",
        annotations: { readOnly: false, destructive: true, idempotent: false, openWorld: true },
      },
    ];
  },

  /** Run the tool `name`; a thrown string is the tool error the model reads. */
  call(name, args, _context) {
    if (name !== NAME) throw `unknown tool ${JSON.stringify(name)}: this policy offers only ${NAME}`;
    const { command, timeoutMs } = argumentsOf(args);
    let output;
    let timedOut;
    try {
      const id = start({
        command,
        workdir: undefined,
        env: [],
        background: false,
        confinement: undefined,
        stdin: { tag: "closed" },
        secrets: [],
      });
      output = wait(id, BigInt(timeoutMs), { tag: "all" });
      timedOut = output.running;
      if (timedOut) {
        sendSignal(id, "kill");
        output = wait(id, 5000n, { tag: "all" });
      }
    } catch (error) {
      throw `the command could not run: ${described(error)}`;
    }
    const result = { exit_code: output.exitCode ?? null, output: output.text, timed_out: timedOut };
    const done = { output: JSON.stringify(result), fullOutput: [], content: [] };
    return { tag: "done", val: done };
  },
};
