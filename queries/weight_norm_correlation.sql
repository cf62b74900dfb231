-- name: weight-norm correlation
-- aliases: alpha f(x) correlation, weight norm correlation, spearman alpha fx, kobayashi value norms, value norm by token kind
-- paper: Kobayashi et al. 2020, "Attention is Not Only a Weight: Analyzing Transformers with Vector Norms", Section 4.2, Figure 4
-- description: Per layer, the Spearman correlation of the attention weight alpha_ij and the norm ||f(x_j)|| of
--   what the head passes on from key j (attn_rows.value_norm), over every (query, key) pair of every head and
--   input (a decoder's: key at or before the query), as their released relation_between_alpha_fx.py pools
--   the pairs; the row with layer NULL pools every layer, as the released code does (ties take their average
--   rank, as scipy.stats.spearmanr gives them). Kobayashi et al. find the two negatively correlated in
--   BERT-base: the heavily attended [CLS], [SEP] and punctuation pass on small vectors. Beside it, the mean
--   ||f(x)|| of each kind of token ([CLS]/BOS, [SEP]/EOS, the pieces '.' and ',', every other token) as
--   their re-examine.py averages it: per input and head the mean over the kind's tokens, then the mean over
--   inputs, then over the layer's heads. An input without a token of the kind is left out of that kind's
--   mean (the released code's plain mean would make it NaN: see the fidelity notes). Reads every weight: a
--   dense run ingested with --norms.
-- parameters:
--   run [run]: run id (default: the latest run)
-- needs: SELECT count(*) FROM runs WHERE run_id = $run AND value_norms
--   else: run {run} holds no value norms: ingest again with --norms
-- needs: SELECT count(*) FROM runs WHERE run_id = $run AND kept_mass IS NULL
--   else: run {run} is sparse: the correlation reads every weight; ingest with --dense --norms
-- plot: lines layer f_cls f_sep f_dot_comma f_other
-- figure: per layer, the mean norm ||f(x)|| of what a head passes on from each kind of token
-- axis: mean ||f(x)||
-- labels:
--   f_cls: [CLS]
--   f_sep: [SEP]
--   f_dot_comma: . or ,
--   f_other: other tokens

WITH pairs AS (
    SELECT e.layer, e.weight AS a, r.value_norm AS f
    FROM attn_edges e
    JOIN attn_rows r
      ON r.example_id = e.example_id AND r.layer = e.layer AND r.head = e.head AND r.src_tok = e.dst_tok
    WHERE e.run_id = $run AND r.run_id = $run
),
ranked AS (
    SELECT layer,
           rank() OVER (PARTITION BY layer ORDER BY a) + (count(*) OVER (PARTITION BY layer, a) - 1) / 2.0 AS ra,
           rank() OVER (PARTITION BY layer ORDER BY f) + (count(*) OVER (PARTITION BY layer, f) - 1) / 2.0 AS rf,
           rank() OVER (ORDER BY a) + (count(*) OVER (PARTITION BY a) - 1) / 2.0 AS ra_all,
           rank() OVER (ORDER BY f) + (count(*) OVER (PARTITION BY f) - 1) / 2.0 AS rf_all
    FROM pairs
),
correlations AS (
    SELECT layer, count(*) AS pairs, corr(ra, rf) AS spearman FROM ranked GROUP BY layer
    UNION ALL
    SELECT NULL, count(*), corr(ra_all, rf_all) FROM ranked
),
kinds AS (
    SELECT example_id, tok_idx,
           CASE WHEN role IN ('cls', 'bos') THEN 'cls' WHEN role IN ('sep', 'eos') THEN 'sep'
                WHEN dot_comma THEN 'dot_comma' ELSE 'other' END AS kind
    FROM tokens
    WHERE run_id = $run
),
per_head AS (  -- per head and kind: the mean over inputs of the mean over the kind's tokens
    SELECT layer, head, kind, avg(f) AS f
    FROM (
        SELECT r.layer, r.head, r.example_id, k.kind, avg(r.value_norm) AS f
        FROM attn_rows r
        JOIN kinds k ON k.example_id = r.example_id AND k.tok_idx = r.src_tok
        WHERE r.run_id = $run
        GROUP BY r.layer, r.head, r.example_id, k.kind
    ) per_input
    GROUP BY layer, head, kind
),
per_layer AS (
    SELECT layer,
           avg(CASE WHEN kind = 'cls' THEN f END) AS f_cls,
           avg(CASE WHEN kind = 'sep' THEN f END) AS f_sep,
           avg(CASE WHEN kind = 'dot_comma' THEN f END) AS f_dot_comma,
           avg(CASE WHEN kind = 'other' THEN f END) AS f_other
    FROM per_head
    GROUP BY GROUPING SETS ((layer), ())
)
SELECT
    c.layer + 1 AS layer,
    c.pairs,
    c.spearman,
    p.f_cls,
    p.f_sep,
    p.f_dot_comma,
    p.f_other
FROM correlations c
JOIN per_layer p ON p.layer IS NOT DISTINCT FROM c.layer
ORDER BY c.layer NULLS LAST
