"""Asks a running `ember serve` short questions through the official OpenAI client library.

    python openai_questions.py --base-url URL --model NAME --questions JSON --max-tokens N

Run by tests/integration/test_default_model_behaviour.cpp from the venv that
scripts/test_venv.sh makes. Each question is one user message, sent greedily (temperature 0) with
nothing else set, so the server's defaults apply (the model's own template and its default
system prompt). Prints one JSON line: per question the reply's text, its token ids (Ember's
`ember.completion_ids`), finish_reason and usage. On a failed check it prints `FAILED: ...` on
stderr and exits 1.
"""

import argparse
import json
import sys

try:
    import openai
except ImportError as e:
    sys.exit(f"FAILED: cannot import openai ({e}); run scripts/test_venv.sh BUILD_DIR")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--questions", required=True, help="a JSON list of strings")
    parser.add_argument("--max-tokens", type=int, required=True)
    args = parser.parse_args()

    client = openai.OpenAI(base_url=args.base_url + "/v1", api_key="unused", max_retries=0,
                           timeout=300)
    replies = []
    for question in json.loads(args.questions):
        reply = client.chat.completions.create(
            model=args.model, messages=[{"role": "user", "content": question}],
            max_tokens=args.max_tokens, temperature=0)
        if len(reply.choices) != 1:
            sys.exit(f"FAILED: {len(reply.choices)} choices for {question!r}")
        ember = getattr(reply, "ember", None)
        if not isinstance(ember, dict) or "completion_ids" not in ember:
            sys.exit(f"FAILED: no ember.completion_ids in the reply to {question!r}: {ember!r}")
        choice = reply.choices[0]
        replies.append({"question": question, "content": choice.message.content,
                        "finish_reason": choice.finish_reason,
                        "completion_ids": ember["completion_ids"],
                        "prompt_tokens": reply.usage.prompt_tokens,
                        "completion_tokens": reply.usage.completion_tokens})
    print(json.dumps({"replies": replies}))


if __name__ == "__main__":
    main()
