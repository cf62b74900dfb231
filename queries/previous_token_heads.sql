-- name: previous-token heads
-- aliases: previous token heads, previous token head, prev token heads, previous_token_head
-- paper: Olsson et al. 2022, "In-context Learning and Induction Heads"; the score of TransformerLens's head_detector.py (detect_head, 'previous_token_head')
-- description: Per head, the share of its attention that goes to the previous token: TransformerLens's
--   detect_head with its defaults (error_measure 'mul', exclude_bos and exclude_current_token False), whose
--   detection pattern for 'previous_token_head' is the diagonal below the main one (query i, key i - 1). Per
--   input, the attention on the pattern's positions over the attention in the whole map (the sum of its rows:
--   the input's number of tokens), every token's row counted, the first token's (which has no previous) and
--   the special tokens' included; then the mean over inputs, as detect_head averages a list of texts. The
--   input's tokens are those the run stores: the tokenizer's own template (a BOS first where it puts one;
--   TransformerLens's to_tokens prepends one to every text, GPT-2's included). Inputs of one token are left
--   out (detect_head refuses them). Its ceiling is 1 - 1/n (every row but the first wholly on its previous
--   token); the previous-token head of an induction circuit (Olsson et al.) stands out against the other heads
--   without reaching it (the sample decoder's: 0.43, the next 0.10). The same number as 'relative position' prev. Exact at any sparsity: the mass
--   to the previous token is a row statistic computed from the dense row at ingest (attn_rows.to_prev, on a
--   sparse run in steps of 1/2048). score: that share; n_inputs: the inputs averaged over.
-- parameters:
--   run [run]: run id (default: the latest run)
-- plot: heatmap score
-- figure: a layer x head heat map of each of `score`

WITH per_input AS (
    SELECT layer, head, example_id, sum(to_prev) / count(*) AS score
    FROM attn_rows
    WHERE run_id = $run
    GROUP BY layer, head, example_id
    HAVING count(*) > 1
)
SELECT
    layer + 1 AS layer,
    head + 1 AS head,
    avg(score) AS score,
    count(*) AS n_inputs
FROM per_input
GROUP BY layer, head
ORDER BY score DESC, layer, head
