"""Kovaleva et al.'s attention pattern taxonomy (Section 4.1), by a transparent rule over the store.

Per (input, head), three features of the whole map, averaged over its rows (query tokens):
- vertical: attention to [CLS] and [SEP] (``attn_rows.to_cls + to_sep``, exact);
- diagonal: attention to the previous and next token (``to_prev + to_next``, exact);
- block: for a pair input, attention from a word piece to the pieces of its own segment, [CLS] and
  [SEP] left out (from ``attn_edges``: exact with --dense runs, a lower bound with sparse ones).
Classes, first rule that holds: Vertical+Diagonal (vertical >= 0.3 and diagonal >= 0.3), Vertical
(vertical >= 0.5), Diagonal (diagonal >= 0.5), Block (pair input and block >= 0.7), else Heterogeneous.
"""

from __future__ import annotations

from atlas.errors import AtlasError, arg
from atlas.store import Store

THRESHOLDS = {"both": 0.3, "vertical": 0.5, "diagonal": 0.5, "block": 0.7}
CLASSES = ("Vertical", "Diagonal", "Vertical+Diagonal", "Block", "Heterogeneous")

FEATURES_SQL = """
WITH r AS (
    SELECT example_id, layer, head, avg(to_cls + to_sep) AS vertical, avg(to_prev + to_next) AS diagonal
    FROM attn_rows WHERE run_id = $run GROUP BY ALL
),
pairs AS (SELECT example_id FROM examples WHERE run_id = $run AND n_sentences = 2 AND NOT skipped),
t AS (SELECT example_id, tok_idx, segment FROM tokens WHERE run_id = $run AND special IS NULL
      AND example_id IN (SELECT example_id FROM pairs)),
n_words AS (SELECT example_id, count(*) AS n FROM t GROUP BY ALL),
b AS (
    SELECT e.example_id, e.layer, e.head, sum(e.weight) / any_value(nw.n) AS block
    FROM attn_edges e
    JOIN t ts ON ts.example_id = e.example_id AND ts.tok_idx = e.src_tok
    JOIN t td ON td.example_id = e.example_id AND td.tok_idx = e.dst_tok AND td.segment = ts.segment
    JOIN n_words nw ON nw.example_id = e.example_id
    WHERE e.run_id = $run
    GROUP BY e.example_id, e.layer, e.head
)
SELECT r.example_id, r.layer, r.head, r.vertical, r.diagonal,
       CASE WHEN r.example_id IN (SELECT example_id FROM pairs) THEN coalesce(b.block, 0) END AS block,
       CASE
           WHEN r.vertical >= $both AND r.diagonal >= $both THEN 'Vertical+Diagonal'
           WHEN r.vertical >= $vertical THEN 'Vertical'
           WHEN r.diagonal >= $diagonal THEN 'Diagonal'
           WHEN b.block >= $block THEN 'Block'
           ELSE 'Heterogeneous'
       END AS pattern
FROM r LEFT JOIN b USING (example_id, layer, head)
ORDER BY r.example_id, r.layer, r.head
"""


def classify(store: Store, run_id: str) -> int:
    """Classify every (input, head) map of a run into the ``patterns`` table; returns the row count."""
    con = store.connect()
    if con.execute("SELECT count(*) FROM runs WHERE run_id = ?", [run_id]).fetchone()[0] == 0:
        raise AtlasError(f"{arg('run', repr(run_id))}: no such run in {store.root} (see 'atlas runs')")
    df = con.execute(FEATURES_SQL, {"run": run_id, **THRESHOLDS}).pl()
    con.close()
    columns = {"run_id": run_id, **{name: df[name].to_list() for name in df.columns}}
    columns["pattern"] = df["pattern"].to_list()
    columns["method"] = "rule"
    store.put(run_id, "patterns", "patterns", columns, len(df))
    return len(df)
