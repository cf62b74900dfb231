"""``--format needle``: the needle-in-a-haystack probe of retrieval heads (Wu et al. 2024), built as their released
``retrieval_head_detection.py`` builds it (nightdessert/Retrieval_Head).

For each context length of ``--lengths`` and depth of ``--depths`` (percent), one input: the haystack's tokens cut
to the length, the needle's tokens inserted at the depth (``insert_needle``: at ``int(len * depth / 100)``, moved
back to just after a token that is a '.', with or without a space before it: a sentence boundary; at the end for
100), the context decoded to text, then "Based on the content of the book, Question: {question}\\nAnswer:" appended
and the whole tokenized again; then the model's own greedy continuation (their ``decode``: up to 50 tokens, stopping
after a newline token) appended to the input, so that one forward pass over prompt + continuation gives the
attention each generated token saw. The needle's span is found in the prompt as their ``find_needle_idx`` finds the
answer's (the first window of its length sharing more than 90 % of its distinct ids), and the response's ROUGE-1
recall of the answer (their success filter: > 50) is kept beside it (examples.needle_start, needle_end,
generated_start, n_generated, needle_recall).

The haystack is any text file (``--haystack``; the shipped WikiText-103 test sample by default), read whole and
repeated until long enough (their ``read_context_files``); the needle, question and answer default to the first
line of their ``needles.jsonl``. Their context length is the prompt's plus a 200-token buffer for the question and
the response; here the input (prompt, question and continuation, the template's special tokens too) is at most
the length: the context is cut to the length less the question, the special tokens and 50 new tokens.

``--haystack random`` draws the haystack and a 16-token needle from the model's vocabulary (as ``--format
repeated`` draws its tokens, seeded with ``--sample-seed``), for models that read no English: the needle's 16 ids
all different, the haystack's from the other ids (the needle is said once, as a fact in a text is); the question
is the needle's first 4 tokens, the answer its other 12, the needle goes at the exact depth (no sentence to end) and the
continuation is as long as the answer (no newline to stop at); recall is ROUGE-1's over token ids.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from atlas.errors import AtlasError, arg
from atlas.ingestion.readers.base import CorpusOptions, FileReader, Reading
from atlas.ingestion.readers.conllu import NeedleFacts, Sentence
from atlas.ingestion.readers.corpus_info import CorpusInfo, check_file, sha256_of
from atlas.ingestion.readers.repeated import token_sentence, vocabulary

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from atlas.ingestion.align import AlignedSentence

# (pieces, new tokens at most, stop ids) -> the model's greedy continuation of the pieces in its template
Continue = Callable[[list[int], int, frozenset[int]], list[int]]

RANDOM = "random"
HAYSTACK = resources.files("atlas.catalogue_sql").parent / "samples" / "wikitext" / "wiki.test-sample.raw"
# the first line of their needles.jsonl
NEEDLE = (
    "A new report from the WMO shows that records were once again broken, and in some cases smashed, for greenhouse "
    "gas levels, surface temperatures, ocean heat and acidification."
)
QUESTION = "What does a new report from WMO shows ?"
ANSWER = (
    "records were once again broken, and in some cases smashed, for greenhouse gas levels, surface temperatures, "
    "ocean heat and acidification."
)
PROMPT = "Based on the content of the book, Question: {question}\nAnswer:"
DEPTHS = tuple(int(d) for d in np.round(np.linspace(0, 100, 10)))  # their default: 10 depths, 0 to 100
NEW_TOKENS = 50  # their decode_len
RANDOM_NEEDLE, RANDOM_QUESTION = 16, 4  # a random needle's tokens, and the first of them asked with
OVERLAP = 0.9  # find_needle_idx: a window holding more than this share of the answer's distinct ids


@dataclass(frozen=True)
class Probe:
    """The settings of a needle probe, as a run keeps them (``CorpusInfo.probe``, JSON)."""

    lengths: tuple[int, ...]
    depths: tuple[int, ...] = DEPTHS
    needle: str = NEEDLE
    question: str = QUESTION
    answer: str = ANSWER
    seed: int = 0

    def text(self) -> str:
        return json.dumps(self.__dict__, sort_keys=True)

    @classmethod
    def of(cls, info: CorpusInfo) -> Probe:
        spec = json.loads(info.probe)
        return cls(**{**spec, "lengths": tuple(spec["lengths"]), "depths": tuple(spec["depths"])})


def _probe(options: CorpusOptions) -> Probe:
    if not options.lengths:
        raise AtlasError(f"{arg('lengths')}: give the context lengths of {Needle().given}, e.g. 1000 and 2000 pieces")
    if min(options.lengths) < 1:
        raise AtlasError(f"{arg('lengths', min(options.lengths))}: expected lengths of 1 piece or more")
    depths = options.depths or DEPTHS
    if not all(0 <= d <= 100 for d in depths):
        raise AtlasError(f"{arg('depths', next(d for d in depths if not 0 <= d <= 100))}: expected percents, 0 to 100")
    if options.question is not None and options.needle is None:
        raise AtlasError(f"{arg('question')}: asks about a needle of your own; add {arg('needle')}")
    if options.needle is not None and not options.needle.strip():
        raise AtlasError(f"{arg('needle', repr(options.needle))}: expected a needle of some text")
    needle = NEEDLE if options.needle is None else options.needle
    question = QUESTION if options.needle is None else options.question
    if question is None:
        raise AtlasError(f"{arg('needle')}: add the {arg('question')} the model is asked about it")
    answer = ANSWER if options.needle is None else needle
    return Probe(tuple(options.lengths), tuple(depths), needle, question, answer, options.sample_seed or 0)


class Needle(FileReader):
    """``--format needle``: no corpus file; a haystack with a needle at each length and depth, and the model's own
    answer to a question about it (see the module notes)."""

    name = "needle"
    help = (
        "no corpus file, a needle in a haystack (--haystack, a text file or 'random') at each of --lengths and "
        "--depths, asked about, with the model's own greedy answer (the probe of retrieval heads; decoders)"
    )
    takes_file = False
    has_text = False
    generates = True
    options = {
        name: "{option}: sets the probe of {formats}; add it or leave {option} out"
        for name in ("haystack", "lengths", "depths", "needle", "question")
    } | {"sample_seed": "{option}: seeds the draw of {formats}'s random haystack; leave {option} out"}

    def corpus_path(self, corpus: Path | None, options: CorpusOptions) -> Path:
        if corpus is not None:
            raise AtlasError(f"{arg('corpus')}: {self.given} reads its haystack from {arg('haystack')}; leave it out")
        if options.haystack == RANDOM:
            if options.needle is not None:
                raise AtlasError(f"{arg('needle')}: a random haystack's needle is drawn; leave {arg('needle')} out")
            return Path(RANDOM)
        path = Path(options.haystack) if options.haystack else Path(str(HAYSTACK))
        if not path.is_file():
            said = "is not a regular file: name a text file" if path.exists() else "no such file"
            raise AtlasError(f"{arg('haystack', repr(str(path)))}: {said} (or 'random')")
        check_file(path)
        return path

    def pack(self, pack: str | None, options: CorpusOptions) -> str:
        if pack not in (None, "none"):
            raise AtlasError(f"{arg('pack')}: each needle probe is one input; leave {arg('pack')} out")
        return "none"

    def info(self, path: Path, options: CorpusOptions) -> CorpusInfo:
        probe = _probe(options)
        info = CorpusInfo(path, "", len(probe.lengths) * len(probe.depths), self.name, probe=probe.text())
        return replace(info, label=self.corpus_name(info))

    def with_sha256(self, info: CorpusInfo) -> CorpusInfo:
        digest = hashlib.sha256(RANDOM.encode()).hexdigest() if str(info.path) == RANDOM else sha256_of(info.path)
        return replace(info, sha256=digest)

    def check(self, info: CorpusInfo) -> CorpusInfo:
        if str(info.path) != RANDOM:
            try:
                text = info.path.read_text(encoding="utf-8")
            except UnicodeDecodeError as exc:
                raise AtlasError(f"{info.path}: not UTF-8 text (byte {exc.start:,})") from None
            if not text.strip():
                raise AtlasError(f"{info.path}: the haystack holds no text")
        return self.with_sha256(info)

    def changed(self, info: CorpusInfo) -> bool:
        return str(info.path) != RANDOM and sha256_of(info.path) != info.sha256

    def corpus_name(self, info: CorpusInfo) -> str:
        probe = Probe.of(info)
        lengths, depths = ",".join(map(str, probe.lengths)), ",".join(map(str, probe.depths))
        return f"needle in {info.path.name} (lengths {lengths}; depths {depths})"

    def run_key(self, info: CorpusInfo) -> list[object]:
        return [self.name, info.probe]

    def run_stem(self, info: CorpusInfo) -> str:
        return f"needle-{info.path.stem}"

    def sentences(self, info: CorpusInfo, reading: Reading) -> Iterator[Sentence]:
        raise ValueError("a needle probe is read as pieces")

    def pieces(
        self,
        info: CorpusInfo,
        tokenizer: PreTrainedTokenizerBase,
        max_length: int,
        continue_with: Continue | None = None,
    ) -> Iterator[AlignedSentence]:
        assert continue_with is not None, "a needle probe is read with the model that answers it"
        probe = Probe.of(info)
        build = _Random(probe, tokenizer) if str(info.path) == RANDOM else _Text(probe, info.path, tokenizer)
        n_special = _n_special(tokenizer)
        k = 0
        for length in probe.lengths:
            for depth in probe.depths:
                prompt, span = build.prompt(length - n_special, depth)
                generated = continue_with(prompt, build.new_tokens, build.stop)
                facts = NeedleFacts(length, depth, span[0], span[1], len(prompt), len(generated),
                                    build.recall(generated))  # fmt: skip
                yield token_sentence(k, prompt + generated, tokenizer, facts)
                k += 1

    def check_fits(
        self, info: CorpusInfo, tokenizer: PreTrainedTokenizerBase, max_length: int, model_limit: str
    ) -> None:
        probe = Probe.of(info)
        longest, shortest = max(probe.lengths), min(probe.lengths)
        if longest > max_length:
            limit = arg("max_length", max_length)
            said = f"{model_limit}'s longest input, {max_length} pieces" if model_limit else limit
            raise AtlasError(f"{arg('lengths', longest)}: longer than {said}")
        build = _Random(probe, tokenizer) if str(info.path) == RANDOM else _Text(probe, info.path, tokenizer)
        least = _n_special(tokenizer) + build.fixed() + build.new_tokens
        if shortest < least:
            raise AtlasError(
                f"{arg('lengths', shortest)}: too short for the needle and the question ({build.fixed()} pieces), "
                f"{build.new_tokens} new tokens and the template's special tokens: {least} pieces at least"
            )


def _n_special(tokenizer: PreTrainedTokenizerBase) -> int:
    from atlas.ingestion.template import read_template

    return read_template(tokenizer, decoder=True).n_special(1)


def rouge1_recall(reference: str, response: str) -> float:
    """Their success measure: the ROUGE-1 recall of ``reference`` by ``response``, times 100 (Porter stems)."""
    from rouge_score import rouge_scorer

    return rouge_scorer.RougeScorer(["rouge1"], use_stemmer=True).score(reference, response)["rouge1"].recall * 100


def find_needle(prompt: list[int], answer: list[int]) -> tuple[int | None, int | None]:
    """Their ``find_needle_idx``: the first window of the answer's length holding more than 90 % of its distinct
    ids, as [start, end); (None, None) where none does."""
    wanted = set(answer)
    for i in range(len(prompt)):
        if len(set(prompt[i : i + len(answer)]) & wanted) / len(wanted) > OVERLAP:
            return i, i + len(answer)
    return None, None


class _Text:
    """Prompts from a text haystack, as their ``generate_context``, ``insert_needle`` and ``evaluate_and_log``."""

    def __init__(self, probe: Probe, path: Path, tokenizer: PreTrainedTokenizerBase) -> None:
        self.probe, self.tokenizer = probe, tokenizer
        self.haystack = tokenizer.encode(path.read_text(encoding="utf-8"), add_special_tokens=False)
        self.needle = tokenizer.encode(probe.needle, add_special_tokens=False)
        self.answer = tokenizer.encode(probe.answer, add_special_tokens=False)
        self.question = PROMPT.format(question=probe.question)
        texts = [tokenizer.decode([i]) for i in range(len(tokenizer))]
        # a sentence's end: '.' with or without a space before it (their Llama ids: '.' and '▁.')
        self.periods = {i for i, text in enumerate(texts) if text.strip() == "."}
        self.new_tokens = NEW_TOKENS
        self.stop = frozenset(i for i, text in enumerate(texts) if text == "\n")

    def prompt(self, room: int, depth: int) -> tuple[list[int], tuple[int | None, int | None]]:
        """The prompt of at most ``room`` less the new tokens pieces: the context cut again by what tokenizing the
        text once more adds at its joins."""
        asked = len(self.tokenizer.encode(self.question, add_special_tokens=False))
        keep = max(room - NEW_TOKENS - asked - len(self.needle), 0)
        while True:
            prompt = self._prompt(keep, depth)
            over = len(prompt) - (room - NEW_TOKENS)
            if over <= 0 or keep == 0:
                return prompt, find_needle(prompt, self.answer)
            keep = max(keep - over, 0)

    def _prompt(self, keep: int, depth: int) -> list[int]:
        repeats = -(-keep // max(len(self.haystack), 1))
        context = (self.haystack * max(repeats, 1))[:keep]
        if depth == 100:
            tokens = context + self.needle
        else:
            point = int(len(context) * depth / 100)
            while point > 0 and context[point - 1] not in self.periods:
                point -= 1
            tokens = context[:point] + self.needle + context[point:]
        return self.tokenizer.encode(self.tokenizer.decode(tokens) + self.question, add_special_tokens=False)

    def fixed(self) -> int:
        """The prompt's pieces besides the haystack's: the needle and the question."""
        return len(self.needle) + len(self.tokenizer.encode(self.question, add_special_tokens=False))

    def recall(self, generated: list[int]) -> float:
        response = self.tokenizer.decode(generated, skip_special_tokens=True).strip()
        return rouge1_recall(self.probe.answer, response)


class _Random:
    """Prompts from a haystack drawn from the vocabulary: the needle's first tokens are the question."""

    def __init__(self, probe: Probe, tokenizer: PreTrainedTokenizerBase) -> None:
        ids = vocabulary(tokenizer)
        if ids.size <= RANDOM_NEEDLE:
            raise AtlasError(f"{arg('haystack', RANDOM)}: the model's vocabulary has too few ids for a needle of "
                             f"{RANDOM_NEEDLE} and a haystack of others")  # fmt: skip
        rng = np.random.default_rng(probe.seed)
        chosen = rng.choice(ids.size, RANDOM_NEEDLE, replace=False)
        self.needle = ids[chosen].tolist()
        others = np.delete(ids, chosen)
        self.haystack = others[rng.integers(0, others.size, max(probe.lengths))].tolist()
        self.new_tokens = RANDOM_NEEDLE - RANDOM_QUESTION
        self.stop: frozenset[int] = frozenset()

    def prompt(self, room: int, depth: int) -> tuple[list[int], tuple[int | None, int | None]]:
        keep = max(room - self.new_tokens - RANDOM_QUESTION - len(self.needle), 0)
        context = self.haystack[:keep]
        point = int(len(context) * depth / 100)
        tokens = context[:point] + self.needle + context[point:]
        return tokens + self.needle[:RANDOM_QUESTION], (point + RANDOM_QUESTION, point + len(self.needle))

    def fixed(self) -> int:
        """The prompt's pieces besides the haystack's: the needle and the question."""
        return RANDOM_NEEDLE + RANDOM_QUESTION

    def recall(self, generated: list[int]) -> float:
        answer = " ".join(map(str, self.needle[RANDOM_QUESTION:]))
        return rouge1_recall_ids(answer, " ".join(map(str, generated)))


def rouge1_recall_ids(reference: str, response: str) -> float:
    """ROUGE-1 recall times 100 of token ids written as numbers (no stemming)."""
    from rouge_score import rouge_scorer

    return rouge_scorer.RougeScorer(["rouge1"], use_stemmer=False).score(reference, response)["rouge1"].recall * 100
