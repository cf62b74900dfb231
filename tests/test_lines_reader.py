"""``--format lines``: each non-blank line one input of one text, words and dependencies by spaCy."""

from __future__ import annotations

import pytest

import atlas


def test_each_line_is_one_input(tmp_path):
    corpus = tmp_path / "mine.txt"
    corpus.write_text("The cat sat on the mat.\n\n  Dogs bark.  \n" + "word " * 600 + "\n", encoding="utf-8")
    done = atlas.ingest(corpus, store=tmp_path / "store", format="lines", progress=False)
    assert (done.n_examples, done.n_skipped) == (2, 1)  # the long line is skipped, never cut
    with atlas.open(tmp_path / "store") as st:
        examples = st.sql("SELECT example_id, sent_ids, first_line, n_sentences, skipped FROM examples ORDER BY 1")
        assert examples.rows() == [(0, ["1"], 1, 1, False), (1, ["3"], 3, 1, False), (2, ["4"], 4, 1, True)]
        words = st.sql("SELECT form, upos, deprel, head_word_idx FROM words WHERE example_id = 1 ORDER BY word_idx")
        assert words["form"].to_list() == ["Dogs", "bark", "."]
        assert words["upos"].null_count() == 0 and words.filter(words["deprel"] == "root").height == 1
        pieces = st.sql("SELECT piece FROM tokens WHERE example_id = 1 ORDER BY tok_idx")["piece"].to_list()
        assert pieces == ["[CLS]", "dogs", "bark", ".", "[SEP]"]


@pytest.mark.parametrize(
    ("text", "said"),
    [("\n  \n", "mine.txt:1: no text, only blank lines"), ("", "mine.txt:1: empty file"),
     ("fine\nbad \xff\n", "mine.txt:2: not UTF-8")],
)  # fmt: skip
def test_a_bad_file_is_one_line_naming_it(tmp_path, text, said):
    corpus = tmp_path / "mine.txt"
    corpus.write_bytes(text.encode("latin-1"))
    with pytest.raises(atlas.AtlasError, match=said):
        atlas.ingest(corpus, store=tmp_path / "store", format="lines", progress=False)
    assert not (tmp_path / "store" / "data").exists()
    with pytest.raises(atlas.AtlasError, match="^pack: a lines file is read one line per input; leave pack out"):
        atlas.ingest(corpus, store=tmp_path / "store", format="lines", pack="pair", progress=False)
