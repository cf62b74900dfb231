"""Model folders of a published model's shape, for random-weight benchmarks with no download: a config of that shape
and a tokenizer trained here, offline, on the shipped samples' text.

    python bench/shapes.py llama-3.2-1b FOLDER   # 16 layers x 32 heads, 8 KV heads, hidden 2048, vocabulary 128,256
    python bench/shapes.py llama-3.1-8b FOLDER   # 32 layers x 32 heads, 8 KV heads, hidden 4096, vocabulary 128,256
    python bench/shapes.py bert-base FOLDER      # 12 layers x 12 heads, hidden 768 (a WordPiece tokenizer)

Then ``--model FOLDER --random-init``. Llama-3.2-1B's config as published (its RoPE scaling left out: the same
work); Llama-3.1-8B's as published, its RoPE scaling (llama3, factor 8) in; both Llamas' tokenizer here is a
byte-level BPE of at most 8,192 pieces (7,953 from the samples) with Llama 3's split pattern and
``<|begin_of_text|>`` first (the drawn or read ids stay below the model's vocabulary). Llama-3.1-8B has 8.03 B
parameters, 7.50 B without its output layer (the ingest loads the bare model): 14 GiB in bfloat16, which
``bench_device.py --random-init`` makes on the run's device, never on the host.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from pathlib import Path

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import BertConfig, LlamaConfig, PreTrainedTokenizerFast

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
    r"|\s+(?!\S)|\s+"
)
BOS, EOS = "<|begin_of_text|>", "<|end_of_text|>"


def _text() -> Iterator[str]:
    """The shipped samples' sentences (the UD samples' # text lines) and WikiText lines."""
    for path in sorted((SAMPLES / "ud").glob("*.conllu")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.startswith("# text = "):
                yield line[len("# text = ") :]
    for line in (SAMPLES / "wikitext" / "wiki.test-sample.raw").read_text(encoding="utf-8").splitlines():
        if line.strip():
            yield line.strip()


def llama3_tokenizer() -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.BPE())
    split = pre_tokenizers.Split(Regex(LLAMA3_SPLIT), behavior="isolated", invert=False)
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.pre_tokenizer = pre_tokenizers.Sequence([split, byte_level])
    trainer = trainers.BpeTrainer(
        vocab_size=8192, special_tokens=[BOS, EOS], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(_text(), trainer)
    tok.decoder = decoders.ByteLevel()
    bos = [(BOS, tok.token_to_id(BOS))]
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single=f"{BOS} $A", pair=f"{BOS} $A {BOS}:1 $B:1", special_tokens=bos),
    ])  # fmt: skip
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=BOS, eos_token=EOS)


def llama_3_2_1b(folder: Path) -> None:
    tok = llama3_tokenizer()
    config = LlamaConfig(
        vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
        num_key_value_heads=8, head_dim=64, max_position_embeddings=131072, rope_theta=500000.0, rms_norm_eps=1e-5,
        tie_word_embeddings=True, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
    )  # fmt: skip
    config.save_pretrained(folder)
    tok.save_pretrained(folder)


def llama_3_1_8b(folder: Path) -> None:
    tok = llama3_tokenizer()
    rope_scaling = {
        "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    }  # fmt: skip
    config = LlamaConfig(
        vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
        num_key_value_heads=8, max_position_embeddings=131072, rope_theta=500000.0, rope_scaling=rope_scaling,
        rms_norm_eps=1e-5, tie_word_embeddings=False, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
    )  # fmt: skip
    config.save_pretrained(folder)
    tok.save_pretrained(folder)


def bert_tokenizer() -> PreTrainedTokenizerFast:
    """BERT's: lower-cased WordPiece, [CLS] a [SEP] (b [SEP])."""
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tok.train_from_iterator(_text(), trainers.WordPieceTrainer(vocab_size=8192, special_tokens=specials))
    tok.decoder = decoders.WordPiece()
    cls, sep = (tok.token_to_id(t) for t in ("[CLS]", "[SEP]"))
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", cls), ("[SEP]", sep)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]", sep_token="[SEP]",
        mask_token="[MASK]",
    )  # fmt: skip


def bert_base(folder: Path) -> None:
    tok = bert_tokenizer()
    BertConfig(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072).save_pretrained(
        folder
    )
    tok.save_pretrained(folder)


SHAPES = {"llama-3.2-1b": llama_3_2_1b, "llama-3.1-8b": llama_3_1_8b, "bert-base": bert_base}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("shape", choices=sorted(SHAPES))
    parser.add_argument("folder", type=Path)
    args = parser.parse_args()
    args.folder.mkdir(parents=True, exist_ok=True)
    SHAPES[args.shape](args.folder)
    print(args.folder)


if __name__ == "__main__":
    main()
