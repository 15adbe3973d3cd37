"""Chat prompts: a conversation ([{"role": ..., "content": ...}, ...]) as the
text and the token ids a model was trained on.

A file's own template (GGUF `tokenizer.chat_template`, a Jinja template) is
rendered with the `jinja2` package as Hugging Face transformers renders it:
an ImmutableSandboxedEnvironment with trim_blocks and lstrip_blocks, the
loopcontrols extension, `{% generation %}` blocks rendered as plain text,
`tojson` without ASCII escaping, the globals `raise_exception` and
`strftime_now`, and the variables messages, add_generation_prompt,
bos_token, eos_token (the texts of the file's BOS and EOS tokens), tools and
documents (None). jinja2 is needed only for such files.

A file without a template gets a built-in one, written in Python and chosen
from the architecture and the vocabulary as llama.cpp recognises template
families: "gemma" (`<start_of_turn>user\\n...<end_of_turn>\\n`, a gemma
architecture or a `<start_of_turn>` token), "chatml" (`<|im_start|>`
vocabularies) and "llama2-sys" (`[INST]`, for SentencePiece vocabularies
whose BOS/EOS are <s> and </s>, or a vocabulary with an `[INST]` token).
These are llama.cpp's built-in templates of the same names (src/llama-chat.cpp);
a template string that is one of these names selects it too.

The rendered text is tokenized with special tokens parsed (`<|im_end|>` is
one id) and BOS as the file says; a rendered text that starts with the BOS
token's text does not get a second one (as llama.cpp strips it before
tokenizing). EOS is never appended to a prompt.
"""

import datetime
import functools
import json

from .._constants import TC_ERR_INVALID_ARG, TC_ERR_UNSUPPORTED
from .._errors import TensorcoreError, TensorcoreValueError

__all__ = ["BUILTIN_TEMPLATES", "ChatFormat", "MissingPackageError", "render_jinja", "render_builtin",
           "check_messages"]


class MissingPackageError(TensorcoreError, ImportError):
    """An optional Python package that a feature needs is not installed."""

    def __init__(self, detail):
        super().__init__(TC_ERR_UNSUPPORTED, detail)


def _chat_error(detail):
    return TensorcoreValueError(TC_ERR_INVALID_ARG, detail)


def check_messages(messages):
    """The conversation as a list of dicts, each with a str role and content;
    a clear error otherwise."""
    if isinstance(messages, (str, bytes)) or not hasattr(messages, "__iter__"):
        raise _chat_error("chat: messages must be a list of {'role': ..., 'content': ...} dicts, not %s"
                          % type(messages).__name__)
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise _chat_error("chat: message %d is a %s, not a dict with 'role' and 'content'" % (i, type(m).__name__))
        for key in ("role", "content"):
            if not isinstance(m.get(key), str):
                raise _chat_error("chat: message %d needs a str %r (got %r)" % (i, key, m.get(key)))
        out.append(m)
    if not out:
        raise _chat_error("chat: the conversation has no messages")
    return out


# ---- built-in templates (llama.cpp's, src/llama-chat.cpp) --------------------------------

def _trim(s):
    return s.strip(" \t\n\r\f\v")  # llama.cpp's trim: ASCII white space only


def _chatml(messages, add_generation_prompt):
    out = "".join("<|im_start|>%s\n%s<|im_end|>\n" % (m["role"], m["content"]) for m in messages)
    return out + ("<|im_start|>assistant\n" if add_generation_prompt else "")


def _gemma(messages, add_generation_prompt):
    # No system turn: the system text opens the next user turn; "assistant" is "model".
    out, system = [], ""
    for m in messages:
        if m["role"] == "system":
            system += _trim(m["content"])
            continue
        role = "model" if m["role"] == "assistant" else m["role"]
        out.append("<start_of_turn>%s\n" % role)
        if system and role != "model":
            out.append(system + "\n\n")
            system = ""
        out.append(_trim(m["content"]) + "<end_of_turn>\n")
    if add_generation_prompt:
        out.append("<start_of_turn>model\n")
    return "".join(out)


def _llama2(system_message, bos_inside_history, strip):
    def render(messages, add_generation_prompt):  # [INST] turns close themselves: nothing to add
        out, inside = ["[INST] "], True
        for m in messages:
            content = _trim(m["content"]) if strip else m["content"]
            if not inside:
                inside = True
                out.append("<s>[INST] " if bos_inside_history else "[INST] ")
            if m["role"] == "system":
                out.append("<<SYS>>\n%s\n<</SYS>>\n\n" % content if system_message else content + "\n")
            elif m["role"] == "user":
                out.append(content + " [/INST]")
            else:
                out.append(content + "</s>")
                inside = False
        return "".join(out)
    return render


BUILTIN_TEMPLATES = {
    "chatml": _chatml,
    "gemma": _gemma,
    "llama2": _llama2(False, False, False),
    "llama2-sys": _llama2(True, False, False),
    "llama2-sys-bos": _llama2(True, True, False),
    "llama2-sys-strip": _llama2(True, False, True),
}


def render_builtin(name, messages, add_generation_prompt=True):
    """The conversation in the built-in template `name` (BUILTIN_TEMPLATES)."""
    if name not in BUILTIN_TEMPLATES:
        raise _chat_error("chat: no built-in template %r (built-in: %s)" % (name, ", ".join(sorted(BUILTIN_TEMPLATES))))
    return BUILTIN_TEMPLATES[name](check_messages(messages), bool(add_generation_prompt))


# ---- Jinja templates (as transformers renders them) --------------------------------------

def _jinja2():
    try:
        import jinja2
        import jinja2.ext
        import jinja2.sandbox
    except ImportError:
        raise MissingPackageError("rendering a chat template needs the jinja2 package: pip install jinja2") from None
    return jinja2


@functools.lru_cache(maxsize=8)
def _compile(template):
    jinja2 = _jinja2()

    class Generation(jinja2.ext.Extension):
        """{% generation %}...{% endgeneration %} (transformers marks the
        assistant's text with it): the body renders as it is."""
        tags = {"generation"}

        def parse(self, parser):
            next(parser.stream)
            return parser.parse_statements(("name:endgeneration",), drop_needle=True)

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.datetime.now().strftime(fmt)

    env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                                       extensions=[Generation, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    try:
        return env.from_string(template)
    except jinja2.exceptions.TemplateError as e:
        raise _chat_error("chat template: %s: %s" % (type(e).__name__, e)) from None


def render_jinja(template, messages, add_generation_prompt=True, bos_token="", eos_token="", **variables):
    """The conversation rendered by the Jinja `template` as transformers'
    apply_chat_template(tokenize=False) renders it; `variables` are passed
    to the template as well. A template error (a syntax error, or the
    template's raise_exception) raises TensorcoreValueError with its
    message; without jinja2, MissingPackageError."""
    if not isinstance(template, str):
        raise _chat_error("chat template must be a str, not %s" % type(template).__name__)
    compiled = _compile(template)
    jinja2 = _jinja2()
    values = dict(tools=None, documents=None)
    values.update(variables)
    try:
        return compiled.render(messages=check_messages(messages), add_generation_prompt=bool(add_generation_prompt),
                               bos_token=bos_token, eos_token=eos_token, **values)
    except jinja2.exceptions.TemplateError as e:
        raise _chat_error("chat template: %s" % e) from None


# ---- a file's chat format ----------------------------------------------------------------

def _single_special(tokenizer, text):
    """Whether `text` is one control or user-defined token of the vocabulary."""
    from .._api.tokenizer import TC_TOKEN_ATTR_CONTROL, TC_TOKEN_ATTR_USER_DEFINED
    ids = tokenizer.encode(text, add_bos=False, add_eos=False, special=True)
    return len(ids) == 1 and bool(tokenizer.token_attr(ids[0]) & (TC_TOKEN_ATTR_CONTROL | TC_TOKEN_ATTR_USER_DEFINED))


def _gguf_metadata(path):
    """(architecture, tokenizer model, chat template or None, bos text, eos text) of a GGUF file."""
    from .._api.gguf import GgufFile
    with GgufFile(path) as g:
        arch = g.meta_get_str("general.architecture", "")
        model = g.meta_get_str("tokenizer.ggml.model", "")
        template = g.meta_get_str("tokenizer.chat_template", "") or None
        texts = []
        n = g.meta_array_count("tokenizer.ggml.tokens") if "tokenizer.ggml.tokens" in g.keys() else 0
        for key in ("tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id"):
            i = g.meta_get_i64(key, -1)
            texts.append(g.meta_array_get_str("tokenizer.ggml.tokens", i) if 0 <= i < n else "")
    return arch, model, template, texts[0], texts[1]


class ChatFormat:
    """How a GGUF file's model reads a conversation: its own Jinja template
    or the built-in one its architecture and vocabulary call for.

        fmt = ChatFormat(path, tokenizer)
        fmt.render(messages)      # the prompt text
        fmt.encode(messages)      # its token ids
    """

    def __init__(self, path, tokenizer, template=None):
        self.path = str(path)
        self.tokenizer = tokenizer
        self.architecture, self.tokenizer_model, self.file_template, self.bos_token, self.eos_token = \
            _gguf_metadata(self.path)
        self._override = template
        self._name = None

    @property
    def template(self):
        """The template in use: a built-in name (BUILTIN_TEMPLATES) or Jinja text."""
        if self._override is not None:
            return self._override
        if self.file_template is not None:
            return self.file_template
        if self._name is None:
            self._name = self._builtin_for_file()
        return self._name

    @property
    def kind(self):
        """"jinja" or the built-in template's name."""
        t = self.template
        return t if t in BUILTIN_TEMPLATES else "jinja"

    def _builtin_for_file(self):
        has = functools.partial(_single_special, self.tokenizer)
        if self.architecture.startswith("gemma") or has("<start_of_turn>"):
            return "gemma"
        if has("<|im_start|>"):
            return "chatml"
        if has("[INST]") or (self.tokenizer_model == "llama" and (self.bos_token, self.eos_token) == ("<s>", "</s>")):
            return "llama2-sys"
        raise _chat_error(
            "%s has no chat template (tokenizer.chat_template) and its vocabulary matches no built-in one "
            "(gemma: <start_of_turn>, chatml: <|im_start|>, llama2: <s>/</s> SentencePiece or [INST]); "
            "name one (template=..., --chat-template: %s) or give a Jinja template"
            % (self.path, ", ".join(sorted(BUILTIN_TEMPLATES))))

    def render(self, messages, add_generation_prompt=True, **variables):
        """The prompt text of the conversation."""
        t = self.template
        if t in BUILTIN_TEMPLATES:
            return render_builtin(t, messages, add_generation_prompt)
        try:
            return render_jinja(t, messages, add_generation_prompt, bos_token=self.bos_token,
                                eos_token=self.eos_token, **variables)
        except MissingPackageError:
            raise MissingPackageError("the chat template of %s is a Jinja template; rendering it needs the jinja2 "
                                      "package: pip install jinja2" % self.path) from None

    def encode_text(self, text):
        """Token ids of a rendered prompt: special tokens parsed, BOS as the
        file says but never twice, no EOS."""
        add_bos = self.tokenizer.add_bos
        if add_bos and self.bos_token and text.startswith(self.bos_token):
            text = text[len(self.bos_token):]
        return self.tokenizer.encode(text, add_bos=add_bos, add_eos=False, special=True)

    def encode(self, messages, add_generation_prompt=True, **variables):
        """Token ids of the conversation's prompt."""
        return self.encode_text(self.render(messages, add_generation_prompt, **variables))
