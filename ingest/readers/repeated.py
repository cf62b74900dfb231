"""``--format repeated``: repeated random tokens, the standard probe for induction heads (Olsson et al. 2022).

N token ids are drawn uniformly, with replacement, from the model's vocabulary (every id the tokenizer knows,
its special tokens left out), then repeated once: 2N tokens; K such sequences, each one input, laid out in the
tokenizer's own template (``atlas.ingestion.template``), so that a tokenizer that puts a BOS first (Llama's
``<s>``/``<|begin_of_text|>``, the sample decoder's ``<bos>``) puts it first here too, and GPT-2's adds none.
TransformerLens's main demo (``demos/Main_Demo.ipynb``, the induction-score cells) draws 10 sequences of 50
ids (``torch.randint(1000, 10000, (10, 50))``, no BOS): the defaults are N = 50 and K = 10.

No corpus file: the sequences are drawn with ``numpy.random.default_rng(seed)`` from the tokenizer's vocabulary
(ids in order, the special ones left out), so the same N, K, seed and tokenizer give the same tokens. The corpus
is named by its settings, ``repeated(N=50,K=10,seed=0)`` (``runs.corpus``), and its sha256 is that of the name.
The pieces are the drawn ids themselves, never a text tokenized again (a random WordPiece or byte-level BPE id
need not come back from its own text). Each token is a word of its own: its form the text the tokenizer decodes
it to, no annotation; the sentence id and line of sequence k (0-based) are k + 1.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from atlas.errors import AtlasError, arg
from atlas.ingestion.readers.base import DRAW_SEED, CorpusOptions, FileReader, Reading
from atlas.ingestion.readers.conllu import NeedleFacts, Sentence, Word
from atlas.ingestion.readers.corpus_info import CorpusInfo

if TYPE_CHECKING:  # light to import: a finished run is found by its settings without loading transformers
    from transformers import PreTrainedTokenizerBase

    from atlas.ingestion.align import AlignedSentence
    from atlas.ingestion.readers.needle import Continue

LENGTH = 50  # N: tokens drawn per sequence (TransformerLens's main demo: seq_len = 50)
COUNT = 10  # K: sequences (TransformerLens's main demo: batch_size = 10)
EXAMPLES_MAX = 2**31 - 1  # sequences at most: examples.example_id is an INTEGER
_NAME = re.compile(r"repeated\(N=(\d+),K=(\d+),seed=(-?\d+)\)")


@dataclass(frozen=True)
class Repeated:
    """The settings of a repeated-token corpus: N tokens drawn per sequence, K sequences, the draw's seed."""

    length: int = LENGTH
    count: int = COUNT
    seed: int = 0

    @property
    def name(self) -> str:
        """How runs.corpus names it: ``repeated(N=50,K=10,seed=0)``."""
        return f"repeated(N={self.length},K={self.count},seed={self.seed})"

    @property
    def stem(self) -> str:
        """The start of its runs' ids, with no character a shell reads: ``repeated-N50-K10-seed0``."""
        return f"repeated-N{self.length}-K{self.count}-seed{self.seed}"

    @classmethod
    def parse(cls, name: str) -> Repeated:
        """The settings a corpus name gives (``name``'s inverse)."""
        match = _NAME.fullmatch(name)
        if match is None:
            raise AtlasError(f"'{name}': not a repeated-token corpus (repeated(N=..,K=..,seed=..))")
        length, count, seed = (int(g) for g in match.groups())
        return cls(length, count, seed)

    def check(self) -> None:
        if self.length < 1:
            raise AtlasError(f"{arg('length', self.length)}: expected 1 or more tokens to repeat")
        if not 1 <= self.count <= EXAMPLES_MAX:
            raise AtlasError(f"{arg('count', self.count)}: expected 1 to {EXAMPLES_MAX:,} sequences")

    def info(self) -> CorpusInfo:
        """The corpus as a run records it: its name as its path, the sha256 of its name."""
        self.check()
        digest = hashlib.sha256(self.name.encode()).hexdigest()
        return CorpusInfo(Path(self.name), digest, self.count, RepeatedTokens.name)


def vocabulary(tokenizer: PreTrainedTokenizerBase) -> np.ndarray:
    """The ids a draw takes from: every id of the tokenizer's vocabulary but its special tokens'."""
    special = set(tokenizer.all_special_ids)
    special |= {i for i, token in tokenizer.added_tokens_decoder.items() if token.special}
    ids = np.array([i for i in range(len(tokenizer)) if i not in special], dtype=np.int64)
    if ids.size == 0:
        raise AtlasError(f"{RepeatedTokens().given}: the model's tokenizer has no id that is not a special token")
    return ids


def draw(settings: Repeated, tokenizer: PreTrainedTokenizerBase) -> np.ndarray:
    """The K x 2N token ids: each row N ids drawn uniformly (with replacement), then the same N again."""
    ids = vocabulary(tokenizer)
    rng = np.random.default_rng(settings.seed)
    try:
        half = ids[rng.integers(0, ids.size, size=(settings.count, settings.length))]
        return np.concatenate([half, half], axis=1)
    except MemoryError:
        size = settings.count * settings.length * 2 * ids.itemsize / 2**30
        raise AtlasError(
            f"{arg('count', settings.count)}: {settings.count:,} x {2 * settings.length:,} token ids (an array of "
            f"{size:,.1f} GiB) are more than this machine's memory holds; draw fewer"
        ) from None


def check_fits(settings: Repeated, tokenizer: PreTrainedTokenizerBase, max_length: int, model: str = "") -> None:
    """Refuse sequences whose 2N tokens and the template's special tokens exceed ``max_length`` (``model``: the
    model's name where ``max_length`` is its own longest input, not the one asked for)."""
    from atlas.ingestion.template import read_template

    n_special = read_template(tokenizer, decoder=False).n_special(1)
    if 2 * settings.length + n_special > max_length:
        longest = f"{model}'s longest input, {max_length} pieces" if model else arg("max_length", max_length)
        raise AtlasError(
            f"{arg('length', settings.length)}: 2 x {settings.length} tokens and the template's {n_special} special "
            f"token(s) exceed {longest}"
        )


def read_repeated(corpus: CorpusInfo, tokenizer: PreTrainedTokenizerBase, max_length: int) -> Iterator[AlignedSentence]:
    """The corpus's sequences as aligned sentences, one word per token; refused when 2N tokens and the
    template's special tokens exceed ``max_length``."""
    settings = Repeated.parse(corpus.path.name)
    check_fits(settings, tokenizer, max_length)
    for k, ids in enumerate(draw(settings, tokenizer)):
        yield token_sentence(k, ids.tolist(), tokenizer)  # a row at a time: the whole draw as ints takes more


def token_sentence(
    k: int, ids: list[int], tokenizer: PreTrainedTokenizerBase, needle: NeedleFacts | None = None
) -> AlignedSentence:
    """Input ``k`` (0-based) of token ids as drawn, as a sentence of one word per token: its form the text the
    tokenizer decodes it to, no annotation; its sentence id and line k + 1 (``needle``: a needle probe's facts)."""
    from atlas.ingestion.align import AlignedSentence, Pieces

    texts = [tokenizer.decode([i]) for i in ids]
    words = [
        Word(id=t + 1, form=text, lemma=None, upos=None, xpos=None, feats=None, head=None, deprel=None, misc=None,
             line=k + 1)
        for t, text in enumerate(texts)
    ]  # fmt: skip
    sentence = Sentence(index=k, sent_id=str(k + 1), doc_id=None, line=k + 1, words=words, needle=needle)
    return AlignedSentence(sentence, Pieces([[i] for i in ids], [[text] for text in texts]))


class RepeatedTokens(FileReader):
    """``--format repeated``: no corpus file; sequences of token ids drawn from the model's vocabulary, each
    repeated once, read as pieces (no text to align)."""

    name = "repeated"
    help = (
        "no corpus file, --count sequences of --length token ids drawn from the model's vocabulary, each repeated "
        "once (the probe for induction heads), the tokenizer's BOS first where it puts one"
    )
    takes_file = False
    has_text = False
    options = {
        "length": "{option}: sets the sequences of {formats}; add it or leave {option} out",
        "count": "{option}: sets the sequences of {formats}; add it or leave {option} out",
        "sample_seed": DRAW_SEED,
    }

    def corpus_path(self, corpus: Path | None, options: CorpusOptions) -> Path:
        if corpus is not None:
            raise AtlasError(
                f"{arg('corpus')}: {self.given} draws its tokens from the model's vocabulary; leave {arg('corpus')} out"
            )
        length = LENGTH if options.length is None else options.length
        settings = Repeated(length, COUNT if options.count is None else options.count, options.sample_seed or 0)
        settings.check()
        return Path(settings.name)

    def pack(self, pack: str | None, options: CorpusOptions) -> str:
        if pack not in (None, "none"):
            raise AtlasError(f"{arg('pack')}: each repeated-token sequence is one input; leave {arg('pack')} out")
        return "none"

    def info(self, path: Path, options: CorpusOptions) -> CorpusInfo:
        return Repeated.parse(path.name).info()  # its sha256 is that of its name

    def with_sha256(self, info: CorpusInfo) -> CorpusInfo:
        return info

    def check(self, info: CorpusInfo) -> CorpusInfo:
        return Repeated.parse(info.path.name).info()

    def changed(self, info: CorpusInfo) -> bool:
        return False  # no file

    def run_stem(self, info: CorpusInfo) -> str:
        return Repeated.parse(info.path.name).stem  # named by its settings

    def sentences(self, info: CorpusInfo, reading: Reading) -> Iterator[Sentence]:
        raise ValueError("a repeated-token corpus is read as pieces")

    def pieces(
        self,
        info: CorpusInfo,
        tokenizer: PreTrainedTokenizerBase,
        max_length: int,
        continue_with: Continue | None = None,
    ) -> Iterator[AlignedSentence]:
        return read_repeated(info, tokenizer, max_length)

    def check_fits(
        self, info: CorpusInfo, tokenizer: PreTrainedTokenizerBase, max_length: int, model_limit: str
    ) -> None:
        check_fits(Repeated.parse(info.path.name), tokenizer, max_length, model_limit)
