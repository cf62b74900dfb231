"""Tokenizer builders for tests: real tokenizers of each family's kind, trained offline on the shipped samples.

Each builder trains a small vocabulary with the ``tokenizers`` library on the words of the UD and WikiText
samples and wraps it as a ``PreTrainedTokenizerFast`` with the family's special tokens and post-processor
(its template for one text and a pair), as the family's own tokenizer.json does:

- ``bert_wordpiece``: BERT, lower-cased WordPiece ('##'), [CLS] a [SEP] / [CLS] a [SEP] b [SEP] (types 0/1);
- ``albert_unigram``: ALBERT / DeBERTa-v2, SentencePiece Unigram ('▁'), BERT's template;
- ``roberta_bpe``: RoBERTa, byte-level BPE ('Ġ'), <s> a </s> / <s> a </s></s> b </s>;
- ``xlmr_unigram``: XLM-R, SentencePiece Unigram, RoBERTa's template;
- ``gpt2_bpe``: GPT-2, byte-level BPE, no special token added (<|endoftext|> is its bos, eos and unk);
- ``llama3_bpe``: Llama 3, byte-level BPE with its split pattern, <|begin_of_text|> a (pair: each text after one);
- ``llama2_spm``: Llama 2 / Mistral, SentencePiece BPE with byte fallback and no pre-tokenizer, <s> a.

``TOKENIZERS`` names them all; ``save(tokenizer, folder)`` writes one where ``AutoTokenizer`` loads it.
Vocabularies are small (``VOCAB_SIZE``) so that words split into several pieces.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
VOCAB_SIZE = 600


def training_text() -> Iterator[str]:
    """Lines of running text: the sentences of the UD samples (forms joined by spaces) and WikiText."""
    for path in sorted((SAMPLES / "ud").glob("*.conllu")):
        words: list[str] = []
        for line in path.read_text(encoding="utf-8").splitlines():
            cols = line.split("\t")
            if len(cols) == 10 and cols[0].isdigit():
                words.append(cols[1])
            elif not line.strip() and words:
                yield " ".join(words)
                words = []
        if words:
            yield " ".join(words)
    for line in (SAMPLES / "wikitext" / "wiki.test-sample.raw").read_text(encoding="utf-8").splitlines():
        if line.strip():
            yield line.strip()


WITH_TYPES = ["input_ids", "token_type_ids", "attention_mask"]  # a tokenizer whose model takes segment ids


def _wrap(tok: Tokenizer, **kwargs: object) -> PreTrainedTokenizerFast:
    return PreTrainedTokenizerFast(tokenizer_object=tok, **kwargs)


def _ids(tok: Tokenizer, *tokens: str) -> list[tuple[str, int]]:
    return [(t, tok.token_to_id(t)) for t in tokens]


@cache
def bert_wordpiece() -> PreTrainedTokenizerFast:
    """BERT: lower-cased WordPiece ('##' continuations), [CLS] a [SEP] b [SEP]."""
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tok.train_from_iterator(training_text(), trainers.WordPieceTrainer(vocab_size=VOCAB_SIZE, special_tokens=specials))
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=_ids(tok, "[CLS]", "[SEP]")
    )
    tok.decoder = decoders.WordPiece()
    return _wrap(
        tok,
        unk_token="[UNK]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        pad_token="[PAD]",
        mask_token="[MASK]",
        model_input_names=WITH_TYPES,
    )


def _unigram(specials: list[str], unk: str) -> Tokenizer:
    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.NFKC()
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    trainer = trainers.UnigramTrainer(vocab_size=VOCAB_SIZE, special_tokens=specials, unk_token=unk)
    tok.train_from_iterator(training_text(), trainer)
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    return tok


@cache
def albert_unigram() -> PreTrainedTokenizerFast:
    """ALBERT / DeBERTa-v2 style: SentencePiece Unigram ('▁' word starts) with BERT's template."""
    tok = _unigram(["<pad>", "<unk>", "[CLS]", "[SEP]", "[MASK]"], "<unk>")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS]:0 $A:0 [SEP]:0",
        pair="[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1",
        special_tokens=_ids(tok, "[CLS]", "[SEP]"),
    )
    return _wrap(
        tok,
        unk_token="<unk>",
        cls_token="[CLS]",
        sep_token="[SEP]",
        pad_token="<pad>",
        mask_token="[MASK]",
        model_input_names=WITH_TYPES,
    )


@cache
def xlmr_unigram() -> PreTrainedTokenizerFast:
    """XLM-R: SentencePiece Unigram with RoBERTa's template, <s> a </s></s> b </s>."""
    tok = _unigram(["<s>", "<pad>", "</s>", "<unk>", "<mask>"], "<unk>")
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>", special_tokens=_ids(tok, "<s>", "</s>")
    )
    return _wrap(
        tok,
        bos_token="<s>",
        eos_token="</s>",
        cls_token="<s>",
        sep_token="</s>",
        unk_token="<unk>",
        pad_token="<pad>",
        mask_token="<mask>",
    )


def _byte_level(specials: list[str], split: pre_tokenizers.PreTokenizer | None = None) -> Tokenizer:
    tok = Tokenizer(models.BPE())
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=split is None)
    tok.pre_tokenizer = byte_level if split is None else pre_tokenizers.Sequence([split, byte_level])
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(training_text(), trainer)
    tok.decoder = decoders.ByteLevel()
    return tok


@cache
def roberta_bpe() -> PreTrainedTokenizerFast:
    """RoBERTa: byte-level BPE ('Ġ' marks a word after a space), <s> a </s></s> b </s>."""
    tok = _byte_level(["<s>", "<pad>", "</s>", "<unk>", "<mask>"])
    tok.post_processor = processors.RobertaProcessing(
        ("</s>", tok.token_to_id("</s>")), ("<s>", tok.token_to_id("<s>")), trim_offsets=True, add_prefix_space=False
    )
    return _wrap(
        tok,
        bos_token="<s>",
        eos_token="</s>",
        cls_token="<s>",
        sep_token="</s>",
        unk_token="<unk>",
        pad_token="<pad>",
        mask_token="<mask>",
    )


@cache
def gpt2_bpe() -> PreTrainedTokenizerFast:
    """GPT-2: byte-level BPE, no special token added; <|endoftext|> is its bos, eos and unk token."""
    tok = _byte_level(["<|endoftext|>"])
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    return _wrap(tok, bos_token="<|endoftext|>", eos_token="<|endoftext|>", unk_token="<|endoftext|>")


LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
    r"|\s+(?!\S)|\s+"
)


@cache
def llama3_bpe() -> PreTrainedTokenizerFast:
    """Llama 3: byte-level BPE with its split pattern; <|begin_of_text|> before each text."""
    split = pre_tokenizers.Split(Regex(LLAMA3_SPLIT), behavior="isolated", invert=False)
    tok = _byte_level(["<|begin_of_text|>", "<|end_of_text|>"], split)
    tok.post_processor = processors.Sequence(
        [
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(
                single="<|begin_of_text|> $A",
                pair="<|begin_of_text|> $A <|begin_of_text|>:1 $B:1",
                special_tokens=_ids(tok, "<|begin_of_text|>"),
            ),
        ]
    )
    return _wrap(tok, bos_token="<|begin_of_text|>", eos_token="<|end_of_text|>")


@cache
def llama2_spm() -> PreTrainedTokenizerFast:
    """Llama 2 / Mistral: SentencePiece BPE with byte fallback, no pre-tokenizer; <s> before each text."""
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    bytes_ = [f"<0x{b:02X}>" for b in range(256)]
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE + 256, special_tokens=["<unk>", "<s>", "</s>", *bytes_])
    # SentencePiece learns pieces inside words ('▁' only at a piece's start); the tokenizer runs with none
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="never", split=True)
    tok.train_from_iterator(training_text(), trainer)
    tok.pre_tokenizer = None
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s>:1 $B:1", special_tokens=_ids(tok, "<s>")
    )
    tok.decoder = decoders.Sequence(
        [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
    )
    return _wrap(tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>")


TOKENIZERS: dict[str, Callable[[], PreTrainedTokenizerFast]] = {
    "bert": bert_wordpiece,
    "albert": albert_unigram,
    "roberta": roberta_bpe,
    "xlmr": xlmr_unigram,
    "gpt2": gpt2_bpe,
    "llama3": llama3_bpe,
    "llama2": llama2_spm,
}


def save(tokenizer: PreTrainedTokenizerFast, folder: Path) -> Path:
    """Write the tokenizer where ``AutoTokenizer.from_pretrained(folder)`` loads it back; return the folder."""
    tokenizer.save_pretrained(folder)
    return folder
