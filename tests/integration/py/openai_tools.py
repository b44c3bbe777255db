#!/usr/bin/env python3
"""Tool calls through the official OpenAI Python client against a running `ember serve`.

The fixture models have random weights, so calls are forced (tool_choice "required" or a
named function): what is checked is the protocol and the constraint, not the model's
judgement. Every returned call's arguments must parse and validate against the tool's
`parameters` schema (the independent `jsonschema` validator). Also: `auto` answers a
well-formed message, plain and streamed; a follow-up with the assistant's calls and the tool
results is accepted; parallel_tool_calls=false gives one call; bad tool input is a 400.

Prints one JSON line with what it saw; exits non-zero (with the reason) on a failed check.
"""
import argparse
import json
import sys

import jsonschema
import openai

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather",
        "description": "Current weather in a city",
        "parameters": {"type": "object",
                       "properties": {"city": {"type": "string", "maxLength": 12},
                                      "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                                      "days": {"type": "integer"}},
                       "required": ["city", "unit"],
                       "additionalProperties": False}}},
    {"type": "function", "function": {
        "name": "set_alarm",
        "description": "Set an alarm",
        "parameters": {"type": "object",
                       "properties": {"hour": {"type": "integer"},
                                      "label": {"type": "string", "maxLength": 8},
                                      "repeat": {"type": "boolean"}},
                       "required": ["hour"],
                       "additionalProperties": False}}},
]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
MESSAGES = [{"role": "user", "content": "What is the weather in Oslo? Then wake me at 7."}]


class CheckFailed(Exception):
    pass


def check(condition, message):
    if not condition:
        raise CheckFailed(message)


def validate_calls(calls, allowed):
    """calls: [{"id", "name", "arguments"}]; each validates against its tool's schema."""
    check(len(calls) >= 1, "no tool call came back")
    ids = set()
    for c in calls:
        check(c["name"] in allowed, f"call of '{c['name']}', not one of {sorted(allowed)}")
        check(c["id"] and c["id"] not in ids, f"call ids must be unique and set: {calls}")
        ids.add(c["id"])
        try:
            args = json.loads(c["arguments"])
        except json.JSONDecodeError as e:
            raise CheckFailed(f"arguments of {c['name']} are not JSON ({e}): {c['arguments']!r}")
        try:
            jsonschema.validate(args, SCHEMAS[c["name"]])
        except jsonschema.ValidationError as e:
            raise CheckFailed(f"arguments of {c['name']} do not validate: {e.message}: {args}")


def plain_calls(response):
    message = response.choices[0].message
    return [{"id": c.id, "name": c.function.name, "arguments": c.function.arguments}
            for c in (message.tool_calls or [])]


def streamed(client, **kwargs):
    """Accumulates a streamed reply: content, calls by index, finish reason."""
    content, calls, finish = "", {}, None
    first_piece_named = True
    for chunk in client.chat.completions.create(stream=True, **kwargs):
        if not chunk.choices:
            continue
        choice = chunk.choices[0]
        delta = choice.delta
        if delta.content:
            content += delta.content
        for piece in delta.tool_calls or []:
            if piece.index not in calls:
                # The first piece of a call carries its id, type and name.
                first_piece_named &= bool(piece.id) and piece.type == "function" and bool(
                    piece.function and piece.function.name)
                calls[piece.index] = {"id": piece.id, "name": piece.function.name, "arguments": ""}
            if piece.function and piece.function.arguments:
                calls[piece.index]["arguments"] += piece.function.arguments
        if choice.finish_reason:
            finish = choice.finish_reason
    check(first_piece_named, "a call's first delta lacks its id, type or name")
    check(sorted(calls) == list(range(len(calls))), f"call indexes not 0..n-1: {sorted(calls)}")
    return content, [calls[i] for i in sorted(calls)], finish


def expect_400(client, what, **kwargs):
    try:
        client.chat.completions.create(**kwargs)
    except openai.BadRequestError as e:
        return str(e)
    raise CheckFailed(f"{what}: expected a 400")


def run(client, args):
    base = dict(model=args.model, messages=MESSAGES, tools=TOOLS, max_tokens=args.max_tokens,
                temperature=args.temperature, seed=7)
    out = {}
    all_names = set(SCHEMAS)

    # required, plain: a call, arguments valid, finish_reason tool_calls.
    r = client.chat.completions.create(tool_choice="required", **base)
    calls = plain_calls(r)
    validate_calls(calls, all_names)
    check(r.choices[0].finish_reason == "tool_calls",
          f"required: finish_reason {r.choices[0].finish_reason}")
    out["required_plain"] = {"calls": calls, "content": r.choices[0].message.content}

    # a named function, streamed.
    content, scalls, finish = streamed(
        client, tool_choice={"type": "function", "function": {"name": "set_alarm"}}, **base)
    validate_calls(scalls, {"set_alarm"})
    check(finish == "tool_calls", f"named stream: finish_reason {finish}")
    check(content == "", f"named stream: content beside the call: {content!r}")
    out["named_streamed"] = {"calls": scalls}

    # required, streamed, one call at most.
    content, one, finish = streamed(client, tool_choice="required", parallel_tool_calls=False,
                                    **base)
    validate_calls(one, all_names)
    check(len(one) == 1, f"parallel_tool_calls=false gave {len(one)} calls")
    check(finish == "tool_calls", f"single stream: finish_reason {finish}")
    out["single_streamed"] = {"calls": one}

    # auto: whatever the random model writes, a well-formed answer without call markup.
    a = client.chat.completions.create(tool_choice="auto", **base)
    am = a.choices[0]
    check(am.finish_reason in ("stop", "length", "tool_calls"), f"auto: {am.finish_reason}")
    for marker in args.markup:
        check(marker not in (am.message.content or ""), f"auto: call markup in content")
    acontent, acalls, afinish = streamed(client, tool_choice="auto", **base)
    check(afinish in ("stop", "length", "tool_calls"), f"auto stream: {afinish}")
    out["auto"] = {"finish_reason": am.finish_reason, "streamed_finish_reason": afinish}

    # The tool results go back: the assistant message as the client returned it, then one
    # tool message per call.
    assistant = r.choices[0].message.model_dump(exclude_none=True)
    follow = list(MESSAGES) + [assistant] + [
        {"role": "tool", "tool_call_id": c["id"], "content": json.dumps({"ok": True, "n": i})}
        for i, c in enumerate(calls)]
    f = client.chat.completions.create(**{**base, "messages": follow})
    check(f.choices[0].finish_reason in ("stop", "length", "tool_calls"),
          f"follow-up: {f.choices[0].finish_reason}")
    out["follow_up"] = {"finish_reason": f.choices[0].finish_reason,
                        "prompt_tokens": f.usage.prompt_tokens,
                        "first_prompt_tokens": r.usage.prompt_tokens}
    check(f.usage.prompt_tokens > r.usage.prompt_tokens, "the follow-up's prompt did not grow")

    # Bad input is refused, naming the problem.
    errors = {
        "tools_not_array": expect_400(client, "tools as an object", **{**base, "tools": TOOLS[0]}),
        "unknown_choice": expect_400(client, "unknown named function", **base,
                                     tool_choice={"type": "function",
                                                  "function": {"name": "nope"}}),
        "tool_without_id": expect_400(client, "tool message without tool_call_id",
                                      **{**base, "messages": MESSAGES + [
                                          {"role": "tool", "content": "x"}]}),
    }
    check("tools" in errors["tools_not_array"], errors["tools_not_array"])
    check("nope" in errors["unknown_choice"], errors["unknown_choice"])
    check("tool_call_id" in errors["tool_without_id"], errors["tool_without_id"])
    out["errors"] = errors
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--base-url", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--max-tokens", type=int, default=96)
    p.add_argument("--temperature", type=float, default=0.8)
    p.add_argument("--markup", action="append", default=[],
                   help="text that must never show in content (the family's call markup)")
    args = p.parse_args()
    client = openai.OpenAI(base_url=args.base_url + "/v1", api_key="none", max_retries=0,
                           timeout=300)
    try:
        out = run(client, args)
    except CheckFailed as e:
        print(f"check failed: {e}", file=sys.stderr)
        return 1
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
