#!/usr/bin/env python3
"""Renders conversations with tools, tool calls and tool results through chat templates the
way HF transformers' apply_chat_template does (jinja2 ImmutableSandboxedEnvironment with
trim_blocks, lstrip_blocks, loopcontrols; tojson as json.dumps; raise_exception; strftime_now
fixed), with messages shaped as HF's tool-use documentation shapes them: an assistant turn's
tool_calls as [{"id", "type": "function", "function": {"name", "arguments": <dict>}}], a tool
result as {"role": "tool", "content", "tool_call_id", "name"}.

For each template and conversation it writes the OpenAI request a client would send for the
same conversation (arguments as JSON strings, content null beside tool calls) to OUT_DIR, and
lists in OUT_DIR/cases.json what HF renders for it (or the error it raises), so a test can
render the request with `ember render --request` and compare.

Usage: render_tool_turns.py TEMPLATES_DIR OUT_DIR TEMPLATE_NAME...
"""
import copy
import json
import os
import sys
from datetime import datetime

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

DATE = datetime(2026, 11, 21, 12, 0, 0)
BOS, EOS = "<s>", "</s>"


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def environment():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                       extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: DATE.strftime(fmt)
    return env


TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather",
        "description": "Current weather in a city",
        "parameters": {"type": "object",
                       "properties": {"city": {"type": "string", "description": "City name"},
                                      "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                       "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "get_time",
        "description": "Local time in a time zone",
        "parameters": {"type": "object",
                       "properties": {"zone": {"type": "string"}},
                       "required": ["zone"]}}},
]


def call(call_id, name, arguments):
    return {"id": call_id, "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments)}}


# OpenAI-shaped conversations (what a client sends to ember serve).
CONVERSATIONS = {
    "one_call": [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "What is the weather in Oslo?"},
        {"role": "assistant", "content": None,
         "tool_calls": [call("call_1", "get_weather", {"city": "Oslo", "unit": "celsius"})]},
        {"role": "tool", "tool_call_id": "call_1", "name": "get_weather",
         "content": "{\"temperature\": 3, \"sky\": \"cloudy\"}"},
    ],
    "no_system_then_answer": [
        {"role": "user", "content": "Time in Tokyo?"},
        {"role": "assistant", "content": None,
         "tool_calls": [call("call_7", "get_time", {"zone": "Asia/Tokyo"})]},
        {"role": "tool", "tool_call_id": "call_7", "name": "get_time", "content": "21:04"},
        {"role": "assistant", "content": "It is 21:04 in Tokyo."},
        {"role": "user", "content": "Thanks!"},
    ],
    "parallel_calls": [
        {"role": "user", "content": "Weather in Oslo and the time in Tokyo?"},
        {"role": "assistant", "content": None,
         "tool_calls": [call("call_a", "get_weather", {"city": "Oslo"}),
                        call("call_b", "get_time", {"zone": "Asia/Tokyo"})]},
        {"role": "tool", "tool_call_id": "call_a", "name": "get_weather", "content": "sunny"},
        {"role": "tool", "tool_call_id": "call_b", "name": "get_time", "content": "21:04"},
    ],
}


def hf_messages(messages):
    """The conversation as HF's documentation has users pass it to apply_chat_template."""
    out = []
    for m in copy.deepcopy(messages):
        if m.get("content") is None:
            m["content"] = ""
        for c in m.get("tool_calls", []):
            c["function"]["arguments"] = json.loads(c["function"]["arguments"])
        shaped = {"role": m["role"], "content": m["content"]}
        if "tool_calls" in m:
            shaped["tool_calls"] = m["tool_calls"]
        if m["role"] == "tool":
            shaped["tool_call_id"] = m["tool_call_id"]
            shaped["name"] = m["name"]
        out.append(shaped)
    return out


def main():
    templates_dir, out_dir, names = sys.argv[1], sys.argv[2], sys.argv[3:]
    env = environment()
    cases = []
    for conv_name, messages in CONVERSATIONS.items():
        request = os.path.join(out_dir, conv_name + ".json")
        with open(request, "w", encoding="utf-8") as f:
            json.dump({"messages": messages, "tools": TOOLS}, f, ensure_ascii=False)
    for name in names:
        with open(os.path.join(templates_dir, name + ".jinja"), encoding="utf-8") as f:
            template = env.from_string(f.read())
        for conv_name, messages in CONVERSATIONS.items():
            for generation_prompt in (True, False):
                case = {"template": name, "conversation": conv_name,
                        "request": os.path.join(out_dir, conv_name + ".json"),
                        "add_generation_prompt": generation_prompt}
                try:
                    case["text"] = template.render(messages=hf_messages(messages), tools=TOOLS,
                                                   add_generation_prompt=generation_prompt,
                                                   bos_token=BOS, eos_token=EOS)
                except Exception as e:  # the template refuses the conversation
                    case["error"] = str(e)
                cases.append(case)
    with open(os.path.join(out_dir, "cases.json"), "w", encoding="utf-8") as f:
        json.dump({"date": DATE.strftime("%Y-%m-%d"), "bos": BOS, "eos": EOS, "cases": cases}, f,
                  ensure_ascii=False, indent=1)
    print("rendered", sum(1 for c in cases if "text" in c), "of", len(cases))


if __name__ == "__main__":
    main()
