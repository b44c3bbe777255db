"""Constrained decoding, checked by an independent validator (the `jsonschema` package).

Generates random JSON Schemas from a fixed seed (nested objects and arrays, required and
optional properties, enums, const, anyOf, $defs/$ref, string lengths and formats), asks the
real `ember` binary for one reply per schema through scripted JSONL lines carrying "schema"
(one process per model, many schemas each), sampling at a high temperature with speculation
on and a reply limit the grammar must close its JSON within, and validates every reply.

Prints one JSON summary line per model on stdout; exits 1 on the first invalid reply (named
with its schema), 2 on a usage or environment error.

usage: grammar_acceptance.py --ember BIN --model NAME=GGUF [--model ...] [--schemas 200]
       [--seed 1] [--max-tokens 96] [--temp 1.5] [--top-k 40] [--threads 2]
"""

import argparse
import json
import random
import subprocess
import sys

import jsonschema

# Minimal JSON byte sizes above this are redrawn: the reply limit must leave room to close.
MAX_MIN_BYTES = 60
# Schemas answered by one process (one conversation).
BATCH = 25
WORDS = ["alpha", "beta", "gamma", "delta", "red", "green", "x", "y", "id", "name", "n√m", "q\"t"]


def random_key(rng):
    return rng.choice(WORDS) + str(rng.randrange(100))


def random_scalar_schema(rng):
    kind = rng.randrange(11)
    if kind == 0:
        return {"type": "string"}
    if kind == 1:
        lo = rng.randrange(3)
        return {"type": "string", "minLength": lo, "maxLength": lo + rng.randrange(6)}
    if kind == 2:
        return {"type": "string", "format": rng.choice(["date", "uuid", "email", "time", "date-time"])}
    if kind == 3:
        return {"type": "integer"}
    if kind == 4:
        return {"type": "number"}
    if kind == 5:
        return {"type": "boolean"}
    if kind == 6:
        return {"type": "null"}
    if kind == 7:
        values = rng.sample(["a", "b", "c d", "é", 1, 2.5, True, None, [1, "x"], {"k": 0}], rng.randrange(1, 5))
        return {"enum": values}
    if kind == 8:
        return {"const": rng.choice(["fixed", 7, False, {"z": [None]}])}
    if kind == 9:
        return {"type": rng.sample(["string", "integer", "null", "boolean"], 2)}
    return {"description": "anything", "title": "free"}  # any JSON value


def random_schema(rng, depth, defs):
    choice = rng.randrange(10) if depth > 0 else 0
    if choice <= 3:
        return random_scalar_schema(rng)
    if choice <= 6:
        props = {}
        for _ in range(rng.randrange(1, 5)):
            props[random_key(rng)] = random_schema(rng, depth - 1, defs)
        names = list(props)
        required = [n for n in names if rng.random() < 0.5]
        schema = {"type": "object", "properties": props}
        if required:
            schema["required"] = required
        if rng.random() < 0.3:
            schema["additionalProperties"] = False
        return schema
    if choice <= 8:
        schema = {"type": "array", "items": random_schema(rng, depth - 1, defs)}
        lo = rng.randrange(3)
        if rng.random() < 0.6:
            schema["minItems"] = lo
        if rng.random() < 0.7:
            schema["maxItems"] = lo + rng.randrange(4)
        return schema
    if rng.random() < 0.5:
        return {"anyOf": [random_schema(rng, depth - 1, defs) for _ in range(rng.randrange(2, 4))]}
    name = "d" + str(len(defs))
    defs[name] = random_schema(rng, depth - 1, defs)
    return {"$ref": "#/$defs/" + name}


def min_bytes(schema, defs, seen=()):
    """Fewest bytes of compact JSON valid against `schema` (as the grammar shapes it)."""
    if "$ref" in schema:
        name = schema["$ref"].split("/")[-1]
        return 10**6 if name in seen else min_bytes(defs[name], defs, seen + (name,))
    if "const" in schema:
        return len(json.dumps(schema["const"], separators=(",", ":"), ensure_ascii=False).encode())
    if "enum" in schema:
        return min(len(json.dumps(v, separators=(",", ":"), ensure_ascii=False).encode()) for v in schema["enum"])
    if "anyOf" in schema:
        return min(min_bytes(s, defs, seen) for s in schema["anyOf"])
    t = schema.get("type")
    if isinstance(t, list):
        return min(min_bytes({"type": x}, defs, seen) for x in t)
    if t == "object":
        total = 2
        for name in schema.get("required", []):
            key = len(json.dumps(name, ensure_ascii=False).encode())
            total += key + 1 + min_bytes(schema["properties"][name], defs, seen) + 1
        return total
    if t == "array":
        return 2 + schema.get("minItems", 0) * (min_bytes(schema["items"], defs, seen) + 1)
    if t == "string":
        fmt = schema.get("format")
        sizes = {"date": 12, "uuid": 38, "email": 8, "time": 11, "date-time": 22}
        return sizes.get(fmt, 2 + schema.get("minLength", 0))
    if t in ("integer", "number"):
        return 1
    if t == "boolean":
        return 4
    return 2  # null, or any value ("{}" / "[]" / "0" are shorter)


def make_schemas(count, seed):
    rng = random.Random(seed)
    schemas = []
    while len(schemas) < count:
        defs = {}
        schema = random_schema(rng, 3, defs)
        if defs:
            schema = dict(schema, **{"$defs": defs})
        if min_bytes(schema, defs) <= MAX_MIN_BYTES:
            schemas.append(schema)
    return schemas


def ask_ember(args, path, schemas, first):
    """Replies (JSONL objects) of one scripted chat answering `schemas` in turn, or None."""
    lines = [json.dumps({"prompt": "Answer in JSON (%d)." % (first + i), "schema": s},
                        ensure_ascii=False) for i, s in enumerate(schemas)]
    cmd = [args.ember, "chat", "-m", path, "--jsonl", "--no-db", "-n", str(args.max_tokens),
           "--temp", str(args.temp), "--top-k", str(args.top_k), "--seed", str(args.seed + first),
           "-t", str(args.threads), "-c", "2048", "--draft-max", "4",
           # A thinking model (qwen3) may reason first, unconstrained: briefly, then it must answer.
           "--max-thinking-tokens", "16"]
    proc = subprocess.run(cmd, input="\n".join(lines) + "\n", capture_output=True, text=True,
                          timeout=900)
    replies = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    if proc.returncode != 0 or len(replies) != len(schemas):
        print("ember exited %d with %d replies for %d schemas\n%s" %
              (proc.returncode, len(replies), len(schemas), proc.stderr[-4000:]), file=sys.stderr)
        return None
    return replies


def run_model(args, name, path, schemas):
    # Batches short enough that a conversation never outgrows its context (2048 tokens: the
    # llama fixture's), so no turn is dropped and every prompt is answered.
    replies = []
    for first in range(0, len(schemas), BATCH):
        batch = ask_ember(args, path, schemas[first:first + BATCH], first)
        if batch is None:
            print("%s: no replies for schemas %d.." % (name, first), file=sys.stderr)
            return None
        replies += batch
    stats = {"model": name, "schemas": len(schemas), "valid": 0, "finish_length": 0,
             "tokens": 0, "spec_drafted": 0, "spec_accepted": 0, "thinking_replies": 0}
    # Draft 2020-12's own format checks (date, uuid, email, ...; time and date-time only with
    # the optional rfc3339-validator package, which is not installed).
    checker = jsonschema.Draft202012Validator.FORMAT_CHECKER
    for schema, reply in zip(schemas, replies):
        text = reply["reply"]
        try:
            value = json.loads(text)
            jsonschema.validate(value, schema, cls=jsonschema.Draft202012Validator,
                                format_checker=checker)
        except (ValueError, jsonschema.ValidationError) as e:
            print("%s: invalid reply %r (finish %s)\nschema: %s\nerror: %s" %
                  (name, text, reply.get("finish"), json.dumps(schema), e), file=sys.stderr)
            return None
        stats["valid"] += 1
        stats["finish_length"] += reply["finish"] == "length"
        stats["tokens"] += reply["tokens_generated"]
        stats["spec_drafted"] += reply["spec_drafted"]
        stats["spec_accepted"] += reply["spec_accepted"]
        stats["thinking_replies"] += reply["thinking_tokens"] > 0
    return stats


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ember", required=True)
    parser.add_argument("--model", action="append", required=True, help="NAME=PATH")
    parser.add_argument("--schemas", type=int, default=200)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--max-tokens", type=int, default=96)
    parser.add_argument("--temp", type=float, default=1.5)
    parser.add_argument("--top-k", type=int, default=40)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    schemas = make_schemas(args.schemas, args.seed)
    for s in schemas:  # the generator itself must make valid schemas
        jsonschema.Draft202012Validator.check_schema(s)
    for spec in args.model:
        name, _, path = spec.partition("=")
        stats = run_model(args, name, path, schemas)
        if stats is None:
            return 1
        print(json.dumps(stats), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
