-- name: frame heads
-- aliases: frame-semantic heads, framenet heads, semantic relation heads, kovaleva figure 3
-- paper: Kovaleva et al. 2019, "Revealing the Dark Secrets of BERT", Section 4.2, Figure 3
-- description: Per head, over the FrameNet sentences of a run (ingest --format framenet, which applies
--   the paper's filters), the mean over sentences of the maximum attention weight between a token of
--   the frame-evoking target and a token of a core frame element, in either direction; the 99th
--   percentile of these scores over all heads, and whether the head is above it. Exact with --dense
--   runs (a sparse run can only miss weights below its kept mass).
-- parameters:
--   run: run id (default: the latest run)
-- plot: heatmap score

WITH t AS (SELECT example_id, tok_idx, word_idx FROM tokens WHERE run_id = $run AND word_idx IS NOT NULL),
links AS (  -- token pairs of a target and a core element, both directions
    SELECT DISTINCT f.example_id, a.tok_idx AS src_tok, b.tok_idx AS dst_tok
    FROM frames f
    JOIN t a ON a.example_id = f.example_id
    JOIN t b ON b.example_id = f.example_id
    WHERE f.run_id = $run AND f.core AND (
        (a.word_idx BETWEEN f.target_first AND f.target_last AND b.word_idx BETWEEN f.element_first AND f.element_last)
        OR (b.word_idx BETWEEN f.target_first AND f.target_last AND a.word_idx BETWEEN f.element_first AND f.element_last))
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
    SELECT h.layer, h.head, avg(coalesce(b.weight, 0)) AS score, count(*) AS n_sentences
    FROM sentences s CROSS JOIN heads h
    LEFT JOIN best b ON b.example_id = s.example_id AND b.layer = h.layer AND b.head = h.head
    GROUP BY h.layer, h.head
)
SELECT layer + 1 AS layer, head + 1 AS head, score,
       quantile_cont(score, 0.99) OVER () AS percentile_99,
       score > quantile_cont(score, 0.99) OVER () AS above_99th,
       n_sentences
FROM scores
ORDER BY layer, head
