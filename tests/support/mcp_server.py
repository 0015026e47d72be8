"""A small stdio MCP server for the tests: standard library only, so that it runs inside a sandbox
with nothing but python3 (`python3 mcp_server.py`).

It speaks JSON-RPC 2.0 on stdin/stdout, one message a line (the MCP stdio transport), and answers
`initialize`, `ping`, `tools/list` and `tools/call`; notifications get no answer and any other
method is "method not found". Its tools:

    echo   {"text": str}          → the text
    add    {"a": num, "b": num}   → their sum
    where  {}                     → "cwd=<its working directory> uid=<its user id> tag=<$MCP_TEST_TAG>",
                                    which tells a test where it runs (a sandbox's /workspace, its
                                    uid) and with which environment
    search {"query": str}         → "found <query> in <the file this server is>", as the README's
                                    docs server would answer

Each call is also appended to `mcp-calls.log` in its working directory, so that a test can tell the
server really ran there and was called.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

NAME = "astrabox-test-mcp"
_DEFAULT_PROTOCOL = "2025-06-18"
_NUMBER = {"type": "number"}
TOOLS = [
    {
        "name": "echo",
        "description": "Returns the text it is given.",
        "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
    },
    {
        "name": "add",
        "description": "Adds two numbers.",
        "inputSchema": {"type": "object", "properties": {"a": _NUMBER, "b": _NUMBER}, "required": ["a", "b"]},
    },
    {
        "name": "search",
        "description": "Searches the docs for a query.",
        "inputSchema": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
    },
    {
        "name": "where",
        "description": "Says where the server runs: its working directory, user id and tag.",
        "inputSchema": {"type": "object", "properties": {}},
    },
]


def call(name: str, arguments: dict[str, Any]) -> str:
    """A tool's text result (KeyError for an unknown tool)."""
    if name == "echo":
        return str(arguments.get("text", ""))
    if name == "add":
        total = float(arguments["a"]) + float(arguments["b"])
        return str(int(total)) if total.is_integer() else str(total)
    if name == "search":
        return f"found {arguments['query']} in {os.path.abspath(__file__)}"
    if name == "where":
        return f"cwd={os.getcwd()} uid={os.getuid()} tag={os.environ.get('MCP_TEST_TAG', '')}"
    raise KeyError(name)


def answer(message: dict[str, Any]) -> dict[str, Any] | None:
    """The response to one JSON-RPC message; None for a notification."""
    if "id" not in message:
        return None
    method, params = message.get("method"), message.get("params") or {}
    if method == "initialize":
        result: dict[str, Any] = {
            "protocolVersion": params.get("protocolVersion", _DEFAULT_PROTOCOL),
            "capabilities": {"tools": {}},
            "serverInfo": {"name": NAME, "version": "1.0"},
        }
    elif method == "ping":
        result = {}
    elif method == "tools/list":
        result = {"tools": TOOLS}
    elif method == "tools/call":
        name = str(params.get("name", ""))
        with open("mcp-calls.log", "a", encoding="utf-8") as calls:
            calls.write(json.dumps({"tool": name, "arguments": params.get("arguments")}) + "\n")
        try:
            text, is_error = call(name, params.get("arguments") or {}), False
        except (KeyError, TypeError, ValueError) as error:
            text, is_error = f"cannot call {name!r}: {error!r}", True
        result = {"content": [{"type": "text", "text": text}], "isError": is_error}
    else:
        return {"jsonrpc": "2.0", "id": message["id"], "error": {"code": -32601, "message": f"no method {method!r}"}}
    return {"jsonrpc": "2.0", "id": message["id"], "result": result}


def main() -> None:
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            message = json.loads(line)
        except ValueError:
            response: dict[str, Any] | None = {
                "jsonrpc": "2.0",
                "id": None,
                "error": {"code": -32700, "message": "parse error"},
            }
        else:
            response = answer(message) if isinstance(message, dict) else None
        if response is not None:
            sys.stdout.write(json.dumps(response) + "\n")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
