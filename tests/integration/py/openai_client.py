"""Drives a running `ember serve` with the official OpenAI client library (PyPI `openai`).

    python openai_client.py --base-url URL --model NAME --messages JSON --completion-prompt TEXT
                            [--max-tokens N] [--completion-max-tokens N] [--cancel-max-tokens N]

Run by tests/integration/test_serve_openai_client.cpp from the venv that scripts/test_venv.sh
makes. It checks what only a client sees (the typed objects, the exception classes a reply
maps to, a stream read and a stream abandoned) and prints one JSON line of what it observed,
for the C++ test to compare with what does not come from the server (the fixtures' HF
references, the server's log). On a failed check it prints `FAILED: ...` on stderr and exits 1.
"""

import argparse
import json
import sys
import time
import traceback
import urllib.request

try:
    import openai
except ImportError as e:
    sys.exit(f"FAILED: cannot import openai ({e}); run scripts/test_venv.sh BUILD_DIR")


class CheckFailed(Exception):
    pass


def check(condition, what):
    # Not `assert`: that is compiled out under `python -O`.
    if not condition:
        raise CheckFailed(what)


def expect_error(error_class, call):
    """Runs `call`, which must raise `error_class`; returns the exception."""
    try:
        call()
    except openai.APIError as e:
        check(isinstance(e, error_class),
              f"expected {error_class.__name__}, got {type(e).__name__}: {e}")
        return e
    raise CheckFailed(f"expected {error_class.__name__}, but the request succeeded")


def reasoning_of(delta):
    # Ember streams a thinking model's reasoning as `reasoning_content`, a field the library's
    # types do not declare; they keep undeclared fields as attributes.
    return getattr(delta, "reasoning_content", None) or ""


def completion_ids(response):
    # Ember adds an `ember` object (slot, reuse, the generated token ids) to a reply and to the
    # usage chunk of a stream; the library keeps it as an undeclared field.
    ember = getattr(response, "ember", None)
    check(isinstance(ember, dict) and "completion_ids" in ember,
          f"no ember.completion_ids in the reply: {ember!r}")
    return ember["completion_ids"]


def server_health(base_url):
    with urllib.request.urlopen(base_url + "/health", timeout=10) as r:
        return json.load(r)


def chat_plain(client, model, messages, max_tokens):
    reply = client.chat.completions.create(
        model=model, messages=messages, max_tokens=max_tokens, temperature=0, seed=7,
        # Ember's extension: greedy text from random weights may reach the end-of-turn token
        # early; without it the reply always runs to max_tokens, so the counts are exact.
        extra_body={"ignore_eos": True})
    check(reply.object == "chat.completion", f"object is {reply.object!r}")
    check(reply.id.startswith("chatcmpl-"), f"id is {reply.id!r}")
    check(reply.model == model, f"model is {reply.model!r}")
    check(len(reply.choices) == 1, f"{len(reply.choices)} choices")
    choice = reply.choices[0]
    check(choice.message.role == "assistant", f"role is {choice.message.role!r}")
    check(isinstance(choice.message.content, str) and choice.message.content,
          f"content is {choice.message.content!r}")
    check(choice.finish_reason == "length", f"finish_reason is {choice.finish_reason!r}")
    usage = reply.usage
    check(usage.completion_tokens == max_tokens,
          f"completion_tokens {usage.completion_tokens}, expected {max_tokens}")
    check(usage.total_tokens == usage.prompt_tokens + usage.completion_tokens,
          f"total_tokens {usage.total_tokens} is not prompt + completion ({usage})")
    return reply


def chat_streamed(client, model, messages, max_tokens):
    stream = client.chat.completions.create(
        model=model, messages=messages, max_tokens=max_tokens, temperature=0, seed=7,
        extra_body={"ignore_eos": True}, stream=True, stream_options={"include_usage": True})
    text, reasoning, finish, usage, ids, chunks = "", "", None, None, None, 0
    with stream:
        for chunk in stream:
            chunks += 1
            check(chunk.object == "chat.completion.chunk", f"chunk object is {chunk.object!r}")
            if chunk.usage is not None:
                check(usage is None, "usage came twice")
                check(chunk.choices == [], "the usage chunk has choices")
                usage = chunk.usage
                ids = completion_ids(chunk)
                continue
            check(usage is None, "a chunk came after the usage chunk")
            check(len(chunk.choices) == 1, f"{len(chunk.choices)} choices in a chunk")
            delta = chunk.choices[0].delta
            text += delta.content or ""
            reasoning += reasoning_of(delta)
            if chunk.choices[0].finish_reason is not None:
                check(finish is None, "finish_reason came twice")
                finish = chunk.choices[0].finish_reason
    check(usage is not None, "no usage chunk although stream_options.include_usage was set")
    return {"text": text, "reasoning": reasoning, "finish_reason": finish, "chunks": chunks,
            "usage": usage.model_dump(), "completion_ids": ids}


def cancel_mid_stream(client, base_url, model, messages, max_tokens, chunks_to_read):
    """Reads a few chunks of a long streamed reply and closes the stream; returns how many
    text chunks arrived and how long the server took to show the slot free again."""
    stream = client.chat.completions.create(
        model=model, messages=messages, max_tokens=max_tokens, temperature=0,
        extra_body={"ignore_eos": True}, stream=True)
    text_chunks = 0
    for chunk in stream:
        if chunk.choices and (chunk.choices[0].delta.content or reasoning_of(chunk.choices[0].delta)):
            text_chunks += 1
        check(chunk.choices and chunk.choices[0].finish_reason is None,
              "the long reply ended before it was cancelled")
        if text_chunks == chunks_to_read:
            break
    closed_at = time.monotonic()
    stream.close()  # hangs up mid-reply: the server notices at its next write
    # The server frees the slot when it notices; a slot still busy after 30 s was not freed
    # (the reply would have run for the whole max_tokens).
    while True:
        health = server_health(base_url)
        if health["slots_busy"] == 0:
            break
        check(time.monotonic() - closed_at < 30, f"slot still busy 30 s after the cancel: {health}")
        time.sleep(0.05)
    return {"text_chunks": text_chunks, "slot_free_after_s": time.monotonic() - closed_at,
            "health": health}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--base-url", required=True, help="http://HOST:PORT of `ember serve`")
    parser.add_argument("--model", required=True)
    parser.add_argument("--messages", required=True, help="JSON array of chat messages")
    parser.add_argument("--completion-prompt", required=True)
    parser.add_argument("--max-tokens", type=int, default=10)
    parser.add_argument("--completion-max-tokens", type=int, default=5)
    parser.add_argument("--cancel-max-tokens", type=int, default=3000)
    args = parser.parse_args()
    messages = json.loads(args.messages)
    model = args.model
    # No retries: a failed request is to be seen, not hidden by a second attempt.
    client = openai.OpenAI(base_url=args.base_url + "/v1", api_key="not-needed", max_retries=0,
                           timeout=120)
    results = {"openai_version": openai.__version__}

    models = client.models.list()
    check([m.id for m in models.data] == [model], f"models: {[m.id for m in models.data]}")

    plain = chat_plain(client, model, messages, args.max_tokens)
    results["plain"] = {"content": plain.choices[0].message.content,
                        "reasoning": reasoning_of(plain.choices[0].message),
                        "usage": plain.usage.model_dump(),
                        "completion_ids": completion_ids(plain)}

    streamed = chat_streamed(client, model, messages, args.max_tokens)
    # Greedy both times: the streamed reply is the plain one, token for token.
    check(streamed["text"] == plain.choices[0].message.content,
          f"streamed {streamed['text']!r} != plain {plain.choices[0].message.content!r}")
    check(streamed["reasoning"] == results["plain"]["reasoning"],
          f"streamed reasoning {streamed['reasoning']!r} != plain {results['plain']['reasoning']!r}")
    check(streamed["finish_reason"] == "length", f"finish_reason {streamed['finish_reason']!r}")
    check(streamed["chunks"] >= 3, f"only {streamed['chunks']} chunks")
    check(streamed["completion_ids"] == results["plain"]["completion_ids"],
          f"streamed ids {streamed['completion_ids']} != plain {results['plain']['completion_ids']}")
    for key in ("prompt_tokens", "completion_tokens", "total_tokens"):
        check(streamed["usage"][key] == results["plain"]["usage"][key],
              f"streamed usage {streamed['usage']} != plain {results['plain']['usage']}")
    results["streamed"] = streamed

    not_found = expect_error(openai.NotFoundError, lambda: client.chat.completions.create(
        model="no-such-model", messages=messages, max_tokens=1))
    check(not_found.status_code == 404, f"status {not_found.status_code}")
    check(not_found.code == "model_not_found", f"code {not_found.code!r}")
    check("no-such-model" in not_found.message, f"message {not_found.message!r}")

    bad_value = expect_error(openai.BadRequestError, lambda: client.chat.completions.create(
        model=model, messages=messages, temperature=7))
    check(bad_value.status_code == 400, f"status {bad_value.status_code}")
    check(bad_value.param == "temperature", f"param {bad_value.param!r}")
    check("temperature" in bad_value.message, f"message {bad_value.message!r}")

    too_long = expect_error(openai.BadRequestError, lambda: client.chat.completions.create(
        model=model, messages=messages, max_tokens=10_000_000))
    check(too_long.status_code == 400, f"status {too_long.status_code}")
    check(too_long.code == "context_length_exceeded", f"code {too_long.code!r}")
    check(too_long.param == "max_tokens", f"param {too_long.param!r}")

    completion = client.completions.create(
        model=model, prompt=args.completion_prompt, max_tokens=args.completion_max_tokens,
        temperature=0,
        extra_body={"ignore_eos": True})
    check(completion.object == "text_completion", f"object {completion.object!r}")
    check(completion.choices[0].finish_reason == "length",
          f"finish_reason {completion.choices[0].finish_reason!r}")
    check(completion.usage.completion_tokens == args.completion_max_tokens,
          f"usage {completion.usage}")
    results["completion"] = {"text": completion.choices[0].text,
                             "usage": completion.usage.model_dump(),
                             "completion_ids": completion_ids(completion)}

    results["cancel"] = cancel_mid_stream(client, args.base_url, model, messages,
                                          args.cancel_max_tokens, chunks_to_read=5)
    # The freed slot takes the next request at once (with one slot, it would otherwise wait
    # for the abandoned reply to run to its end).
    started = time.monotonic()
    after = chat_plain(client, model, messages, args.max_tokens)
    results["after_cancel"] = {"content": after.choices[0].message.content,
                               "seconds": time.monotonic() - started,
                               "usage": after.usage.model_dump()}
    check(after.choices[0].message.content == plain.choices[0].message.content,
          "the reply after the cancel differs from the same request's first reply")

    print(json.dumps(results))


if __name__ == "__main__":
    try:
        main()
    except (CheckFailed, openai.OpenAIError) as e:
        traceback.print_exc()  # which check, for the C++ test's failure message
        print(f"FAILED: {type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(1)
