"""The offline model answers like the Anthropic Messages API and plays its scripts."""

from __future__ import annotations

import asyncio
import http.client
import json
import subprocess
import sys
from typing import Any
from urllib.parse import urlsplit

import pytest

from dataplane_agent.offline_model import OfflineModel
from dataplane_agent.offline_model.scripts import HELLO_COMMAND, REPORTED_PROMPT_MAX

BASH_TOOL = {"name": "Bash", "description": "Run a shell command", "input_schema": {"type": "object"}}


def _http(base_url: str, method: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, str, str]:
    url = urlsplit(base_url)
    connection = http.client.HTTPConnection(url.hostname, url.port, timeout=10)
    try:
        payload = json.dumps(body).encode() if body is not None else None
        connection.request(
            method, path, body=payload, headers={"content-type": "application/json", "x-api-key": "test"}
        )
        response = connection.getresponse()
        return response.status, response.getheader("content-type", ""), response.read().decode()
    finally:
        connection.close()


async def _call(
    model: OfflineModel, method: str, path: str, body: dict[str, Any] | None = None
) -> tuple[int, str, str]:
    return await asyncio.to_thread(_http, model.base_url, method, path, body)


def _request(messages: list[dict[str, Any]], stream: bool = False) -> dict[str, Any]:
    return {"model": "claude-test", "max_tokens": 1024, "stream": stream, "tools": [BASH_TOOL], "messages": messages}


def _assert_message(message: dict[str, Any]) -> None:
    assert message["type"] == "message" and message["role"] == "assistant"
    assert message["id"].startswith("msg_")
    assert message["stop_reason"] in ("end_turn", "tool_use")
    assert isinstance(message["usage"]["input_tokens"], int) and isinstance(message["usage"]["output_tokens"], int)
    for block in message["content"]:
        assert block["type"] in ("text", "tool_use")
        if block["type"] == "tool_use":
            assert block["id"].startswith("toolu_") and block["name"] in ("Bash", "AskUserQuestion")
            assert isinstance(block["input"]["command" if block["name"] == "Bash" else "questions"], (str, list))
    assert (message["stop_reason"] == "tool_use") == any(b["type"] == "tool_use" for b in message["content"])


def _assemble_stream(body: str) -> dict[str, Any]:
    """Rebuild the message from its SSE events, checking the event grammar on the way."""
    events = []
    for chunk in body.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in chunk.splitlines())
        data = json.loads(lines["data"])
        assert lines["event"] == data["type"]
        events.append(data)
    kinds = [event["type"] for event in events]
    assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]
    message = dict(events[0]["message"])
    assert message["content"] == [] and message["stop_reason"] is None
    blocks: list[dict[str, Any]] = []
    partial_json: dict[int, str] = {}
    open_index = None
    for event in events[1:-2]:
        if event["type"] == "content_block_start":
            assert open_index is None and event["index"] == len(blocks)
            open_index = event["index"]
            blocks.append(dict(event["content_block"]))
        elif event["type"] == "content_block_delta":
            assert event["index"] == open_index
            delta = event["delta"]
            if delta["type"] == "text_delta":
                blocks[open_index]["text"] += delta["text"]
            else:
                assert delta["type"] == "input_json_delta"
                partial_json[open_index] = partial_json.get(open_index, "") + delta["partial_json"]
        else:
            assert event["type"] == "content_block_stop" and event["index"] == open_index
            open_index = None
    for index, text in partial_json.items():
        blocks[index]["input"] = json.loads(text)
    message["content"] = blocks
    message["stop_reason"] = events[-2]["delta"]["stop_reason"]
    message["usage"] = {**message["usage"], **events[-2]["usage"]}
    return message


async def _converse(
    model: OfflineModel, prompt: str, tool_output: str, stream: bool = True, limit: int = 10
) -> list[dict[str, Any]]:
    """Play the client's side: answer every tool_use with `tool_output` until the model ends the turn."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": prompt}]
    replies = []
    for _ in range(limit):
        status, content_type, body = await _call(model, "POST", "/v1/messages", _request(messages, stream=stream))
        assert status == 200
        reply = _assemble_stream(body) if stream else json.loads(body)
        assert content_type.startswith("text/event-stream" if stream else "application/json")
        _assert_message(reply)
        replies.append(reply)
        if reply["stop_reason"] == "end_turn":
            return replies
        messages.append({"role": "assistant", "content": reply["content"]})
        tool_use = next(b for b in reply["content"] if b["type"] == "tool_use")
        result = {"type": "tool_result", "tool_use_id": tool_use["id"], "content": tool_output}
        messages.append({"role": "user", "content": [result]})
    raise AssertionError("the model never ended the turn")


def _commands(replies: list[dict[str, Any]]) -> list[str]:
    return [b["input"]["command"] for r in replies for b in r["content"] if b["type"] == "tool_use"]


def _final_text(replies: list[dict[str, Any]]) -> str:
    return "".join(b["text"] for b in replies[-1]["content"] if b["type"] == "text")


async def test_streaming_reply_is_a_valid_message_stream(offline_model: OfflineModel) -> None:
    status, _, body = await _call(
        offline_model, "POST", "/v1/messages", _request([{"role": "user", "content": "hi"}], stream=True)
    )
    assert status == 200
    message = _assemble_stream(body)
    _assert_message(message)
    assert message["stop_reason"] == "tool_use"
    assert [b["type"] for b in message["content"]] == ["text", "tool_use"]
    assert message["content"][1]["input"]["command"] == HELLO_COMMAND


async def test_non_streaming_reply_is_a_valid_message(offline_model: OfflineModel) -> None:
    status, content_type, body = await _call(
        offline_model, "POST", "/v1/messages", _request([{"role": "user", "content": "hi"}])
    )
    assert status == 200 and content_type == "application/json"
    message = json.loads(body)
    _assert_message(message)
    assert message["model"] == "claude-test"


async def test_usage_grows_with_the_request_and_reply_and_a_marked_prefix_is_cached(
    offline_model: OfflineModel,
) -> None:
    def usage(prompt: str, system: list[dict[str, Any]]) -> dict[str, int]:
        request = {**_request([{"role": "user", "content": prompt}], stream=True), "system": system}
        status, _, body = _http(offline_model.base_url, "POST", "/v1/messages", request)
        assert status == 200
        return _assemble_stream(body)["usage"]

    marked = [{"type": "text", "text": "You are a careful agent. " * 40, "cache_control": {"type": "ephemeral"}}]
    first = await asyncio.to_thread(usage, "run: echo hi", marked)
    again = await asyncio.to_thread(usage, "run: echo " + "much longer " * 50, marked)
    assert first["cache_creation_input_tokens"] > 250 and first["cache_read_input_tokens"] == 0
    assert again["cache_read_input_tokens"] == first["cache_creation_input_tokens"]
    assert again["cache_creation_input_tokens"] == 0
    assert again["input_tokens"] > first["input_tokens"] + 100  # the longer prompt
    assert again["output_tokens"] > first["output_tokens"]  # a longer command in the reply
    plain = await asyncio.to_thread(usage, "run: echo hi", [{"type": "text", "text": "You are a careful agent. " * 40}])
    assert plain["cache_creation_input_tokens"] == plain["cache_read_input_tokens"] == 0
    assert plain["input_tokens"] > first["input_tokens"] + 250  # the system prompt, not cached


@pytest.mark.parametrize("stream", [True, False])
async def test_default_script_creates_hello_txt(offline_model: OfflineModel, stream: bool) -> None:
    replies = await _converse(offline_model, "Say hello", "Hello from AstraBox", stream=stream)
    assert _commands(replies) == [HELLO_COMMAND]
    assert "hello.txt" in _final_text(replies) and "Hello from AstraBox" in _final_text(replies)


async def test_run_script_runs_exactly_the_command_and_quotes_its_output(offline_model: OfflineModel) -> None:
    replies = await _converse(offline_model, "Please do this.\nrun: ls -la | wc -l\nThanks", "42 lines of output")
    assert _commands(replies) == ["ls -la | wc -l"]
    assert "42 lines of output" in _final_text(replies)


async def test_steps_script_runs_n_sequential_steps(offline_model: OfflineModel) -> None:
    replies = await _converse(offline_model, "steps: 3", "ok")
    assert _commands(replies) == [f"sleep 0.3; echo step {i}" for i in (1, 2, 3)]
    assert _final_text(replies) == "Finished 3 steps."
    tool_ids = [b["id"] for r in replies for b in r["content"] if b["type"] == "tool_use"]
    assert len(set(tool_ids)) == 3


async def test_a_new_prompt_restarts_the_script(offline_model: OfflineModel) -> None:
    """Tool results from an earlier prompt do not count towards the newest one."""
    earlier = [
        {"role": "user", "content": "steps: 2"},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "x"}}],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "step 1"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "..."}]},
        {"role": "user", "content": [{"type": "text", "text": "run: echo again"}]},
    ]
    status, _, body = await _call(offline_model, "POST", "/v1/messages", _request(earlier))
    assert status == 200
    assert _commands([json.loads(body)]) == ["echo again"]


async def _reply(model: OfflineModel, messages: list[dict[str, Any]]) -> dict[str, Any]:
    status, _, body = await _call(model, "POST", "/v1/messages", _request(messages))
    assert status == 200
    reply = json.loads(body)
    _assert_message(reply)
    return reply


def _tool_turn(prompt: str, tool_use: dict[str, Any], result: str, is_error: bool = False) -> list[dict[str, Any]]:
    """A prompt, the model's tool use, and the tool's result, as the CLI sends them."""
    tool_use = {"type": "tool_use", "id": "toolu_1", **tool_use}
    tool_result = {"type": "tool_result", "tool_use_id": "toolu_1", "content": result, "is_error": is_error}
    return [
        {"role": "user", "content": prompt},
        {"role": "assistant", "content": [tool_use]},
        {"role": "user", "content": [tool_result]},
    ]


async def test_sleep_script_runs_a_long_command(offline_model: OfflineModel) -> None:
    replies = await _converse(offline_model, "sleep: 30", "sleeping\nslept")
    assert _commands(replies) == ["echo sleeping; sleep 30; echo slept"]
    assert _final_text(replies) == "Done sleeping: sleeping\nslept"


async def test_ask_script_asks_a_question_and_quotes_the_answer(offline_model: OfflineModel) -> None:
    first = await _reply(offline_model, [{"role": "user", "content": "ask: Which colour? red|blue"}])
    [ask] = [b for b in first["content"] if b["type"] == "tool_use"]
    assert ask["name"] == "AskUserQuestion"
    assert ask["input"] == {
        "questions": [
            {
                "question": "Which colour?",
                "header": "Question",
                "options": [
                    {"label": "red", "description": "Choose red"},
                    {"label": "blue", "description": "Choose blue"},
                ],
                "multiSelect": False,
            }
        ]
    }
    # What the CLI hands back once the answers are in the tool's input.
    answered = (
        'Your questions have been answered: "Which colour?"="blue". You can now continue with these answers in mind.'
    )
    final = await _reply(offline_model, _tool_turn("ask: Which colour? red|blue", ask, answered))
    assert _final_text([final]) == "You chose: blue."


async def test_background_script_and_the_task_notification(offline_model: OfflineModel) -> None:
    first = await _reply(offline_model, [{"role": "user", "content": "background: sleep 1; echo done > bg.txt"}])
    [bash] = [b for b in first["content"] if b["type"] == "tool_use"]
    assert bash["input"]["command"] == "sleep 1; echo done > bg.txt" and bash["input"]["run_in_background"] is True
    messages = _tool_turn("background: sleep 1; echo done > bg.txt", bash, "Command running in background with ID: b1.")
    assert _final_text([await _reply(offline_model, messages)]) == "Started in the background."

    notification = (
        "<system-reminder>\n[SYSTEM NOTIFICATION - NOT USER INPUT]\n<task-notification>\n<task-id>b1</task-id>\n"
        '<status>completed</status>\n<summary>Background command "Run" completed (exit code 0)</summary>\n'
        "</task-notification>\n</system-reminder>"
    )
    messages += [
        {"role": "assistant", "content": [{"type": "text", "text": "Started in the background."}]},
        {"role": "user", "content": [{"type": "text", "text": notification}]},
    ]
    reply = await _reply(offline_model, messages)
    assert _final_text([reply]) == 'Background task finished: Background command "Run" completed (exit code 0)'


async def test_a_refused_or_failed_tool_is_reflected_in_the_reply(offline_model: OfflineModel) -> None:
    tool_use = {"name": "Bash", "input": {"command": "touch x"}}
    denied = await _reply(offline_model, _tool_turn("run: touch x", tool_use, "Not in this folder.", is_error=True))
    assert _final_text([denied]) == "The command was denied: Not in this folder."
    failed = await _reply(
        offline_model, _tool_turn("run: touch x", tool_use, "Exit code 1\ntouch: denied", is_error=True)
    )
    assert _final_text([failed]) == "The command failed: Exit code 1\ntouch: denied"


async def test_a_prompt_merged_with_an_interrupted_tool_result_starts_afresh(offline_model: OfflineModel) -> None:
    """After an interrupt the CLI sends the stopped tool's result, its note and the next prompt as one message."""
    messages = _tool_turn("sleep: 30", {"name": "Bash", "input": {"command": "sleep 30"}}, "stopped", is_error=True)
    messages[-1]["content"] += [
        {"type": "text", "text": "[Request interrupted by user for tool use]"},
        {"type": "text", "text": "run: echo after"},
    ]
    assert _commands([await _reply(offline_model, messages)]) == ["echo after"]


async def _raw_reply(model: OfflineModel, body: dict[str, Any]) -> dict[str, Any]:
    status, _, text = await _call(model, "POST", "/v1/messages", body)
    assert status == 200
    return json.loads(text)


async def test_report_setup_says_which_system_prompt_and_tools_it_received(offline_model: OfflineModel) -> None:
    messages = [{"role": "user", "content": "report: setup"}]
    tools = [BASH_TOOL, {**BASH_TOOL, "name": "Read"}, {**BASH_TOOL, "name": "mcp__docs__search"}]
    # The CLI sends the system prompt as text blocks; a plain string is reported as well.
    blocks = [{"type": "text", "text": "You are Claude Code."}, {"type": "text", "text": "Answer in French."}]
    for system, reported in ((blocks, "You are Claude Code.\nAnswer in French."), ("Be brief.", "Be brief.")):
        reply = await _raw_reply(offline_model, {**_request(messages), "system": system, "tools": tools})
        assert reply["stop_reason"] == "end_turn"
        assert _final_text([reply]) == f"System prompt: {reported}\nTools: Bash, Read, mcp__docs__search"

    # A long prompt: its head and its tail, verbatim, and how much was left out between.
    long = "H" * 8000 + "M" * 20000 + "T" * 12000
    text = _final_text([await _raw_reply(offline_model, {**_request(messages), "system": long})])
    prompt = text.removeprefix("System prompt: ").rpartition("\nTools: ")[0]
    tail = REPORTED_PROMPT_MAX - 4096
    assert prompt == "H" * 4096 + f"\n[… {len(long) - REPORTED_PROMPT_MAX} characters …]\n" + long[-tail:]
    assert long[-tail:].endswith("T" * 12000)


async def test_report_history_lists_the_earlier_prompts_it_was_given(offline_model: OfflineModel) -> None:
    messages = [
        {"role": "user", "content": "remember: the fact is 41"},
        {"role": "assistant", "content": "Noted."},
        {"role": "user", "content": [{"type": "text", "text": "<system-reminder>x</system-reminder>"}]},
        {"role": "user", "content": "remember: the colour is teal"},
        {"role": "assistant", "content": "Noted."},
        {"role": "user", "content": "report: history"},
    ]
    reply = await _raw_reply(offline_model, _request(messages))
    assert _final_text([reply]) == "Earlier prompts: remember: the fact is 41 | remember: the colour is teal"
    alone = await _raw_reply(offline_model, _request([{"role": "user", "content": "report: history"}]))
    assert _final_text([alone]) == "Earlier prompts: "


async def test_the_tool_script_calls_any_tool_with_its_input_and_quotes_the_result(offline_model: OfflineModel) -> None:
    prompt = 'tool: Read {"file_path": "/workspace/notes.txt", "limit": 2}'
    first = await _raw_reply(offline_model, _request([{"role": "user", "content": prompt}]))
    [call] = [b for b in first["content"] if b["type"] == "tool_use"]
    assert (call["name"], call["input"]) == ("Read", {"file_path": "/workspace/notes.txt", "limit": 2})
    assert first["stop_reason"] == "tool_use"

    tool_use = {"name": "Read", "input": call["input"]}
    done = await _raw_reply(offline_model, _request(_tool_turn(prompt, tool_use, "1\tread me\n")))
    assert _final_text([done]) == "Read returned: 1\tread me"
    refused = await _raw_reply(
        offline_model, _request(_tool_turn(prompt, tool_use, "Read is denied by the agent's policy.", is_error=True))
    )
    assert _final_text([refused]) == "The command was denied: Read is denied by the agent's policy."

    bad = await _raw_reply(offline_model, _request([{"role": "user", "content": "tool: Read {not json}"}]))
    assert bad["stop_reason"] == "end_turn" and _final_text([bad]).startswith("The input for Read is not JSON")


async def test_side_requests_and_unknown_paths(offline_model: OfflineModel) -> None:
    title_request = {
        "model": "claude-haiku",
        "max_tokens": 50,
        "messages": [{"role": "user", "content": "Title for: make hello"}],
    }
    status, _, body = await _call(offline_model, "POST", "/v1/messages", title_request)
    side = json.loads(body)
    assert status == 200 and side["stop_reason"] == "end_turn" and side["content"][0]["type"] == "text"

    status, _, body = await _call(
        offline_model, "POST", "/v1/messages/count_tokens", _request([{"role": "user", "content": "hi"}])
    )
    assert status == 200 and json.loads(body)["input_tokens"] > 0

    status, _, body = await _call(offline_model, "GET", "/v1/nothing-here")
    assert status == 404 and json.loads(body)["error"]["type"] == "not_found_error"

    status, _, body = await _call(offline_model, "POST", "/v1/messages", {"model": "m", "messages": []})
    assert status == 400 and json.loads(body)["type"] == "error"


async def test_stopping_ends_open_connections_without_an_asyncio_error_report() -> None:
    """The CLI keeps its connections to the model open between requests: stopping the model ends
    them (the client sees the connection close) and asyncio reports nothing, where a cancelled
    connection task made Python 3.11 print a CancelledError traceback at every shutdown."""
    loop = asyncio.get_running_loop()
    reported: list[dict[str, Any]] = []
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _loop, context: reported.append(context))
    try:
        model = OfflineModel()
        await model.start()
        url = urlsplit(model.base_url)
        idle_reader, idle_writer = await asyncio.open_connection(url.hostname, url.port)
        busy_reader, busy_writer = await asyncio.open_connection(url.hostname, url.port)
        busy_writer.write(b"POST /v1/messages HTTP/1.1\r\ncontent-length: 100\r\n\r\n{")  # a body not all sent
        await busy_writer.drain()
        await asyncio.sleep(0.1)  # both connections' handlers are waiting on their reads

        await model.stop()

        async with asyncio.timeout(5):
            assert await idle_reader.read() == b"" and await busy_reader.read() == b""
        for writer in (idle_writer, busy_writer):
            writer.close()
        await asyncio.sleep(0.1)  # done-callbacks run
    finally:
        loop.set_exception_handler(previous)
    assert reported == []


def test_module_runs_in_the_foreground_and_prints_its_url() -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "dataplane_agent.offline_model", "--port", "0"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout is not None
        base_url = process.stdout.readline().strip()
        assert base_url.startswith("http://127.0.0.1:")
        status, _, body = _http(base_url, "POST", "/v1/messages", _request([{"role": "user", "content": "run: true"}]))
        assert status == 200 and _commands([json.loads(body)]) == ["true"]
    finally:
        process.terminate()
        assert process.wait(timeout=10) == 0
