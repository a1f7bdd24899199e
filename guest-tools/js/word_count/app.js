// A toolhost tool plugin in JavaScript (world `tools`: no process access).
//
// It offers one tool, `js_word_count`, which counts the words and lines of a text and names
// its longest word. componentize-js builds this module into a WebAssembly component (see
// README.md and build.mjs). The host makes a fresh instance for every call, so nothing here
// keeps state. A thrown string is the call's tool error (the `string` of `result<_, string>`).

/** The tool's name. */
const NAME = "js_word_count";

/** The JSON Schema of the tool's arguments. */
const INPUT_SCHEMA = JSON.stringify({
  type: "object",
  properties: {
    text: { type: "string", description: "The text to count." },
  },
  required: ["text"],
  additionalProperties: false,
});

/** The JSON Schema of the tool's results. */
const OUTPUT_SCHEMA = JSON.stringify({
  type: "object",
  properties: {
    words: { type: "integer", description: "Runs of non-whitespace characters." },
    lines: { type: "integer", description: "Lines: a last line without a newline counts." },
    longest: {
      type: "string",
      description: "The first of the longest words; empty without words.",
    },
  },
  required: ["words", "lines", "longest"],
  additionalProperties: false,
});

/** The counts of `text`, as the tool returns them. */
function count(text) {
  const words = text.split(/\s+/).filter((word) => word !== "");
  let lines = text.split("\n").length - 1;
  if (text !== "" && !text.endsWith("\n")) lines += 1;
  let longest = "";
  let longestLength = 0;
  for (const word of words) {
    // Characters (code points), as Python's len counts them, not UTF-16 units.
    const length = [...word].length;
    if (length > longestLength) {
      longest = word;
      longestLength = length;
    }
  }
  return { words: words.length, lines, longest };
}

/** The `text` argument of the JSON `args`; throws a message for the model. */
function textArgument(args) {
  let parsed;
  try {
    parsed = JSON.parse(args);
  } catch (error) {
    throw `the arguments are not JSON: ${error}`;
  }
  if (parsed === null || typeof parsed !== "object" || Array.isArray(parsed)) {
    throw 'the arguments must be a JSON object such as {"text": "..."}';
  }
  if (!("text" in parsed)) throw "`text` is missing: give the text to count as a string";
  const text = parsed.text;
  if (typeof text !== "string") {
    const kind = text === null ? "null" : Array.isArray(text) ? "array" : typeof text;
    throw `\`text\` must be a string, not ${kind}`;
  }
  return text;
}

/** The `tool` interface this component exports. */
export const tool = {
  /** The one tool this plugin offers (its configuration is not used). */
  tools(_config, _settings) {
    return [
      {
        name: NAME,
        description:
          "Count the words and lines of a text and name its longest word " +
          "(a plugin written in JavaScript).",
        inputSchema: INPUT_SCHEMA,
        outputSchema: OUTPUT_SCHEMA,
        title: "Count words (JavaScript)",
        annotations: { readOnly: true, destructive: false, idempotent: true, openWorld: false },
      },
    ];
  },

  /** Run the tool `name`; a bad call throws a string, which the host reports as a tool error. */
  call(name, args, _context) {
    if (name !== NAME) {
      throw `unknown tool ${JSON.stringify(name)}: this plugin offers only ${NAME}`;
    }
    const text = textArgument(args);
    const done = { output: JSON.stringify(count(text)), fullOutput: [], content: [] };
    return { tag: "done", val: done };
  },
};
