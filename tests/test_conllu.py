"""The CoNLL-U reader: words, multiword tokens, empty nodes, CorefUD mentions, and errors with file:line."""

from __future__ import annotations

from pathlib import Path

import pytest

from atlas.errors import AtlasError
from atlas.ingestion.readers.conllu import read_conllu
from tests.conftest import GUM_SAMPLE

GOOD = """# newdoc id = d1
# sent_id = s1
# text = I don't know.
1	I	I	PRON	PRP	_	3	nsubj	_	Entity=(e1-person-1)
2-3	don't	_	_	_	_	_	_	_	_
2	do	do	AUX	VBP	_	4	aux	_	_
3	n't	not	PART	RB	_	4	advmod	_	_
4	know	know	VERB	VB	_	0	root	_	SpaceAfter=No
4.1	knows	_	_	_	_	_	_	_	_
5	.	.	PUNCT	.	_	4	punct	_	_

# sent_id = s2
1	The	the	DET	DT	_	2	det	_	Entity=(e2-thing-1
2	cat	cat	NOUN	NN	_	3	nsubj	_	Entity=e2)
3	ran	run	VERB	VBD	_	0	root	_	Entity=(e1-person-1)

"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "c.conllu"
    path.write_text(text, encoding="utf-8")
    return path


def test_words_skip_ranges_and_empty_nodes(tmp_path):
    sentences = list(read_conllu(write(tmp_path, GOOD)))
    assert [s.sent_id for s in sentences] == ["s1", "s2"]
    assert [w.form for w in sentences[0].words] == ["I", "do", "n't", "know", "."]
    first = sentences[0].words[0]
    assert (first.upos, first.xpos, first.head, first.deprel, first.line) == ("PRON", "PRP", 3, "nsubj", 4)
    assert sentences[0].words[3].head == 0
    assert sentences[0].doc_id == sentences[1].doc_id == "d1"


def test_coref_mentions_from_entity_brackets(tmp_path):
    s1, s2 = read_conllu(write(tmp_path, GOOD))
    assert [(m.entity_id, m.start, m.end) for m in s1.mentions] == [("e1", (0, 1), (0, 1))]
    assert sorted((m.entity_id, m.start, m.end) for m in s2.mentions) == [
        ("e1", (1, 3), (1, 3)),
        ("e2", (1, 1), (1, 2)),
    ]


def test_gum_sample_every_bracket_becomes_a_mention():
    sentences = list(read_conllu(GUM_SAMPLE))
    text = GUM_SAMPLE.read_text(encoding="utf-8")
    opened = sum(
        item.count("(")
        for line in text.splitlines()
        if "Entity=" in line
        for item in line.split("\t")[9].split("|")
        if item.startswith("Entity=")
    )
    assert sum(len(s.mentions) for s in sentences) == opened > 100


W1 = "1\tI\tI\tPRON\tPRP\t_\t0\troot\t_\t_\n"


@pytest.mark.parametrize(
    ("bad", "line", "message"),
    [
        ("1\tI\tI\tPRON\tPRP\t_\t0\troot\t_\n", 3, "expected 10 tab-separated columns, found 9"),
        ("1\tI\tI\tPRON\tPRP\t_\tx\troot\t_\t_\n", 3, "HEAD 'x' is not an integer"),
        ("1\tI\tI\tPRON\tPRP\t_\t7\troot\t_\t_\n", 3, "HEAD 7 is out of range"),
        ("1\tI\tI\tPRON\tPRP\t_\t1\troot\t_\t_\n", 3, "HEAD 1 is the word itself"),
        ("1\tI\tI\tPRON\tPRP\t_\t0\troot\t_\tEntity=(e1-person\n", 3, "'(e1' is never closed"),
        ("1\tI\tI\tPRON\tPRP\t_\t0\troot\t_\tEntity=e9)\n", 3, "closes 'e9', which is not open"),
        ("1\tI\tI\tPRON\tPRP\t_\t0\troot\t_\tEntity=((e1\n", 3, "malformed Entity value"),
        ("2\tI\tI\tPRON\tPRP\t_\t0\troot\t_\t_\n", 3, "expected word id 1, found '2'"),
        (W1 + "2\tsat\tsit\tVERB\tVBD\t_\t3\tx\t_\t_\n3\t.\t.\tPUNCT\t.\t_\t2\tpunct\t_\t_\n", 4,
         "HEAD 3: words 2, 3 head each other in a cycle that never reaches the root (HEAD 0)"),
        ("1\tI\tI\tPRON\tPRP\t_\t2\tnsubj\t_\t_\n2\tsat\tsit\tVERB\tVBD\t_\t3\tx\t_\t_\n"
         "3\t.\t.\tPUNCT\t.\t_\t1\tpunct\t_\t_\n", 3, "HEAD 2: words 1, 2, 3 head each other in a cycle"),
        ("1\tI\0\tI\tPRON\tPRP\t_\t0\troot\t_\t_\n", 3, "a NUL byte, expected text"),
        ("1-2\tdon't\t_\t_\t_\t_\t_\t_\t_\t_\n" + W1, 3, "multiword-token range 1-2 is out of range (sentence has 1"),
        (W1 + "3-2\tdon't\t_\t_\t_\t_\t_\t_\t_\t_\n", 4, "range '3-2' must span the words that follow it, from 2"),
        (W1 + "2-9\tdon't\t_\t_\t_\t_\t_\t_\t_\t_\n2\tdo\tdo\tAUX\tVBP\t_\t1\taux\t_\t_\n", 4,
         "multiword-token range 2-9 is out of range (sentence has 2 words)"),
        ("1-2\tdon't\t_\t_\t_\t_\t_\t_\t_\t_\n", 3, "range 1-2 is out of range (sentence has 0 words)"),  # not dropped
    ],
)  # fmt: skip
def test_malformed_lines_name_file_and_line(tmp_path, bad, line, message):
    path = write(tmp_path, "# sent_id = a\n# text = I\n" + bad + "\n")
    with pytest.raises(AtlasError) as err:
        list(read_conllu(path))
    assert str(err.value).startswith(f"{path}:{line}: ")
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_empty_node_brackets_and_discontinuous_mentions(tmp_path):
    text = (
        "1\tA\ta\tDET\tDT\t_\t2\tdet\t_\tEntity=(e1-x\n"
        "1.1\tB\tb\tNOUN\tNN\t_\t_\t_\t_\tEntity=e1)\n"
        "2\tC\tc\tNOUN\tNN\t_\t0\troot\t_\tEntity=(e2[1/2]-y)\n"
        "3\tD\td\tVERB\tVB\t_\t2\tdep\t_\t_\n"
        "4\tE\te\tNOUN\tNN\t_\t2\tobj\t_\tEntity=(e2[2/2]-y)\n\n"
    )
    (sentence,) = read_conllu(write(tmp_path, text))
    assert [w.form for w in sentence.words] == ["A", "C", "D", "E"]
    # the bracket closed on the empty node closes at the word before it; a discontinuous mention counts once
    assert sorted((m.entity_id, m.start, m.end) for m in sentence.mentions) == [
        ("e1", (0, 1), (0, 1)),
        ("e2", (0, 2), (0, 2)),
    ]


def test_bad_encoding_names_the_line(tmp_path):
    path = tmp_path / "c.conllu"
    path.write_bytes(b"# sent_id = a\n1\tcaf\xe9\tx\tNOUN\tNN\t_\t0\troot\t_\t_\n\n")
    with pytest.raises(AtlasError, match=r"c.conllu:2: not valid UTF-8"):
        list(read_conllu(path))
