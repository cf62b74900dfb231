-- name: frame heads
-- aliases: frame-semantic heads, framenet heads, semantic relation heads, kovaleva figure 3
-- paper: Kovaleva et al. 2019, "Revealing the Dark Secrets of BERT", Section 4.2, Figure 3
-- description: Per head, over the FrameNet sentences of a run (ingest --format framenet, which applies
--   the released code's filters), the mean over sentences of the largest attention weight between the
--   frame-evoking target and the core frame elements. pairs=all (the paper's text: "the maximum ...
--   attention weight among those token pairs that correspond to the annotated semantic link"): every
--   piece of the target with every piece of a core element, in either direction. pairs=zip (the
--   released code, visualize_attention.ipynb cells 15 and 64): the core elements' pieces in order
--   (elements by position) zipped with the target's pieces, the element piece attending to the target
--   piece; mostly the first piece of the first core element -> the first target piece. Also the 99th
--   percentile of the scores over all heads and whether the head is above it. Reads single weights, so
--   it needs a dense run (--dense): a sparse run, which can lack the target/element weights, is refused.
-- parameters:
--   run [run]: run id (default: the latest run)
--   pairs: all (the paper's text) or zip (the released code) (default: all)
-- needs: SELECT count(*) FROM frames WHERE run_id = $run
--   else: run {run} has no FrameNet frames: ingest FrameNet exemplars with --format framenet
-- needs: SELECT count(*) FROM runs WHERE run_id = $run AND kept_mass IS NULL
--   else: run {run} is sparse: frame heads reads single attention weights (target/element pairs); ingest with --dense
-- plot: heatmap score
-- figure: a layer x head heat map of each of `score`
-- labels:
--   score: attention, target and core elements

WITH checked AS (  -- the run's row; raises for a sparse run or an unknown pairs value
    SELECT CASE
        WHEN kept_mass IS NOT NULL THEN error('atlas: run ' || run_id
            || ' is sparse: frame heads reads single attention weights (target/element pairs); ingest with --dense')
        WHEN $pairs NOT IN ('all', 'zip') THEN error('atlas: $pairs: expected all or zip')
    END AS failed
    FROM runs WHERE run_id = $run
),
t AS (SELECT example_id, tok_idx, word_idx FROM tokens WHERE run_id = $run AND word_idx IS NOT NULL),
target AS (  -- the target's pieces in order (one target per sentence)
    SELECT example_id, tok_idx, row_number() OVER (PARTITION BY example_id ORDER BY tok_idx) AS n
    FROM (
        SELECT DISTINCT f.example_id, t.tok_idx
        FROM frames f JOIN t ON t.example_id = f.example_id AND t.word_idx BETWEEN f.target_first AND f.target_last
        WHERE f.run_id = $run AND f.core
    )
),
element AS (  -- the core elements' pieces, in the released code's order: elements by position, then pieces
    SELECT f.example_id, t.tok_idx,
           row_number() OVER (PARTITION BY f.example_id
                              ORDER BY f.element_first, f.element_last, f.element, t.tok_idx) AS n
    FROM frames f JOIN t ON t.example_id = f.example_id AND t.word_idx BETWEEN f.element_first AND f.element_last
    WHERE f.run_id = $run AND f.core
),
links AS (  -- (attending piece, attended piece)
    SELECT e.example_id, e.tok_idx AS src_tok, g.tok_idx AS dst_tok
    FROM element e JOIN target g ON g.example_id = e.example_id
    WHERE $pairs = 'all' OR e.n = g.n
    UNION
    SELECT e.example_id, g.tok_idx, e.tok_idx
    FROM element e JOIN target g ON g.example_id = e.example_id
    WHERE $pairs = 'all'
),
sentences AS (SELECT DISTINCT example_id FROM links),
heads AS (SELECT DISTINCT layer, head FROM attn_rows WHERE run_id = $run),
best AS (
    SELECT e.example_id, e.layer, e.head, max(e.weight) AS weight
    FROM attn_edges e JOIN links USING (example_id, src_tok, dst_tok)
    WHERE e.run_id = $run
    GROUP BY ALL
),
scores AS (
    SELECT h.layer, h.head, avg(b.weight) AS score, count(*) AS n_sentences
    FROM sentences s CROSS JOIN heads h
    LEFT JOIN best b ON b.example_id = s.example_id AND b.layer = h.layer AND b.head = h.head
    GROUP BY h.layer, h.head
)
SELECT layer + 1 AS layer, head + 1 AS head, score,
       quantile_cont(score, 0.99) OVER () AS percentile_99,
       score > quantile_cont(score, 0.99) OVER () AS above_99th,
       n_sentences
FROM scores
WHERE (SELECT count(failed) FROM checked) = 0
ORDER BY layer, head
