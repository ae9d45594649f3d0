"""One item of a rollout displayed by its type: messages, calls and the outputs that
answer them (function, custom tool, shell, apply patch, computer, web search, MCP, tool
search, program), the final output; anything else as its type and pretty JSON."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from .blocks import (
    arguments_blocks,
    content_blocks,
    diff_block,
    image_block,
    is_patch,
    json_block,
    links_block,
    markdown_block,
    note_block,
    output_blocks,
    scalar_text,
    str_or_empty,
    text_block,
)
from .display import Badge, Block, ItemView, clip_text

ItemUrl = Callable[[int, int], str]


def no_url(segment: int, index: int) -> str:
    return ""


def item_type(item: Any) -> str:
    if isinstance(item, dict):
        value = item.get("type")
        if isinstance(value, str):
            return value
        if "role" in item:
            return "message"
    return ""


def build_item(
    segment: int,
    index: int,
    source: str,
    item: Any,
    *,
    full: bool = False,
    item_url: ItemUrl = no_url,
) -> ItemView:
    """The display of one item: messages, calls and outputs by type; anything else
    (an unknown type, a non-object) as its type and pretty JSON."""
    view = ItemView(segment, index, source, item_type(item), "", "")
    view.url = item_url(segment, index)
    if source == "final_output":
        _final_output(view, item, full)
    elif not isinstance(item, dict):
        _generic(view, item, full)
    else:
        builder = _BUILDERS.get(view.type, _generic)
        builder(view, item, full)
        status = item.get("status")
        if isinstance(status, str) and status not in ("completed", ""):
            view.badges.append(Badge(status, "bad" if status == "failed" else "warn"))
    if source == "interruption":
        view.css += " interruption"
        view.badges.insert(0, Badge("awaiting approval", "warn"))
    return view


_ROLE_RE = re.compile(r"^[a-z_]{1,20}$")


def _message(view: ItemView, item: dict[str, Any], full: bool) -> None:
    role = str_or_empty(item.get("role"))
    view.type = str_or_empty(item.get("type")) or "message"
    view.label = role.capitalize() if role else "Message"
    view.css = f"message role-{role if _ROLE_RE.match(role) else 'other'}"
    phase = item.get("phase")
    if isinstance(phase, str) and phase:
        view.badges.append(Badge(phase.replace("_", " "), "phase"))
    if isinstance(item.get("tool_call_id"), str):
        view.call_id = item["tool_call_id"]
    view.blocks = content_blocks(item.get("content"), full, markdown=True)
    if not view.blocks:
        view.blocks.append(note_block("(empty message)"))


def _output(view: ItemView, item: dict[str, Any], full: bool) -> None:
    view.label = "Output"
    view.css = "output"
    view.call_id = str_or_empty(item.get("call_id"))
    view.blocks = output_blocks(view, item.get("output"), full)


def _function_call(view: ItemView, item: dict[str, Any], full: bool) -> None:
    view.kind_label = "function call" if view.type == "function_call" else view.type
    view.label = str_or_empty(item.get("name")) or view.type
    namespace = str_or_empty(item.get("namespace"))
    if namespace:
        view.label = f"{namespace}.{view.label}"
    view.css = "call"
    view.call_id = str_or_empty(item.get("call_id"))
    view.blocks = arguments_blocks(view, item.get("arguments"), full)


def _custom_tool_call(view: ItemView, item: dict[str, Any], full: bool) -> None:
    view.kind_label = "custom tool call"
    view.label = str_or_empty(item.get("name")) or "custom tool"
    view.css = "call"
    view.call_id = str_or_empty(item.get("call_id"))
    tool_input = item.get("input")
    if isinstance(tool_input, str) and (view.label == "apply_patch" or is_patch(tool_input)):
        view.css = "call patch"
        view.blocks = [diff_block(view, tool_input, full)]
    elif isinstance(tool_input, str):
        view.blocks = [text_block(tool_input, full, caption="input")] if tool_input else []
    else:
        view.blocks = [json_block(tool_input, full, caption="input")]


def _shell_call(view: ItemView, item: dict[str, Any], full: bool) -> None:
    view.kind_label = "shell call" if view.type == "shell_call" else "local shell call"
    view.label = "shell"
    view.css = "call"
    view.call_id = str_or_empty(item.get("call_id"))
    action = item.get("action")
    if not isinstance(action, dict):
        view.blocks = [json_block(action, full, caption="action")]
        return
    commands = action.get("commands", action.get("command"))
    rest = {k: v for k, v in action.items() if k not in ("commands", "command", "type")}
    if isinstance(commands, list) and all(isinstance(c, str) for c in commands):
        joiner = "\n" if "commands" in action else " "
        view.blocks.append(
            Block("text", clip=clip_text(joiner.join(commands), full=full), css="command")
        )
    elif commands is not None:
        rest["commands"] = commands
    rest = {k: v for k, v in rest.items() if v is not None}
    if rest:
        view.blocks.append(Block("fields", fields=[(k, scalar_text(v)) for k, v in rest.items()]))


def _shell_call_output(view: ItemView, item: dict[str, Any], full: bool) -> None:
    view.label = "Output"
    view.css = "output"
    view.call_id = str_or_empty(item.get("call_id")) or str_or_empty(item.get("id"))
    output = item.get("output")
    if not isinstance(output, list):
        view.blocks = output_blocks(view, output, full)
        return
    for chunk in output:
        if not isinstance(chunk, dict):
            view.blocks.append(json_block(chunk, full))
            continue
        outcome = chunk.get("outcome")
        if isinstance(outcome, dict) and outcome.get("type") == "exit":
            code = outcome.get("exit_code")
            view.badges.append(Badge(f"exit {code}", "ok" if code == 0 else "bad"))
        elif isinstance(outcome, dict) and outcome.get("type") == "timeout":
            view.badges.append(Badge("timed out", "bad"))
        stdout, stderr = str_or_empty(chunk.get("stdout")), str_or_empty(chunk.get("stderr"))
        if stdout:
            view.blocks.append(text_block(stdout, full, caption="stdout"))
        if stderr:
            view.blocks.append(text_block(stderr, full, caption="stderr", css="stderr"))
        if not stdout and not stderr:
            view.blocks.append(note_block("(no output)"))


def _apply_patch_call(view: ItemView, item: dict[str, Any], full: bool) -> None:
    view.kind_label = "apply patch call"
    view.label = "apply_patch"
    view.css = "call patch"
    view.call_id = str_or_empty(item.get("call_id"))
    operation = item.get("operation")
    if not isinstance(operation, dict):
        view.blocks = [json_block(operation, full, caption="operation")]
        return
    kind = str_or_empty(operation.get("type")) or "operation"
    path = str_or_empty(operation.get("path"))
    view.blocks.append(Block("fields", fields=[(kind.replace("_", " "), path)]))
    diff = operation.get("diff")
    if isinstance(diff, str) and diff:
        view.blocks.append(diff_block(view, diff, full))


def _apply_patch_output(view: ItemView, item: dict[str, Any], full: bool) -> None:
    _output(view, item, full)
    if item.get("output") in (None, ""):
        view.blocks = []


def _computer_call(view: ItemView, item: dict[str, Any], full: bool) -> None:
    view.kind_label = "computer call"
    view.css = "call"
    view.call_id = str_or_empty(item.get("call_id"))
    actions = item.get("actions")
    if not isinstance(actions, list):
        actions = [item.get("action")]
    names = []
    for action in actions:
        if isinstance(action, dict):
            names.append(str_or_empty(action.get("type")) or "action")
            fields = [(k, scalar_text(v)) for k, v in action.items() if k != "type"]
            caption = names[-1] if len(actions) > 1 else ""
            view.blocks.append(Block("fields", caption=caption, fields=fields))
        elif action is not None:
            view.blocks.append(json_block(action, full, caption="action"))
    view.label = ", ".join(names) or "computer"
    checks = item.get("pending_safety_checks")
    if checks:
        view.blocks.append(json_block(checks, full, caption="pending safety checks"))


def _computer_call_output(view: ItemView, item: dict[str, Any], full: bool) -> None:
    view.label = "Screenshot"
    view.css = "output"
    view.call_id = str_or_empty(item.get("call_id"))
    output = item.get("output")
    if isinstance(output, dict):
        url = output.get("image_url") or (
            f"file {output['file_id']}" if output.get("file_id") else None
        )
        view.blocks.append(image_block(url, "Screenshot"))
    else:
        view.blocks = output_blocks(view, output, full)
    checks = item.get("acknowledged_safety_checks")
    if checks:
        view.blocks.append(json_block(checks, full, caption="acknowledged safety checks"))


def _web_links(values: Any) -> list[str]:
    links = []
    for value in values if isinstance(values, list) else []:
        url = value.get("url") if isinstance(value, dict) else value
        if isinstance(url, str):
            links.append(url)
    return links


def _web_search_call(view: ItemView, item: dict[str, Any], full: bool) -> None:
    view.kind_label = "web search"
    view.css = "call"
    action = item.get("action")
    if not isinstance(action, dict):
        view.label = "search"
        if action is not None:
            view.blocks.append(json_block(action, full, caption="action"))
        return
    view.label = (str_or_empty(action.get("type")) or "search").replace("_", " ")
    fields = []
    if isinstance(action.get("query"), str):
        fields.append(("query", action["query"]))
    for query in action.get("queries") or []:
        if isinstance(query, str) and query != action.get("query"):
            fields.append(("query", query))
    for key in ("url", "pattern"):
        if isinstance(action.get(key), str):
            fields.append((key, action[key]))
    if fields:
        view.blocks.append(Block("fields", fields=fields))
    sources = _web_links(action.get("sources"))
    if sources:
        view.blocks.append(links_block(sources, "sources"))


def _mcp_call(view: ItemView, item: dict[str, Any], full: bool) -> None:
    is_request = view.type == "mcp_approval_request"
    view.kind_label = "MCP approval request" if is_request else "MCP call"
    view.label = str_or_empty(item.get("name")) or "tool"
    view.css = "call"
    server = str_or_empty(item.get("server_label"))
    if server:
        view.badges.append(Badge(server, "server"))
    view.blocks = arguments_blocks(view, item.get("arguments"), full)
    if not is_request:
        output, error = item.get("output"), item.get("error")
        if isinstance(output, str) and output:
            view.blocks.append(text_block(output, full, caption="output"))
        elif output not in (None, ""):
            view.blocks.append(json_block(output, full, caption="output"))
        if error:
            view.badges.append(Badge("error", "bad"))
            view.blocks.append(text_block(scalar_text(error), full, caption="error", css="stderr"))


def _mcp_approval_response(view: ItemView, item: dict[str, Any], full: bool) -> None:
    view.label = "Approval"
    view.css = "output"
    view.call_id = str_or_empty(item.get("approval_request_id"))
    approve = item.get("approve")
    view.badges.append(Badge("approved", "ok") if approve is True else Badge("denied", "bad"))
    reason = item.get("reason")
    if isinstance(reason, str) and reason:
        view.blocks.append(text_block(reason, full, caption="reason"))


def _mcp_list_tools(view: ItemView, item: dict[str, Any], full: bool) -> None:
    view.kind_label = "MCP tools list"
    view.label = str_or_empty(item.get("server_label")) or "server"
    view.css = "call"
    tools = item.get("tools")
    names = (
        [str_or_empty(t.get("name")) for t in tools if isinstance(t, dict)]
        if isinstance(tools, list)
        else []
    )
    if names:
        view.blocks.append(Block("fields", fields=[("tools", ", ".join(filter(None, names)))]))
    if item.get("error"):
        view.blocks.append(
            text_block(scalar_text(item["error"]), full, caption="error", css="stderr")
        )


def _tool_search_call(view: ItemView, item: dict[str, Any], full: bool) -> None:
    view.kind_label = "tool search"
    view.label = str_or_empty(item.get("execution")) or "search"
    view.css = "call"
    view.call_id = str_or_empty(item.get("call_id"))
    view.blocks = arguments_blocks(view, item.get("arguments"), full)


def _tool_search_output(view: ItemView, item: dict[str, Any], full: bool) -> None:
    view.label = "Tools found"
    view.css = "output"
    view.call_id = str_or_empty(item.get("call_id"))
    tools = item.get("tools")
    if isinstance(tools, list):
        names = [str_or_empty(t.get("name")) for t in tools if isinstance(t, dict)]
        view.blocks.append(Block("fields", fields=[("tools", ", ".join(filter(None, names)))]))
        view.blocks.append(json_block(tools, full, caption="definitions"))
    elif tools is not None:
        view.blocks.append(json_block(tools, full, caption="tools"))


def _program(view: ItemView, item: dict[str, Any], full: bool) -> None:
    view.kind_label = "program"
    view.label = "program"
    view.css = "call"
    view.call_id = str_or_empty(item.get("call_id"))
    code = item.get("code")
    if isinstance(code, str):
        view.blocks.append(Block("text", "code", clip_text(code, full=full), css="code"))
    elif code is not None:
        view.blocks.append(json_block(code, full, caption="code"))


def _program_output(view: ItemView, item: dict[str, Any], full: bool) -> None:
    view.label = "Result"
    view.css = "output"
    view.call_id = str_or_empty(item.get("call_id"))
    view.blocks = output_blocks(view, item.get("result", item.get("output")), full)


def _generic(view: ItemView, item: Any, full: bool) -> None:
    view.kind_label = "item"
    view.label = view.type or ("untyped object" if isinstance(item, dict) else _type_name(item))
    view.css = "generic"
    view.blocks = [json_block(item, full)]


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "boolean", int: "number", float: "number", str: "string"}.get(
        type(value), "array" if isinstance(value, list) else "value"
    )


def _final_output(view: ItemView, value: Any, full: bool) -> None:
    view.type = "final_output"
    view.label = "Final output"
    view.css = "final-output"
    if isinstance(value, str):
        view.blocks = [markdown_block(value, full)] if value else [note_block("(empty string)")]
    else:
        view.blocks = [json_block(value, full)]


_BUILDERS: dict[str, Callable[[ItemView, dict[str, Any], bool], None]] = {
    "message": _message,
    "function_call": _function_call,
    "function_call_output": _output,
    "custom_tool_call": _custom_tool_call,
    "custom_tool_call_output": _output,
    "shell_call": _shell_call,
    "shell_call_output": _shell_call_output,
    "local_shell_call": _shell_call,
    "local_shell_call_output": _shell_call_output,
    "apply_patch_call": _apply_patch_call,
    "apply_patch_call_output": _apply_patch_output,
    "computer_call": _computer_call,
    "computer_call_output": _computer_call_output,
    "web_search_call": _web_search_call,
    "mcp_call": _mcp_call,
    "mcp_approval_request": _mcp_call,
    "mcp_approval_response": _mcp_approval_response,
    "mcp_list_tools": _mcp_list_tools,
    "tool_search_call": _tool_search_call,
    "tool_search_output": _tool_search_output,
    "program": _program,
    "program_output": _program_output,
}
