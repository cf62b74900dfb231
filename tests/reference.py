"""Independent dense computations that the store's answers are checked against.

Nothing here uses the project's pipeline: a minimal CoNLL-U reader, transformers' own eager attention
(``output_attentions=True``), the tokenizer's ``word_ids()`` for the word-piece alignment, and plain
Python/numpy loops for Clark et al.'s word-level conversion and scoring.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from transformers import AutoModel, AutoTokenizer

TIE_EPS = 1e-5  # two word-level weights closer than this are a tie that float rounding may break either way


@dataclass
class RefSentence:
    forms: list[str]
    heads: list[int]  # 0 = root, 1-based otherwise
    deprels: list[str]
    doc: str | None = None
    upos: list[str] | None = None
    entities: list[str] | None = None  # the MISC Entity= value of each word ('' when none)


def read_sentences(path: Path) -> list[RefSentence]:
    out, cur, doc = [], RefSentence([], [], [], upos=[], entities=[]), None
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("# newdoc id ="):
            doc = line.split("=", 1)[1].strip()
        if not line.strip():
            if cur.forms:
                cur.doc = doc
                out.append(cur)
            cur = RefSentence([], [], [], upos=[], entities=[])
        elif not line.startswith("#"):
            cols = line.split("\t")
            if cols[0].isdigit():
                cur.forms.append(cols[1])
                cur.heads.append(int(cols[6]))
                cur.deprels.append(cols[7])
                cur.upos.append(cols[3])
                misc = [m for m in cols[9].split("|") if m.startswith("Entity=")]
                cur.entities.append(misc[0][len("Entity=") :] if misc else "")
    if cur.forms:
        cur.doc = doc
        out.append(cur)
    return out


def pairs(sentences: list[RefSentence]) -> list[list[RefSentence]]:
    """Consecutive sentences of a document two by two (a document's odd last sentence alone)."""
    groups: list[list[RefSentence]] = []
    for s in sentences:
        if groups and len(groups[-1]) == 1 and groups[-1][0].doc == s.doc:
            groups[-1].append(s)
        else:
            groups.append([s])
    return groups


def dense_inputs(model_path: str, groups: list[list[RefSentence]]) -> list[tuple[np.ndarray, list[str]]]:
    """Per input (one sentence, or a pair as [CLS] a [SEP] b [SEP]): eager attention and its pieces."""
    tok = AutoTokenizer.from_pretrained(model_path)
    model = AutoModel.from_pretrained(model_path, attn_implementation="eager").eval()
    out = []
    for group in groups:
        enc = tok(*[s.forms for s in group], is_split_into_words=True, return_tensors="pt")
        with torch.no_grad():
            att = model(**enc, output_attentions=True).attentions
        assert len(att) == model.config.num_hidden_layers and all(a is not None for a in att)
        pieces = tok.convert_ids_to_tokens(enc["input_ids"][0].tolist())
        out.append((torch.stack([a[0] for a in att]).numpy().astype(np.float64), pieces))
    return out


def surface(inputs: list[tuple[np.ndarray, list[str]]]) -> dict[str, np.ndarray]:
    """Clark et al. Section 3 per-head averages ``[layers, heads]``, as General_Analysis.ipynb cells 5 and 7.

    Per input: the attention selected by a mask summed over the map and divided by the rows it averages
    (n; for 'sep_sep' the [SEP] rows, for 'rest_sep' the others: the code's 2 and n - 2 when there are
    two [SEP]s), and the entropy of the smoothed rows 0.9999 a + 1e-4 / n; then the mean over inputs.
    """
    n_layers, n_heads = inputs[0][0].shape[:2]
    out: dict[str, np.ndarray] = defaultdict(lambda: np.zeros((n_layers, n_heads)))
    for attns, tokens in inputs:
        n_tokens = attns.shape[-1]
        seps = np.array([t == "[SEP]" for t in tokens], dtype=float)
        clss = np.array([t == "[CLS]" for t in tokens], dtype=float)
        puncts = np.array([t in (".", ",") for t in tokens], dtype=float)
        n_seps = int(seps.sum())
        selectors = {
            "self": (np.eye(n_tokens), n_tokens),
            "next": (np.eye(n_tokens, n_tokens, 1), n_tokens),  # the code's 'right'
            "prev": (np.eye(n_tokens, n_tokens, -1), n_tokens),  # the code's 'left'
            "cls": (np.tile(clss[np.newaxis], [n_tokens, 1]), n_tokens),
            "sep": (np.tile(seps[np.newaxis], [n_tokens, 1]), n_tokens),
            "dot_comma": (np.tile(puncts[np.newaxis], [n_tokens, 1]), n_tokens),
            "sep_sep": (seps[:, np.newaxis] * seps[np.newaxis], n_seps),
            "rest_sep": ((1 - seps)[:, np.newaxis] * seps[np.newaxis], n_tokens - n_seps),
            "to_itself": (np.eye(n_tokens) * seps[np.newaxis], n_seps),
            "to_other_sep": (seps[:, np.newaxis] * seps[np.newaxis] * (1 - np.eye(n_tokens)), n_seps),
        }
        for key, (selector, denom) in selectors.items():
            out[key] += (attns * selector[np.newaxis, np.newaxis]).sum(-1).sum(-1) / (len(inputs) * denom)
        smoothed = 0.9999 * attns + (0.0001 / n_tokens)
        out["entropy"] -= (smoothed * np.log(smoothed)).sum(-1).mean(-1) / len(inputs)
        assert tokens[0] == "[CLS]"  # the code takes row 0 as the [CLS] row
        out["cls_entropy"] -= (smoothed * np.log(smoothed))[:, :, 0].sum(-1) / len(inputs)
        out["uniform_entropy"] -= np.log(1.0 / n_tokens) / len(inputs)
    return dict(out)


def head_distance_sums(attn_maps: list[np.ndarray]) -> np.ndarray:
    """head_distances.py: ``[K, K]`` JS divergences (nats) of the smoothed rows, summed over rows and inputs."""
    k = attn_maps[0].shape[0] * attn_maps[0].shape[1]
    js_distances = np.zeros([k, k])
    for attns in attn_maps:
        attns_flat = attns.reshape([k, attns.shape[2], attns.shape[3]])
        for head in range(k):
            head_attns = np.expand_dims(attns_flat[head], 0)
            head_attns_smoothed = (0.001 / head_attns.shape[1]) + (head_attns * 0.999)
            attns_flat_smoothed = (0.001 / attns_flat.shape[1]) + (attns_flat * 0.999)
            m = (head_attns_smoothed + attns_flat_smoothed) / 2
            js = -head_attns_smoothed * np.log(m / head_attns_smoothed)
            js += -attns_flat_smoothed * np.log(m / attns_flat_smoothed)
            js /= 2
            js = js.sum(-1).sum(-1)
            js_distances[head] += js
    return js_distances


def dense_attention(model_path: str, sentences: list[RefSentence]) -> list[tuple[np.ndarray, list[int | None]]]:
    """Per sentence: attention ``[L, H, n, n]`` from transformers' eager path, and each token's word."""
    tok = AutoTokenizer.from_pretrained(model_path)
    model = AutoModel.from_pretrained(model_path, attn_implementation="eager").eval()
    out = []
    for s in sentences:
        enc = tok(s.forms, is_split_into_words=True, return_tensors="pt")
        with torch.no_grad():
            att = model(**enc, output_attentions=True).attentions
        assert len(att) == model.config.num_hidden_layers and all(a is not None for a in att)
        out.append((torch.stack([a[0] for a in att]).numpy().astype(np.float64), enc.word_ids()))
    return out


def word_map(attn_lh: np.ndarray, word_ids: list[int | None], n_words: int) -> np.ndarray:
    """Word-level map of one head, with each special token as a unit of its own (loops, not matrices)."""
    units: list[list[int]] = [[] for _ in range(n_words)]
    for t, w in enumerate(word_ids):
        if w is None:
            units.append([t])
        else:
            units[w].append(t)
    to_units = np.stack([attn_lh[:, dst].sum(axis=1) for dst in units], axis=1)  # TO a unit: sum
    from_units = np.stack([to_units[src].mean(axis=0) for src in units])  # FROM a unit: mean
    return from_units[:n_words, :n_words]


@dataclass
class Prediction:
    best: int
    near: set[int]  # words whose weight is within TIE_EPS of the best


def predictions(attn: np.ndarray, word_ids: list[int | None], n_words: int) -> dict[tuple[int, int], list[Prediction]]:
    """For every head: each word's most-attended other word (never itself, [CLS] or [SEP])."""
    n_layers, n_heads = attn.shape[:2]
    out = {}
    for layer in range(n_layers):
        for head in range(n_heads):
            wm = word_map(attn[layer, head], word_ids, n_words)
            preds: list[Prediction | None] = []
            for i in range(n_words if n_words > 1 else 0):
                row = wm[i].copy()
                row[i] = -np.inf
                top = row.max()
                near = {int(j) for j in np.nonzero(top - row < TIE_EPS)[0]}
                preds.append(Prediction(int(np.nonzero(row == top)[0][0]), near))
            out[layer, head] = preds
    return out


# Clark et al. Table 1, as the released Syntax_Analysis.ipynb computes it (cell 6: evaluate_predictor,
# attn_head_predictor, offset_predictor, get_scores; cell 8: the rows and the choice of the best ones), over
# bpe_utils.get_word_word_attention's word-level maps of transformers' eager attention.

CLARK_DIRECTIONS = {"dep->head": "dependent -> head", "head<-dep": "head -> dependent"}  # notebook key -> ours
POSS = "nmod:poss"  # UD's name for the PTB-converted 'poss' of the notebook


def clark_word_attention(attn_lh: np.ndarray, word_ids: list[int | None]) -> np.ndarray:
    """bpe_utils.get_word_word_attention(mode="mean") for one head: [CLS] words [SEP] by [CLS] words [SEP]."""
    n_words = 1 + max(w for w in word_ids if w is not None)
    words_to_tokens: list[list[int]] = [[0]] + [[] for _ in range(n_words)] + [[len(word_ids) - 1]]
    for t, w in enumerate(word_ids):
        if w is not None:
            words_to_tokens[w + 1].append(t)
    m = np.array(attn_lh)
    not_word_starts = [t for word in words_to_tokens for t in word[1:]]
    for word in words_to_tokens:  # TO a split word: sum over its tokens
        m[:, word[0]] = m[:, word].sum(axis=-1)
    m = np.delete(m, not_word_starts, -1)
    for word in words_to_tokens:  # FROM a split word: mean over its tokens
        m[word[0]] = np.mean(m[word], axis=0)
    return np.delete(m, not_word_starts, 0)


def attn_head_predictor(word_attn: np.ndarray, mode: str) -> list[Prediction]:
    """Each word's most-attended-to other word (1-based; ROOT = 0 is never predicted), with its near-ties."""
    attn = np.array(word_attn.T if mode == "head<-dep" else word_attn)
    attn[range(attn.shape[0]), range(attn.shape[0])] = 0  # ignore attention to self ...
    attn = attn[1:-1, 1:-1]  # ... and [CLS]/[SEP]
    return [
        Prediction(int(np.argmax(row)) + 1, {int(j) + 1 for j in np.nonzero(row.max() - row < TIE_EPS)[0]})
        for row in attn
    ]


def offset_predictor(offset: int, n_words: int) -> list[Prediction]:
    """The word at a fixed offset (clipped to ROOT = 0 and to the last word) as each word's head."""
    return [Prediction(p, {p}) for p in (max(0, min(i + offset + 1, n_words)) for i in range(n_words))]


def _is_correct(words: list[str], predicted: list[int], i: int, gold: int, relation: str, poss_rule: bool) -> bool:
    """evaluate_predictor's test of word i, its possessive special case included."""
    p = predicted[i]
    is_correct = p == gold
    if poss_rule and relation == POSS and p < len(words):
        # the notebook's `i < len(words) and words[i + 1] == "'s" or words[i + 1] == "s'"` is always true on
        # its first clause; it would fail on a possessor ending the sentence, which has no next word here
        if i + 1 < len(words) and (words[i + 1] == "'s" or words[i + 1] == "s'"):
            is_correct = predicted[i + 1] == gold
    return is_correct


def evaluate_predictor(sentences: list[RefSentence], preds: list[list[Prediction]], poss_rule: bool) -> dict:
    """relation -> [correct, ambiguous], over every word ('all': roots included; 'all (non-root)': not).

    Ambiguous: a near-tie in the word's prediction (or in the next word's, under the possessive rule) could
    make it right where it is wrong or the reverse.
    """
    counts: dict = defaultdict(lambda: [0, 0])
    for s, predictions in zip(sentences, preds, strict=True):
        best = [p.best for p in predictions]
        for i, (y, r) in enumerate(zip(s.heads, s.deprels, strict=True)):
            outcomes = set()
            for own in predictions[i].near:
                for nxt in predictions[i + 1].near if i + 1 < len(predictions) else {None}:
                    alternative = [*best[:i], own, *([] if nxt is None else [nxt]), *best[i + 2 :]]
                    outcomes.add(_is_correct(s.forms, alternative, i, y, r, poss_rule))
            is_correct = _is_correct(s.forms, best, i, y, r, poss_rule)
            for key in (r, "all", "all (non-root)") if y != 0 else (r, "all"):
                counts[key][0] += is_correct
                counts[key][1] += len(outcomes) > 1
    return counts


@dataclass
class RelationResult:
    n: int
    best_head: str
    direction: str
    correct: int
    ambiguous: int  # predictions of the best head that a near-tie could flip
    baseline_offset: int
    baseline_correct: int
    counts: dict  # (layer, head, direction) -> (correct, ambiguous), for every head


@dataclass
class Table1Scores:
    """Every predictor's [correct, ambiguous] per relation, and the number of words of each relation."""

    heads: dict  # (layer, head, notebook direction key) -> relation -> [correct, ambiguous]
    baselines: dict  # offset -> relation -> [correct, ambiguous]
    reln_counts: dict


def table1_scores(
    sentences: list[RefSentence], dense: list[tuple[np.ndarray, list[int | None]]], poss_rule: bool = True
) -> Table1Scores:
    """get_scores("normal"), get_scores("transpose") and the offset baselines of the notebook's cell 6."""
    n_layers, n_heads = dense[0][0].shape[:2]
    maps = [
        [[clark_word_attention(attn[la, h], word_ids) for h in range(n_heads)] for la in range(n_layers)]
        for attn, word_ids in dense
    ]
    heads = {
        (la, h, key): evaluate_predictor(sentences, [attn_head_predictor(m[la][h], key) for m in maps], poss_rule)
        for la in range(n_layers)
        for h in range(n_heads)
        for key in CLARK_DIRECTIONS
    }
    baselines = {
        i: evaluate_predictor(sentences, [offset_predictor(i, len(s.forms)) for s in sentences], poss_rule)
        for i in range(-3, 3)
    }
    reln_counts: dict = defaultdict(int)
    for s in sentences:
        for r, y in zip(s.deprels, s.heads, strict=True):
            for key in (r, "all", "all (non-root)") if y != 0 else (r, "all"):
                reln_counts[key] += 1
    return Table1Scores(heads, baselines, reln_counts)


def best_heads(
    scores: Table1Scores, min_count: int, directions: tuple[str, ...] = tuple(CLARK_DIRECTIONS)
) -> dict[str, RelationResult]:
    """The rows of the notebook's cell 8 (best head among ``directions``): relation -> RelationResult."""
    results = {}
    for reln, n in scores.reln_counts.items():
        if reln in ("root", "punct") or (n < min_count and reln not in ("all", "all (non-root)")):
            continue
        candidates = {k: v for k, v in scores.heads.items() if k[2] in directions}
        uas, la, h, key = max((v[reln][0] / n, la, h, key) for (la, h, key), v in candidates.items())
        baseline_uas, offset = max((v[reln][0] / n, i) for i, v in scores.baselines.items())
        counts = {(k[0], k[1], CLARK_DIRECTIONS[k[2]]): tuple(v[reln]) for k, v in candidates.items()}
        correct, ambiguous = scores.heads[la, h, key][reln]
        results[reln] = RelationResult(
            n,
            f"{la + 1}-{h + 1}",
            CLARK_DIRECTIONS[key],
            correct,
            ambiguous,
            offset,
            scores.baselines[offset][reln][0],
            counts,
        )
    return results


def windows(sentences: list[RefSentence], tokenizer, max_length: int) -> list[list[RefSentence]]:
    """Consecutive sentences of a document, as many as fit in ``max_length`` pieces with [CLS]/[SEP]."""

    def length(group: list[RefSentence]) -> int:
        words = [w for s in group for w in s.forms]
        return sum(max(1, len(tokenizer(w, add_special_tokens=False)["input_ids"])) for w in words) + 2

    groups: list[list[RefSentence]] = []
    for s in sentences:
        if groups and groups[-1][0].doc == s.doc and length([*groups[-1], s]) <= max_length:
            groups[-1].append(s)
        elif length([s]) <= max_length:
            groups.append([s])
    return groups


def mentions(group: list[RefSentence]) -> list[tuple[int, int, str]]:
    """(first word, last word, entity) of every mention inside a window, by plain bracket matching."""
    out, open_, at = [], {}, 0
    for s in group:
        for value in s.entities:
            i = 0
            while i < len(value):
                if value[i] == "(":
                    j = i + 1
                    while j < len(value) and value[j] not in "()":
                        j += 1
                    eid = value[i + 1 : j].split("-")[0].split("[")[0]
                    if j < len(value) and value[j] == ")":
                        out.append((at, at, eid))
                        j += 1
                    else:
                        open_.setdefault(eid, []).append(at)
                    i = j
                else:
                    j = i
                    while value[j] != ")":
                        j += 1
                    eid = value[i:j].split("[")[0]
                    out.append((open_[eid].pop(), at, eid))
                    i = j + 1
            at += 1
    return out


def _span_head(heads: list[int | None], first: int, last: int) -> int:
    """The span's word whose syntactic head lies outside the span."""
    inside = range(first, last + 1)
    return next((w for w in inside if heads[w] is None or heads[w] not in inside), first)


def coreference(model_path: str, sentences: list[RefSentence], max_length: int) -> dict[str, dict]:
    """Clark et al. Table 2 by plain loops: predictor -> {'all'|type: (correct, total)}."""
    tok = AutoTokenizer.from_pretrained(model_path)
    model = AutoModel.from_pretrained(model_path, attn_implementation="eager").eval()
    scores: dict = defaultdict(lambda: defaultdict(lambda: [0, 0]))
    for group in windows(sentences, tok, max_length):
        forms = [w for s in group for w in s.forms]
        upos = [u for s in group for u in s.upos]
        heads, offset = [], 0
        for s in group:
            heads.extend(offset + h - 1 if h else None for h in s.heads)
            offset += len(s.forms)
        spans = sorted(mentions(group))
        if not spans:
            continue
        enc = tok(forms, is_split_into_words=True, return_tensors="pt")
        with torch.no_grad():
            att = model(**enc, output_attentions=True).attentions
        attn = torch.stack([a[0] for a in att]).numpy().astype(np.float64)
        preds = predictions(attn, enc.word_ids(), len(forms))
        info = [(first, _span_head(heads, first, last), entity) for first, last, entity in spans]
        for first, head, entity in info:
            before = [(f, i, h, e) for i, (f, h, e) in enumerate(info) if f < first]
            gold = {h for _, _, h, e in before if e == entity}
            if not gold:
                continue
            kind = {"PRON": "pronoun", "PROPN": "proper"}.get(upos[head], "nominal")
            nearest = max(before)[2]
            same = [b for b in before if forms[b[2]].lower() == forms[head].lower()]
            guesses = {"nearest mention": nearest, "head word match": max(same)[2] if same else nearest}
            for (layer, h), p in preds.items():
                guesses[f"{layer + 1}-{h + 1}"] = p[head].best
            for name, word in guesses.items():
                for key in ("all", kind):
                    scores[name][key][0] += word in gold
                    scores[name][key][1] += 1
    return scores


def unit_map(attn_lh: np.ndarray, word_ids: list[int | None], pieces: list[str]) -> tuple[np.ndarray, int, int]:
    """Word-level map of one head over words, then [CLS], then every [SEP] together (loops)."""
    n_words = 1 + max(w for w in word_ids if w is not None)
    units: list[list[int]] = [[] for _ in range(n_words + 2)]
    for t, w in enumerate(word_ids):
        units[w if w is not None else (n_words if pieces[t] == "[CLS]" else n_words + 1)].append(t)
    to_units = np.stack([attn_lh[:, dst].sum(axis=1) for dst in units], axis=1)
    return np.stack([to_units[src].mean(axis=0) for src in units]), n_words, n_words + 1


