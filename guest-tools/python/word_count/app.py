"""A toolhost tool plugin in Python (world `tools`: no process access).

It offers one tool, `py_word_count`, which counts the words and lines of a text and names its
longest word. componentize-py builds this module into a WebAssembly component (see
README.md). The host makes a fresh instance for every call, so nothing here keeps state.
"""

import json

from componentize_py_types import Err
from wit_world import exports
from wit_world.exports import tool

NAME = "py_word_count"

INPUT_SCHEMA = json.dumps({
    "type": "object",
    "properties": {
        "text": {"type": "string", "description": "The text to count."},
    },
    "required": ["text"],
    "additionalProperties": False,
})

OUTPUT_SCHEMA = json.dumps({
    "type": "object",
    "properties": {
        "words": {"type": "integer", "description": "Runs of non-whitespace characters."},
        "lines": {"type": "integer", "description": "Lines: a last line without a newline counts."},
        "longest": {
            "type": "string",
            "description": "The first of the longest words; empty without words.",
        },
    },
    "required": ["words", "lines", "longest"],
    "additionalProperties": False,
})


def count(text):
    """The counts of `text`, as the tool returns them."""
    words = text.split()
    lines = text.count("\n")
    if text and not text.endswith("\n"):
        lines += 1
    longest = ""
    for word in words:
        if len(word) > len(longest):
            longest = word
    return {"words": len(words), "lines": lines, "longest": longest}


def text_argument(arguments):
    """The `text` argument of the JSON `arguments`; raises Err with a message for the model."""
    try:
        parsed = json.loads(arguments)
    except ValueError as error:
        raise Err(f"the arguments are not JSON: {error}")
    if not isinstance(parsed, dict):
        raise Err("the arguments must be a JSON object such as {\"text\": \"...\"}")
    if "text" not in parsed:
        raise Err("`text` is missing: give the text to count as a string")
    text = parsed["text"]
    if not isinstance(text, str):
        raise Err(f"`text` must be a string, not {type(text).__name__}")
    return text


class Tool(exports.Tool):
    """The `tool` interface this component exports."""

    def tools(self, config, settings):
        """The one tool this plugin offers (its configuration is not used)."""
        return [tool.ToolDefinition(
            name=NAME,
            description="Count the words and lines of a text and name its longest word "
                        "(a plugin written in Python).",
            input_schema=INPUT_SCHEMA,
            output_schema=OUTPUT_SCHEMA,
            title="Count words (Python)",
            annotations=tool.ToolAnnotations(read_only=True, destructive=False,
                                             idempotent=True, open_world=False),
        )]

    def call(self, name, arguments, context):
        """Run the tool `name`; a bad call raises Err, which the host reports as a tool error."""
        if name != NAME:
            raise Err(f"unknown tool {name!r}: this plugin offers only {NAME}")
        text = text_argument(arguments)
        done = tool.CallResult(output=json.dumps(count(text)), full_output=[], content=[])
        return tool.CallOutcome_Done(done)
