"""The tokenizer's own input template: where it puts special tokens around one text or a pair, and their roles.

The template is read from the tokenizer itself (its post-processor), by encoding a probe text and a probe
pair and noting which positions hold special tokens, in which order, with which token type ids: BERT gives
``[CLS] a [SEP]`` and ``[CLS] a [SEP] b [SEP]`` (types 0 then 1), RoBERTa ``<s> a </s></s> b </s>``, GPT-2
nothing at all, Llama ``<s> a`` (``<|begin_of_text|> a``).

Roles come from the tokenizer's special-token attributes (cls_token, bos_token, sep_token, eos_token,
pad_token), never from the token's string: 'cls', 'bos', 'sep', 'eos', 'pad', or 'other' for a special token
none of them names. A token named both cls and bos (RoBERTa's ``<s>``) is 'cls' in an encoder and 'bos' in a
decoder; both sep and eos (``</s>``) is 'sep' in an encoder, 'eos' in a decoder. A token named both a start
(cls/bos) and an end (sep/eos) token (GPT-2's ``<|endoftext|>``) is a start before the first text, an end
after it.
"""

from __future__ import annotations

from dataclasses import dataclass

from transformers import PreTrainedTokenizerBase

from atlas.errors import AtlasError
from atlas.model.kinds import END_ROLES, ROLES, START_ROLES


@dataclass(frozen=True)
class Slot:
    """One place of a template: a text's pieces (``text`` 0 or 1) or one special token."""

    type_id: int
    text: int | None = None
    token_id: int | None = None
    token: str | None = None  # the special token's literal string, e.g. '[CLS]', '<s>'
    role: str | None = None


@dataclass(frozen=True)
class Template:
    single: tuple[Slot, ...]
    pair: tuple[Slot, ...]

    def form(self, n_texts: int) -> tuple[Slot, ...]:
        return self.single if n_texts == 1 else self.pair

    def n_special(self, n_texts: int) -> int:
        return sum(slot.text is None for slot in self.form(n_texts))

    @property
    def typed(self) -> bool:
        """The two texts of a pair get different token type ids (BERT: 0 and 1; RoBERTa: both 0)."""
        return len({slot.type_id for slot in self.pair if slot.text is not None}) == 2


def role_of(tokenizer: PreTrainedTokenizerBase, token_id: int, decoder: bool, before_text: bool) -> str:
    """The role of a special token (see the module notes); ``before_text``: it precedes the first text."""
    named = {r for r in ROLES[:5] if getattr(tokenizer, f"{r}_token_id", None) == token_id}
    start = [r for r in (("bos", "cls") if decoder else START_ROLES) if r in named]
    end = [r for r in (("eos", "sep") if decoder else END_ROLES) if r in named]
    if start and (before_text or not end):
        return start[0]
    if end:
        return end[0]
    return "pad" if "pad" in named else "other"


def _form(tokenizer: PreTrainedTokenizerBase, texts: tuple[str, ...], decoder: bool) -> tuple[Slot, ...]:
    enc = tokenizer(*texts, add_special_tokens=True, return_token_type_ids=True)
    sequence = enc.sequence_ids(0)
    if any(sequence.count(k) == 0 for k in range(len(texts))):
        raise AtlasError(f"the model's tokenizer gives a probe text {texts!r} no piece: its template cannot be read")
    slots: list[Slot] = []
    for i, (token_id, type_id, k) in enumerate(zip(enc["input_ids"], enc["token_type_ids"], sequence, strict=True)):
        if k is None:
            before = 0 not in sequence[:i]
            token = tokenizer.convert_ids_to_tokens(token_id)
            slots.append(
                Slot(type_id, token_id=token_id, token=token, role=role_of(tokenizer, token_id, decoder, before))
            )
        elif not slots or slots[-1].text != k:
            if any(s.text == k for s in slots):
                raise AtlasError(f"the model's tokenizer splits text {k + 1} of its template: not supported")
            slots.append(Slot(type_id, text=k))
    return tuple(slots)


def read_template(tokenizer: PreTrainedTokenizerBase, decoder: bool) -> Template:
    """The tokenizer's template for one text and for a pair (``decoder``: the model is a causal LM)."""
    return Template(_form(tokenizer, ("a",), decoder), _form(tokenizer, ("a", "b"), decoder))
