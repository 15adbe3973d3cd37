"""Tokenizers against independent implementations: sentencepiece (SPM) and
HF tokenizers (byte-level BPE with the GPT-2 and LLaMA-3 pre-tokenizers),
trained here on a text file the system ships; plus hand-made vocabularies and
bad input."""

import random
from pathlib import Path

import pytest

import tensorcore as tc

CORPUS_CANDIDATES = ["/usr/share/common-licenses/GPL-3", "/usr/share/common-licenses/Apache-2.0"]
EXTRA = "\nnaïve café ünïcödé 日本語 🙂 it's they'RE 12345678\r\n\n  x\t\ty\n"
LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
          r"\s*[\r\n]+|\s+(?!\S)|\s+")


@pytest.fixture(scope="module")
def corpus():
    for p in CORPUS_CANDIDATES:
        if Path(p).exists():
            return Path(p).read_text() + EXTRA
    # Fallback: the project's own sources are text too.
    return "\n".join(p.read_text() for p in Path(__file__).parent.glob("*.py")) + EXTRA


def samples(text, n, seed):
    rnd = random.Random(seed)
    lines = text.splitlines(keepends=True)
    fixed = ["Hello world", "  two  spaces\n\n", "it's they'RE", "naïve café 日本語 🙂", "x\t\ty\r\n z",
             "123456789 a1b2", "", " ", "\n"]
    return fixed + ["".join(rnd.choice(lines) for _ in range(3)) for _ in range(n)]


def test_spm_matches_sentencepiece(corpus, tmp_path):
    spm = pytest.importorskip("sentencepiece")
    (tmp_path / "corpus.txt").write_text(corpus)
    spm.SentencePieceTrainer.train(
        input=str(tmp_path / "corpus.txt"), model_prefix=str(tmp_path / "m"), vocab_size=800, model_type="bpe",
        byte_fallback=True, normalization_rule_name="identity", remove_extra_whitespaces=False,
        add_dummy_prefix=True, split_digits=False, minloglevel=2)
    sp = spm.SentencePieceProcessor(model_file=str(tmp_path / "m.model"))
    n = sp.get_piece_size()
    types = [2 if sp.is_unknown(i) else 3 if sp.is_control(i) else 6 if sp.is_byte(i) else 1 for i in range(n)]
    with tc.Tokenizer("spm", [sp.id_to_piece(i) for i in range(n)], scores=[sp.get_score(i) for i in range(n)],
                      token_types=types, bos_id=sp.bos_id(), eos_id=sp.eos_id(), unk_id=sp.unk_id()) as tok:
        assert tok.vocab_size == n
        for s in samples(corpus, 150, 0):
            ids = tok.encode(s)
            assert ids == sp.encode(s), repr(s)
            assert tok.decode(ids) == sp.decode(ids), repr(s)
            assert tok.encode(s, add_bos=True) == [sp.bos_id()] + ids
        assert tok.decode([sp.bos_id()] + tok.encode("abc") + [sp.eos_id()]) == "abc"  # control tokens vanish


@pytest.mark.parametrize("pre", ["gpt2", "llama3"])
def test_bpe_matches_hf_tokenizers(corpus, pre):
    tk = pytest.importorskip("tokenizers")
    t = tk.Tokenizer(tk.models.BPE())
    if pre == "gpt2":
        t.pre_tokenizer = tk.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    else:
        t.pre_tokenizer = tk.pre_tokenizers.Sequence([
            tk.pre_tokenizers.Split(tk.Regex(LLAMA3), behavior="isolated"),
            tk.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    trainer = tk.trainers.BpeTrainer(vocab_size=1500, initial_alphabet=tk.pre_tokenizers.ByteLevel.alphabet(),
                                     show_progress=False)
    t.train_from_iterator([corpus], trainer)
    import json
    model = json.loads(t.to_str())["model"]
    tokens = [None] * len(model["vocab"])
    for piece, i in model["vocab"].items():
        tokens[i] = piece
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    with tc.Tokenizer("bpe", tokens, merges=merges, pre_tokenizer=pre) as tok:
        for s in samples(corpus, 120, 1):
            ids = tok.encode(s)
            assert ids == t.encode(s).ids, repr(s)
            assert tok.decode_bytes(ids) == s.encode()


def test_spm_byte_fallback_and_unknown():
    toks = ["<unk>", "<s>", "</s>", "\u2581", "a", "b", "\u2581a", "ab", "\u2581ab"] + ["<0x%02X>" % b for b in range(256)]
    scores = [0, 0, 0, -1, -2, -2, -1.5, -1.0, -0.5] + [0] * 256
    types = [2, 3, 3, 1, 1, 1, 1, 1, 1] + [6] * 256
    with tc.Tokenizer("spm", toks, scores=scores, token_types=types, bos_id=1, eos_id=2, unk_id=0) as tok:
        assert tok.encode("ab") == [8]
        ids = tok.encode("a\u00e9")  # é is not a piece: its two UTF-8 bytes
        assert ids[-2:] == [9 + 0xC3, 9 + 0xA9]
        assert tok.decode(ids) == "a\u00e9"
    # Without byte tokens, unknown characters become <unk>.
    with tc.Tokenizer("spm", toks[:9], scores=scores[:9], token_types=types[:9], unk_id=0) as tok:
        assert tok.encode("a\u00e9")[-2:] == [0, 0]


def test_bad_vocabularies_are_clear_errors():
    with pytest.raises(tc.TensorcoreError) as e:
        tc.Tokenizer("bpe", ["a", "b"])  # BPE without merges
    assert e.value.status == tc.TC_ERR_CORRUPT
    with pytest.raises(tc.TensorcoreError) as e:
        tc.Tokenizer("spm", ["a"], bos_id=5)
    assert e.value.status == tc.TC_ERR_CORRUPT
    with pytest.raises(tc.TensorcoreError) as e:
        tc.Tokenizer("bpe", ["a", "b", "ab"], merges=["ab"])  # not "left right"
    assert e.value.status == tc.TC_ERR_CORRUPT
    with pytest.raises(tc.TensorcoreError) as e:
        tc.Tokenizer("spm", [])
    assert e.value.status == tc.TC_ERR_INVALID_ARG
    with pytest.raises(ValueError):
        tc.Tokenizer("wordpiece", ["a"])
    with pytest.raises(ValueError):
        tc.Tokenizer("spm", ["a", "b"], scores=[1.0])
    tok = tc.Tokenizer("spm", ["\u2581", "a"])
    tok.close()
    with pytest.raises(ValueError):
        tok.encode("a")
