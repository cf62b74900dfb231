"""FrameNet reader and the 'frame heads' entry.

The reader is checked on hand-read exemplars of the shipped sample (release files, unchanged). The entry
is checked against a reference written from the released code (``visualize_attention.ipynb`` cells 15,
57-59, 64): NLTK's reading of the XML and the notebook's filters with the same string tests, spaces in place
of ``word_tokenize``, and attention from transformers' eager implementation over the raw sentence.
"""

from __future__ import annotations

import itertools
import shutil
import tarfile
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from transformers import AutoModel, AutoTokenizer

import atlas
from atlas.catalogue import resolve, run_entry
from atlas.cli import cli
from atlas.errors import AtlasError
from atlas.ingestion.corpus import check_corpus
from atlas.ingestion.pipeline import Settings, ingest
from atlas.ingestion.readers.framenet import REASONS, Exemplar, exemplars, frames_for, read_framenet, rejection
from atlas.store import Store

SAMPLE = Path(__file__).resolve().parent.parent / "samples" / "framenet"
LU = SAMPLE / "lu"
NS = "{http://framenet.icsi.berkeley.edu}"
KEPT = ["1025376", "1025398", "1023077", "1023083", "675332"]


def _exemplars(file: str) -> dict[str, Exemplar]:
    root = ET.fromstring((LU / file).read_bytes())
    core = frames_for(LU).core(root.get("frame"), file)
    return {ex.sent_id: ex for ex in exemplars(root, file, core)}


def test_reader_filters_on_hand_checked_exemplars():
    throw = _exemplars("lu100.xml")
    ex = throw["340800"]  # Karen threw her arms round my neck , spilling champagne everywhere .
    assert [t for t, _, _ in ex.tokens][:4] == ["Karen", "threw", "her", "arms"] and len(ex.tokens) == 12
    assert ex.targets == [(6, 10)]
    assert set(ex.elements) == {("Agent", (1, 1), True), ("Body_part", (3, 4), True), ("Path", (5, 7), False)}
    assert rejection(ex) == "an element within 2 tokens of the target"
    assert rejection(throw["340801"]) == "more than 12 tokens"  # 16 tokens
    assert rejection(throw["340813"]) == "an element of more than 3 tokens"  # Path: about Crilly 's neck
    agitated = _exemplars("lu8776.xml")
    assert rejection(agitated["1025376"]) is None  # He was becoming agitated . (the paper's Figure 3)
    assert rejection(agitated["1025383"]) == "an element within 2 tokens of the target"  # The priest became agitated
    assert rejection(agitated["1025403"]) == "no element of the frame's core set"  # no element annotated
    # Fall_asleep has no core set, though its frame file calls the Sleeper core
    frame = ET.fromstring((SAMPLE / "frame" / "Fall_asleep.xml").read_bytes())
    assert {fe.get("name"): fe.get("coreType") for fe in frame.iter(f"{NS}FE")}["Sleeper"] == "Core"
    faint = _exemplars("lu15499.xml")["1572940"]  # She 's only fainted .
    assert faint.elements == [("Sleeper", (1, 1), False)]
    assert rejection(faint) == "no element of the frame's core set"
    threw_up = _exemplars("lu9913.xml")["1251810"]  # ... Nigel nearly threw up .
    assert threw_up.targets == [(42, 46), (48, 49)] and rejection(threw_up) == "target of more than one span"


def test_filter_rules_beyond_the_sample():
    tokens = [(t, 6 * i, 6 * i + 4) for i, t in enumerate(["aaaaa"] * 8)]  # 8 tokens of 5 characters
    kept = Exemplar("x", tokens, [(24, 28)], [("Core", (1, 1), True)])  # target: token 5; core at distance 4
    assert rejection(kept) is None
    near = Exemplar("x", tokens, [(24, 28)], [("Core", (1, 1), True), ("Other", (7, 7), False)])
    assert rejection(near) == "an element within 2 tokens of the target"  # a non-core element counts too
    far = Exemplar("x", tokens, [(24, 28)], [("Core", (1, 1), True), ("Other", (8, 8), False)])
    assert rejection(far) is None
    part = Exemplar("x", tokens, [(24, 26)], [("Core", (1, 1), True)])  # the target is part of a token
    assert rejection(part) == "target not one token"


def test_reader_keeps_and_stores_spans():
    kept = list(read_framenet(LU))
    assert [s.sent_id for s in kept] == KEPT
    nathan = kept[2]  # Zambia ordered Nathan , who was looking up perplexed .
    assert [(f.name, f.core, f.span, f.target) for f in nathan.frames] == [
        ("Experiencer", True, (3, 3), (9, 9)),
        ("Experiencer", True, (5, 5), (9, 9)),
    ]
    assert [s.sent_id for s in read_framenet(LU / "lu9017.xml")] == ["675332"]  # one file: frame/ beside lu/


def _archive(path: Path, members: dict[str, Path]) -> Path:
    with tarfile.open(path, "w:gz") as archive:
        for name, file in members.items():
            archive.add(file, arcname=name)
    return path


def test_frame_definitions_found_or_one_line_error(tmp_path):
    lu = LU / "lu8776.xml"
    frame = SAMPLE / "frame" / "Emotion_directed.xml"
    inside = _archive(tmp_path / "all.tar.gz", {"fn/lu/lu8776.xml": lu, "fn/frame/Emotion_directed.xml": frame})
    assert [s.sent_id for s in read_framenet(inside)] == KEPT[:2]
    beside = tmp_path / "b"
    (beside / "fn" / "frame").mkdir(parents=True)
    shutil.copy(frame, beside / "fn" / "frame")
    assert [s.sent_id for s in read_framenet(_archive(beside / "ex.tar.gz", {"fn/lu/lu8776.xml": lu}))] == KEPT[:2]
    alone = tmp_path / "c" / "lu"
    alone.mkdir(parents=True)
    shutil.copy(lu, alone)
    with pytest.raises(AtlasError, match=r"no frame definitions at .*c/frame \(the release's frame/ folder"):
        list(read_framenet(alone))
    with pytest.raises(AtlasError, match="no frame definitions"):
        list(read_framenet(_archive(tmp_path / "d.tar.gz", {"fn/lu/lu8776.xml": lu})))
    (tmp_path / "c" / "frame").mkdir()
    with pytest.raises(AtlasError, match=r"lu8776.xml: frame 'Emotion_directed' has no definition \(no .*\)"):
        list(read_framenet(alone))
    with pytest.raises(AtlasError, match=r"c: a FrameNet release's folder; name its lu/ folder \(.*c/lu\)$"):
        list(read_framenet(tmp_path / "c"))  # the release's own folder, which holds lu/ and frame/
    (tmp_path / "e").mkdir()
    with pytest.raises(AtlasError, match=r"e: no lexical-unit files \(lu<number>.xml\) in this folder$"):
        list(read_framenet(tmp_path / "e"))
    empty = _archive(tmp_path / "f.tar.gz", {"fn/frame/Emotion_directed.xml": frame})
    with pytest.raises(AtlasError, match=r"f.tar.gz: no lexical-unit files \(lu<number>.xml\) in this archive$"):
        list(read_framenet(empty))
    (tmp_path / "e" / "x.conllu").write_text("1\tI\n")
    with pytest.raises(AtlasError, match=r"x.conllu:1: not well-formed XML$"):  # not the frame/ folder it lacks
        list(read_framenet(tmp_path / "e" / "x.conllu"))


def test_a_file_whose_exemplars_the_filters_all_drop():
    lu = next(f for f in sorted(LU.glob("lu*.xml")) if not list(read_framenet(f)))
    reasons = Counter(rejection(ex) for ex in _exemplars(lu.name).values())
    with pytest.raises(AtlasError, match=r"holds no exemplar sentence that passes Kovaleva et al.'s filters") as info:
        check_corpus(lu, "framenet")
    said = ", ".join(f"{reasons[r]} {r}" for r in REASONS if reasons[r])  # in the filters' order
    assert str(info.value).endswith(f"filters ({reasons.total()} dropped: {said})")


def test_a_corpus_without_annotated_sentences_is_not_said_to_be_filtered(tmp_path):
    (tmp_path / "lu").mkdir()
    shutil.copytree(SAMPLE / "frame", tmp_path / "frame")
    root = ET.fromstring((LU / "lu8776.xml").read_bytes())
    for parent in list(root.iter()):
        for child in [c for c in parent if c.tag == f"{NS}sentence"]:
            parent.remove(child)
    (tmp_path / "lu" / "lu8776.xml").write_bytes(ET.tostring(root))
    with pytest.raises(AtlasError, match=r"lu: the corpus holds no exemplar sentence$"):
        check_corpus(tmp_path / "lu", "framenet")


def test_the_sentences_each_filter_drops_are_counted_in_the_filters_order(tmp_path):
    """Every annotated sentence (one with a labelled target) is kept or counted once, by the first filter that
    drops it; the ingest says the counts (CLI) and returns them (API)."""
    annotated = 0
    for file in LU.glob("lu*.xml"):
        for sentence in ET.fromstring(file.read_bytes()).iter(f"{NS}sentence"):
            targets = (la for la in sentence.iter(f"{NS}layer") if la.get("name") == "Target")
            annotated += any(lab.get("start") is not None for la in targets for lab in la.iter(f"{NS}label"))
    info = check_corpus(LU, "framenet")
    reasons = [reason for reason, _ in info.dropped]
    assert reasons == [r for r in REASONS if r in reasons] and all(n > 0 for _, n in info.dropped)
    assert len(reasons) >= 4  # the sample exercises most filters
    assert info.n_sentences == len(KEPT) and info.n_sentences + sum(n for _, n in info.dropped) == annotated
    done = atlas.ingest(LU, format="framenet", store=tmp_path / "s", progress=False)
    assert done.dropped == info.dropped
    assert atlas.ingest(LU, format="framenet", store=tmp_path / "s", progress=False).dropped is None  # present
    result = CliRunner().invoke(cli, ["ingest", "--format", "framenet", "--corpus", str(LU), "--store",
                                      str(tmp_path / "t"), "--quiet"])  # fmt: skip
    assert result.exit_code == 0, result.output
    said = ", ".join(f"{n} {reason}" for reason, n in info.dropped)
    total = sum(n for _, n in info.dropped)
    assert f"FrameNet exemplar sentences, Kovaleva et al.'s filters: {total} dropped: {said}\n" in result.output


# The reference: the released procedure over the sample files, independent of ingest/readers/framenet.py.


def _nltk_sentences(file: Path) -> tuple[str, list[dict]]:
    """Per sentence, what NLTK's reader gives: text, Target spans and first-rank FE spans (end exclusive)."""
    root = ET.fromstring(file.read_bytes())
    out = []
    for sentence in root.iter(f"{NS}sentence"):
        info: dict = {"id": sentence.get("ID"), "text": sentence.findtext(f"{NS}text")}
        for ann in sentence.findall(f"{NS}annotationSet"):  # later sets overwrite earlier ones
            found: dict = {}
            for layer in ann.findall(f"{NS}layer"):
                overt = sorted(
                    (int(lab.get("start")), int(lab.get("end")) + 1, lab.get("name"))
                    for lab in layer.findall(f"{NS}label")
                    if lab.get("start") is not None
                )
                if layer.get("name") == "Target" and overt:
                    found.setdefault("Target", [(i, j) for i, j, _ in overt])  # a set's first Target layer
                elif layer.get("name") == "FE" and layer.get("rank") == "1":
                    found["FE"] = (overt, {})
            info.update(found)
        out.append(info)
    return root.get("frame"), out


def _released_annotations() -> list[dict]:
    """Cells 57-59 with ``word_tokenize`` -> ``str.split`` and ``lu['frame']['FEcoreSets']`` from frame/."""

    def exceeds_token_limit(span: str, n_max: int = 3) -> bool:
        return len(span.split()) > n_max

    def is_close(sentence: str, target: tuple[int, int], relations: list) -> bool:
        tokens = sentence.split()
        try:
            target_token_idx = tokens.index(sentence[target[0] : target[1]])
        except ValueError:
            return True
        relation_tokens = list(itertools.chain.from_iterable(sentence[r[0] : r[1]].split() for r in relations))
        padded_tokens = ["<PAD>", "<PAD>"] + tokens + ["<PAD>", "<PAD>"]
        return any(token in relation_tokens for token in padded_tokens[target_token_idx : target_token_idx + 5])

    annotations = []
    for file in sorted(LU.glob("lu*.xml")):
        frame, sentences = _nltk_sentences(file)
        frame_root = ET.fromstring((SAMPLE / "frame" / f"{frame}.xml").read_bytes())
        core_list = [m.get("name") for s in frame_root.iter(f"{NS}FEcoreSet") for m in s.iter(f"{NS}memberFE")]
        for sentence in sentences:
            text = sentence["text"]
            if len(text.split()) > 12 or "Target" not in sentence or len(sentence["Target"]) > 1:
                continue
            fes = sentence["FE"][0]
            if any(exceeds_token_limit(text[span[0] : span[1]]) for span in fes):
                continue
            if is_close(text, sentence["Target"][0], fes):
                continue
            core_fes = [(fe[0], fe[1]) for fe in fes if fe[2] in core_list]
            if core_fes:
                annotations.append(
                    {"id": sentence["id"], "sentence": text, "target": sentence["Target"][0], "links": core_fes}
                )
    return annotations


def _released_scores(model_source: str) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Per head, the mean over sentences of cell 64's score (zip) and of the text's (all pairs, both ways)."""
    tokenizer = AutoTokenizer.from_pretrained(model_source)
    model = AutoModel.from_pretrained(model_source, attn_implementation="eager").eval()
    ids, zipped, every = [], [], []
    for example in _released_annotations():
        sentence = example["sentence"]
        enc = tokenizer(sentence, return_tensors="pt", return_offsets_mapping=True)
        offsets = enc.pop("offset_mapping")[0].tolist()
        with torch.no_grad():
            output = torch.stack([a[0] for a in model(**enc, output_attentions=True).attentions]).double().numpy()
        bert_tokens = ["[CLS]", *tokenizer.tokenize(sentence), "[SEP]"]
        assert bert_tokens == tokenizer.convert_ids_to_tokens(enc["input_ids"][0].tolist())
        start, end = example["target"]
        target_idx = [bert_tokens.index(token) for token in tokenizer.tokenize(sentence[start:end])]
        source_idx = list(
            itertools.chain.from_iterable(
                [bert_tokens.index(token) for token in tokenizer.tokenize(sentence[s:e])] for s, e in example["links"]
            )
        )
        pairs = list(zip(source_idx, target_idx, strict=False))  # cell 15: get_max_source_target_weight
        zipped.append(np.max(np.stack([output[:, :, s, t] for s, t in pairs]), axis=0))

        def inside(a: int, b: int, offsets: list = offsets) -> list[int]:
            return [i for i, (x, y) in enumerate(offsets) if y > x and x >= a and y <= b]

        target = inside(start, end)
        element = [i for s, e in example["links"] for i in inside(s, e)]
        both = [output[:, :, a, b] for a in target for b in element] + [
            output[:, :, b, a] for a in target for b in element
        ]
        every.append(np.max(np.stack(both), axis=0))
        ids.append(example["id"])
    return ids, np.mean(zipped, axis=0), np.mean(every, axis=0)


def _grid(df, column: str) -> np.ndarray:
    grid = np.zeros((int(df["layer"].max()), int(df["head"].max())))
    for row in df.iter_rows(named=True):
        grid[row["layer"] - 1, row["head"] - 1] = row[column]
    return grid


@pytest.fixture(scope="module")
def framenet_run(tmp_path_factory, model) -> tuple[Store, str]:
    store = Store(tmp_path_factory.mktemp("framenet"))
    run = ingest(check_corpus(LU, "framenet"), store, model, Settings(kept_mass=None), progress=False).run_id
    return store, run


def test_frame_heads_equal_the_released_procedure(framenet_run, model):
    store, run = framenet_run
    entry = resolve("frame heads")
    text = run_entry(store.connect(), entry, entry.bind({"run": run}))
    code = run_entry(store.connect(), entry, entry.bind({"run": run, "pairs": "zip"}))
    ids, zipped, every = _released_scores(model.source)
    assert ids == KEPT  # the reader keeps what the released filters keep
    np.testing.assert_allclose(_grid(text, "score"), every, atol=1e-6)
    np.testing.assert_allclose(_grid(code, "score"), zipped, atol=1e-6)
    assert not np.allclose(every, zipped)
    for df in (text, code):
        assert (df["n_sentences"] == len(KEPT)).all()
        scores = df["score"].to_numpy()
        np.testing.assert_allclose(df["percentile_99"][0], np.percentile(scores, 99))
        assert (df["above_99th"].to_numpy() == (scores > np.percentile(scores, 99))).all()
        assert df["above_99th"].sum() >= 1


def test_frame_heads_refuses_a_sparse_run_and_unknown_pairs(framenet_run, model, tmp_path):
    store, run = framenet_run
    entry = resolve("frame heads")
    with pytest.raises(AtlasError, match=r"pairs=first: expected all or zip"):
        run_entry(store.connect(), entry, entry.bind({"run": run, "pairs": "first"}))
    sparse = Store(tmp_path / "sparse")
    sparse_run = ingest(check_corpus(LU, "framenet"), sparse, model, Settings(), progress=False).run_id
    with pytest.raises(AtlasError, match=r"is sparse: frame heads reads single .*dense=True") as info:
        run_entry(sparse.connect(), entry, entry.bind({"run": sparse_run}))
    assert "\n" not in str(info.value) and sparse_run in str(info.value)


@pytest.mark.parametrize("position", ['end="#8"', 'end=""', ""])
def test_a_label_whose_span_is_not_character_positions_is_one_line(tmp_path, position):
    """A label with a start but an end that is not a number (or none) is refused naming the file and the
    sentence, never a traceback."""
    import re

    shutil.copytree(SAMPLE / "frame", tmp_path / "frame")
    (tmp_path / "lu").mkdir()
    for source in sorted(LU.glob("*.xml")):
        text = source.read_text(encoding="utf-8")
        if source == sorted(LU.glob("*.xml"))[0]:
            text = re.sub(r'end="\d+"', position, text, count=1)
        (tmp_path / "lu" / source.name).write_text(text, encoding="utf-8")
    with pytest.raises(AtlasError, match=r"lu/.*\.xml: sentence \d+: label '.*' has end=.*not a character position$"):
        list(read_framenet(tmp_path / "lu"))
