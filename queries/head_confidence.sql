-- name: head confidence
-- aliases: confidence, confident heads, voita confidence, maximum attention weight, max attention
-- paper: Voita et al. 2019, "Analyzing Multi-Head Self-Attention: Specialized Heads Do the Heavy Lifting, the Rest Can Be Pruned", Section 4
-- description: Per head, Voita et al.'s confidence: "the average of its maximum attention weight excluding
--   the end of sentence symbol, where average is taken over tokens" of a set of sentences (their footnote:
--   EOS is left out as not a real token). Their released code (lena-voita/the-story-of-heads) does not
--   compute it; the text is followed: per row the largest weight of the whole row, averaged over the rows
--   of every input together (tokens, not inputs, weigh the same). Their encoder's inputs hold one special
--   token, the final EOS; here every special token the tokenizer's template adds ([CLS], [SEP], <s>, </s>,
--   a BOS) is left out the same way, as a row (tokens.special), and only rows of real tokens count. In a
--   decoder without a BOS (GPT-2) the first token's row, which sees only itself, counts with weight 1. A
--   head that gives each token's attention to one token scores near 1; uniform attention over n tokens,
--   1/n. Exact at any sparsity: a row's largest weight is always one of its kept edges (on a sparse run in
--   steps of 1/256, error at most 1/512). score: the confidence; n_rows: the rows averaged over.
-- parameters:
--   run [run]: run id (default: the latest run)
-- plot: heatmap score
-- figure: a layer x head heat map of each of `score`

WITH real_rows AS (  -- rows of the corpus's pieces, not of the template's special tokens
    SELECT example_id, tok_idx AS src_tok FROM tokens WHERE run_id = $run AND special IS NULL
),
row_max AS (
    SELECT layer, head, example_id, src_tok, max(weight) AS top
    FROM attn_edges
    WHERE run_id = $run
    GROUP BY layer, head, example_id, src_tok
)
SELECT
    layer + 1 AS layer,
    head + 1 AS head,
    avg(top) AS score,
    count(*) AS n_rows
FROM row_max
SEMI JOIN real_rows USING (example_id, src_tok)
GROUP BY layer, head
ORDER BY score DESC, layer, head
