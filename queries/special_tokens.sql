-- name: special tokens
-- aliases: attention to special tokens, cls sep punctuation, attention to sep, clark figure 2
-- paper: Clark et al. 2019, "What Does BERT Look At?", Section 3.2, Figure 2
-- description: Per head, the average attention a token puts on [CLS], on the [SEP]s, on the pieces '.'
--   and ',', and on every other token, averaged as Clark et al.'s released code does
--   (General_Analysis.ipynb cell 5, keys 'cls', 'sep', 'punct'): per input, the mean over its rows
--   (every token, [CLS]/[SEP] included), then the mean over inputs, each input weighing the same
--   whatever its length. Rows with head NULL are the per-layer values: the mean over the layer's heads
--   (the line of the notebook's Figure 2, cell 14). Exact: from the dense rows at ingest
--   (attn_rows.to_cls / to_sep / to_dot_comma). By role (tokens.role), whatever the tokens' strings: cls is
--   the attention to the input's special tokens of role cls or bos (BERT's [CLS], RoBERTa's <s>, Llama's <s>
--   / <|begin_of_text|>), sep to those of role sep or eos (RoBERTa's </s>); '.' and ',' are the pieces whose
--   corpus text is a period or a comma (a byte-level BPE's space-marked comma included). A model whose
--   inputs have no such token gets 0 in that column and the mass in 'other', with a note naming the column:
--   GPT-2 (no special token) 0 in cls and sep, a Llama-style decoder (a BOS, no separator) 0 in sep, and a
--   corpus without '.' or ',' (repeated random tokens) 0 in dot_comma. In a decoder each row attends only to
--   itself and earlier tokens (causal), so a BOS at position 0 is visible to every row.
-- parameters:
--   run [run]: run id (default: the latest run)
-- notes: SELECT (NOT EXISTS (SELECT 1 FROM attn_rows WHERE run_id = $run)
--     OR EXISTS (SELECT 1 FROM attn_rows WHERE run_id = $run AND to_cls > 0))::INTEGER
--   else: cls is 0 in every head, a structural zero: run {run}'s inputs hold no special token of role cls or
--   bos (its tokenizer adds none, e.g. GPT-2's)
-- notes: SELECT (NOT EXISTS (SELECT 1 FROM attn_rows WHERE run_id = $run)
--     OR EXISTS (SELECT 1 FROM attn_rows WHERE run_id = $run AND to_sep > 0))::INTEGER
--   else: sep is 0 in every head, a structural zero: run {run}'s inputs hold no special token of role sep or
--   eos (its tokenizer adds none, e.g. a decoder's)
-- notes: SELECT (NOT EXISTS (SELECT 1 FROM attn_rows WHERE run_id = $run)
--     OR EXISTS (SELECT 1 FROM attn_rows WHERE run_id = $run AND to_dot_comma > 0))::INTEGER
--   else: dot_comma is 0 in every head, a structural zero: run {run}'s inputs hold no piece '.' or ',' (e.g.
--   repeated random tokens)
-- plot: layers cls sep dot_comma
-- figure: per column (`cls`, `sep`, `dot_comma`), every head as a point over its layer and the layer mean as a line
-- axis: avg. attention
-- labels:
--   cls: [CLS]
--   sep: [SEP]
--   dot_comma: . or ,

WITH per_input AS (
    SELECT layer, head, example_id,
           avg(to_cls) AS cls, avg(to_sep) AS sep, avg(to_dot_comma) AS dot_comma
    FROM attn_rows
    WHERE run_id = $run
    GROUP BY layer, head, example_id
)
SELECT
    layer + 1 AS layer,
    CASE WHEN grouping(head) = 0 THEN head + 1 END AS head,
    avg(cls) AS cls,
    avg(sep) AS sep,
    avg(dot_comma) AS dot_comma,
    1 - avg(cls + sep + dot_comma) AS other
FROM per_input
GROUP BY GROUPING SETS ((layer, head), (layer))
ORDER BY layer, head NULLS LAST
