#!/usr/bin/env python3
"""Writes tests/text/corpus.jsonl: varied texts for the tokenizer comparison.

Run from anywhere: python3 tests/text/gen_corpus.py. Deterministic (fixed seed);
the generated file is committed.
"""
import json
import pathlib
import random
import unicodedata

rng = random.Random(20261122)
texts = []

# English prose and edge spacing.
sentences = [
    "Hello world",
    "Hello, world!",
    "The quick brown fox jumps over the lazy dog.",
    "It's a beautiful day, isn't it? They're here; we'll see what they've done.",
    "I'M SHOUTING BECAUSE IT'S LOUD, AREN'T YOU? WE'LL, THEY'RE, YOU'VE, HE'D",
    "don't won't can't shouldn't y'all o'clock rock'n'roll",
    "Mr. Smith went to Washington . He said : \" hello \" , then left !",
    "A sentence with a trailing space ",
    " A sentence with a leading space",
    "  two leading spaces",
    "two trailing spaces  ",
    "multiple     spaces    inside   the   text",
    "\ttab at start",
    "tabs\tbetween\t\twords",
    "line one\nline two\n\nline four\n\n\n",
    "\n\nleading newlines",
    "windows\r\nline\r\nendings\r\n",
    "   ",
    " ",
    "\n",
    "a",
    "I",
    "x y z",
    "What's up?  Not much... just testing!!!  ",
    "e.g. i.e. etc. vs. U.S.A. Ph.D.",
    "hyphen-ated words and em—dashes and en–dashes",
    "“Smart quotes” and ‘single ones’ and «guillemets»",
    "Price: $1,234.56 (approx. €1.100,00) — 50% off!",
    "The year 2024 had 366 days; 1000000 seconds is about 11.57 days.",
    "3.14159265358979323846264338327950288419716939937510",
    "1 22 333 4444 55555 666666 7777777 88888888 999999999",
    "0x1F 0b1010 0o777 1e-9 6.022e23 -42 +7",
    "Phone: +1 (555) 123-4567, ext. 89",
    "ISBN 978-3-16-148410-0",
    "abc123def456ghi7890",
    "version 1.2.3-rc.4+build.567",
]
texts += sentences

# Code.
texts += [
    "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
    "import numpy as np\nx = np.arange(10)\nprint(x.sum())  # 45\n",
    "class Foo:\n\tdef __init__(self):\n\t\tself.x = {'a': 1, \"b\": [2, 3]}\n",
    "#include <vector>\nint main() {\n  std::vector<int> v{1, 2, 3};\n  for (auto& x : v) x *= 2;\n  return 0;\n}\n",
    "template <typename T>\nconstexpr T square(T x) noexcept { return x * x; }\n",
    "if (a != b && c <= d || e >= f) { ptr->field = arr[i++]; }",
    "{\"name\": \"halo\", \"version\": \"0.1.0\", \"tags\": [\"llm\", \"serving\"], \"n\": 42, \"ok\": true}",
    "[{\"id\":1,\"v\":null},{\"id\":2,\"v\":3.5e-3}]",
    "SELECT id, name FROM users WHERE age > 30 ORDER BY name DESC LIMIT 10;",
    "<html><body><div class=\"x\">Hi &amp; bye</div></body></html>",
    "fn main() { let s: &str = \"hi\"; println!(\"{}\", s); }",
    "$ ls -la /usr/local/bin | grep -v '^d' > out.txt 2>&1",
    "    indented with four spaces\n        and eight\n",
    "x=1;y=2;z=x+y*3/4-5%6^7&8|9",
    "// comment\n/* block\n   comment */\n",
    "a == b === c !== d => e -> f :: g",
    "regex: ^[a-zA-Z0-9._%+-]+@[a-zA-Z0-9.-]+\\.[a-zA-Z]{2,}$",
    "path\\to\\windows\\file.txt and /unix/path/file.tar.gz",
]

# URLs and e-mail.
texts += [
    "https://huggingface.co/meta-llama/Llama-2-7b-hf/resolve/main/tokenizer.json?download=true",
    "Visit http://example.com:8080/path/to/page.html#section-2 for more.",
    "mailto:someone@example.org, ftp://files.example.net/pub/",
    "www.google.com/search?q=tokenizer+bpe&hl=en",
]

# Unicode: accents (composed and decomposed), CJK, emoji, scripts.
texts += [
    "café naïve résumé façade coöperate",
    unicodedata.normalize("NFD", "café naïve résumé façade"),
    "e\u0301 a\u0300 o\u0308 n\u0303 (combining marks that NFC composes)",
    "Å vs A\u030a vs \u212b (angstrom sign)",
    "\u1e9b\u0323 and \u0041\u030a\u0301",
    "Ｆｕｌｌｗｉｄｔｈ ｔｅｘｔ １２３",
    "ﬁ ﬂ ligatures and ½ ¼ ² ³ superscripts",
    "日本語のテキストです。東京は大きい都市です。",
    "中文测试：你好，世界！我们今天学习分词器。",
    "한국어 텍스트 테스트입니다.",
    "Ελληνικά: Γειά σου Κόσμε",
    "Русский текст: Привет, мир! Ёжик в тумане.",
    "العربية: مرحبا بالعالم، كيف حالك؟",
    "עברית: שלום עולם",
    "हिन्दी: नमस्ते दुनिया, आप कैसे हैं?",
    "தமிழ் மொழி",
    "ไทย: สวัสดีชาวโลก",
    "Tiếng Việt: Xin chào thế giới",
    "emoji: 😀 😃 😄 😁 🎉 🚀 🔥 ❤️ 👍🏽",
    "ZWJ: 👨‍👩‍👧‍👦 👩‍💻 🏳️‍🌈 🧑🏿‍🚀",
    "flags: 🇺🇸 🇯🇵 🇩🇪 🇧🇷",
    "math: ∀x∈ℝ, x² ≥ 0 ⇒ √(x²) = |x|; ∑ ∫ ∂ ∞ ≈ ≠",
    "arrows ← ↑ → ↓ ↔ and box ─│┌┐└┘",
    "music 𝄞 and math bold 𝐀𝐁𝐂 and old italic 𐌀𐌁",
    "zero\u200bwidth\u200cjoiner\u200dtest",
    "non\u00a0breaking\u2009thin\u3000ideographic spaces",
    "mixed 日本 and English and 123 and 😀 together",
    "Ünïcödé ÜBER straße STRASSE ǅ ǈ",
    "İstanbul ıi Iı",
    "\u00ad soft hyphen and \u2028 line sep and \u2029 para sep",
    "rare CJK: 𠀀𠀁𪚥 and 龘",
    "Amharic ሰላም ዓለም and Georgian გამარჯობა",
    "Ethiopic, Cherokee ᏣᎳᎩ, Mongolian ᠮᠣᠩᠭᠣᠯ",
]

# Special tokens written in the text.
specials = ["<s>", "</s>", "<unk>", "<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>",
            "<|start_header_id|>", "<|end_header_id|>", "<|im_start|>", "<|im_end|>",
            "<|endoftext|>", "<|user|>", "<|assistant|>", "<|system|>", "<|end|>", "<think>", "</think>",
            "<tool_call>", "[INST]", "[/INST]", "<<SYS>>"]
texts += [
    "<s>Hello</s>",
    "<s> Hello </s>",
    "Hello<s>world",
    "</s></s></s>",
    "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|>",
    "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
    "<|user|>\nwhat is 2+2?<|end|>\n<|assistant|>\n4<|end|>",
    "<think>\nLet me think.\n</think>\n\nThe answer is 42.",
    "[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi [/INST] Hello </s>",
    "text with <|im_start|> inside and <|im_end|> too",
    "<|endoftext|>",
    "<s>",
    "almost special: <s ></s> < s> <|im_start| > <|unknown_token|>",
    "<<s>>",
    "<|<|im_start|>|>",
]
for _ in range(20):
    parts = []
    for _ in range(rng.randint(2, 6)):
        if rng.random() < 0.5:
            parts.append(rng.choice(specials))
        else:
            parts.append(rng.choice(["hi", " there", "\n", " ", "word", "  x", "é", "😀", "123", "'s"]))
    texts.append("".join(parts))

# Bytes that need the byte fallback in SentencePiece vocabularies.
texts += [
    "control chars: \x01\x02\x07\x1b[31mred\x1b[0m \x7f",
    "\u0000 null char",
    "private use: \ue000\uf8ff",
    "rare: \u2603 \u2620 \u269b \u2764 \u00bf\u00a1",
    "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝕗𝕒𝕟𝕔𝕪 𝓈𝒸𝓇𝒾𝓅𝓉",
    "Ꭰ Ꭱ ⰀⰁ ⴀⴁ ꀀꀁ",
    "🦀🦀🦀🦀🦀 🫠🫡",
]

# Whitespace runs of all kinds.
for n in [1, 2, 3, 4, 5, 7, 8, 15, 16, 17, 31, 64]:
    texts.append("a" + " " * n + "b")
    texts.append("x" + "\n" * min(n, 20) + "y")
texts += ["\t\t\t", " \n \n ", "\n \n", " \t\n\r\x0b\x0c mixed", "end with newline\n", "end with spaces   "]

# Digits of many lengths.
for n in [1, 2, 3, 4, 5, 6, 7, 9, 10, 13, 20, 33]:
    texts.append("".join(rng.choice("0123456789") for _ in range(n)))
    texts.append("n=" + "".join(rng.choice("0123456789") for _ in range(n)) + "!")

# Contractions and case.
for w in ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'VE", "'M", "'LL", "'D", "'Ll", "'rE"]:
    texts.append(f"it{w} fine and we{w} go")
    texts.append(f"{w}")

# Random word salads from a pool (stress BPE).
pool = ("the of and to in is was for on that with as by at from it be this have are not but or an "
        "tokenizer byte pair encoding merges vocabulary unicode normalization pretokenizer decoder "
        "supercalifragilisticexpialidocious antidisestablishmentarianism pneumonoultramicroscopic "
        "Llama Mistral Qwen halo engine serving kernel batch attention transformer").split()
extra = ["😀", "é", "日本", "，", "...", "?!", "\n", "  ", "\t", "42", "3.14", "'s", "'ll", "()", "{}", "=>", "ñ", "ß"]
for _ in range(90):
    n = rng.randint(1, 25)
    out = []
    for _ in range(n):
        tok = rng.choice(pool) if rng.random() < 0.8 else rng.choice(extra)
        if rng.random() < 0.15:
            tok = tok.upper()
        elif rng.random() < 0.15:
            tok = tok.capitalize()
        out.append(tok)
    sep = rng.choice([" ", " ", " ", "", "  ", "\n"])
    texts.append(sep.join(out))

# Random unicode strings from assorted blocks.
blocks = [(0x20, 0x7E), (0xA0, 0x17F), (0x370, 0x3FF), (0x400, 0x4FF), (0x590, 0x5FF), (0x600, 0x6FF),
          (0x900, 0x97F), (0x3040, 0x30FF), (0x4E00, 0x9FFF), (0xAC00, 0xD7A3), (0x1F300, 0x1F64F),
          (0x2000, 0x206F), (0x300, 0x36F)]
for _ in range(40):
    s = []
    for _ in range(rng.randint(1, 30)):
        lo, hi = rng.choice(blocks)
        cp = rng.randint(lo, hi)
        c = chr(cp)
        if unicodedata.category(c) in ("Cn", "Cs", "Co") or cp in (0x85, 0xFEFF):
            continue
        s.append(c)
    if s:
        texts.append("".join(s))

# A long paragraph.
texts.append(" ".join(sentences) * 3)
texts.append("word " * 200)
texts.append("a" * 300)
texts.append("😀" * 50)
texts.append("-" * 100 + "=" * 100)

out = pathlib.Path(__file__).with_name("corpus.jsonl")
with out.open("w", encoding="utf-8") as f:
    for t in texts:
        f.write(json.dumps({"text": t}, ensure_ascii=False) + "\n")
print(f"wrote {len(texts)} texts to {out}")
