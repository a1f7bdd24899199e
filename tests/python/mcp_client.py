"""Drive `toolhost serve` with the official MCP Python SDK over stdio.

Usage: mcp_client.py TOOLHOST_BINARY [GLOBAL_ARGS...]

Lists the tools, runs `echo hello` through `execute` and checks the result; exits non-zero
with a message on the first mismatch.
"""

import asyncio
import json
import sys

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

EXPECTED_TOOLS = {
    "execute",
    "process_output",
    "process_input",
    "process_list",
    "process_signal",
}


def field(obj, snake: str, camel: str):
    """An attribute by its SDK 2.x (snake_case) or 1.x (camelCase) name."""
    return getattr(obj, snake) if hasattr(obj, snake) else getattr(obj, camel)


async def main(binary: str, global_args: list[str]) -> None:
    params = StdioServerParameters(command=binary, args=[*global_args, "serve"])
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            server_info = field(init, "server_info", "serverInfo")
            assert server_info.name == "toolhost", server_info

            tools = await session.list_tools()
            names = {tool.name for tool in tools.tools}
            assert names == EXPECTED_TOOLS, names
            execute = next(t for t in tools.tools if t.name == "execute")
            schema = field(execute, "input_schema", "inputSchema")
            assert "command" in schema["properties"], schema

            result = await session.call_tool("execute", {"command": "echo hello"})
            assert not field(result, "is_error", "isError"), result
            text = json.loads(result.content[0].text)
            assert text["output"].strip() == "hello", text
            assert text["exit_code"] == 0, text
            structured = field(result, "structured_content", "structuredContent")
            if structured is not None:
                assert structured == text, structured

            bad = await session.call_tool("execute", {"bogus": 1})
            assert field(bad, "is_error", "isError"), bad
    print("python mcp client: ok")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2:]))
