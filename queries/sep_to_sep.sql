-- name: sep to sep
-- aliases: sep to sep attention, attention from sep, sep attends to itself, clark figure 3
-- paper: Clark et al. 2019, "What Does BERT Look At?", Section 3.2, Figure 3
-- description: Attention to the [SEP]s, per head and per layer (rows with head NULL: the mean over the
--   layer's heads), as Clark et al.'s released code computes it (General_Analysis.ipynb cell 5, keys
--   'sep_sep' and 'rest_sep', drawn as "[SEP] -> [SEP]" and "other -> [SEP]" in cell 14): per input,
--   sep_sep is the attention the [SEP] rows put on every [SEP] (themselves and the other), summed and
--   divided by the number of [SEP] rows, and rest_sep the attention every other row ([CLS] included)
--   puts on the [SEP]s, divided by the number of those rows; then the mean over inputs. The released
--   code divides by 2 and n - 2, which assumes two [SEP]s (its inputs are always [CLS] a [SEP] b [SEP]);
--   here each input's own counts are used, so an input with one [SEP] (a sentence alone, the odd last
--   sentence of --pack pair, --pack window) counts with its [SEP] row, where the released code would
--   halve sep_sep and divide rest_sep by n - 2 instead of n - 1. to_itself and to_other_sep (the
--   project's own split, the paper's "themselves and the other [SEP]") share sep_sep the same way
--   (to_itself + to_other_sep = sep_sep). n_inputs: inputs averaged; one_sep_inputs: those with a
--   single [SEP] (ingest with --pack pair for the paper's two-segment inputs). Exact: from the dense
--   rows at ingest (attn_rows.to_sep / to_self). [SEP] stands for the input's special tokens of role sep or
--   eos (tokens.role): RoBERTa's </s>, three in a pair input (<s> a </s></s> b </s>), whose sep_sep is the
--   mean over its three </s> rows. A model whose inputs hold none (a decoder: GPT-2, Llama) has no [SEP]
--   row: sep_sep, to_itself and to_other_sep are empty (with a note saying so) and rest_sep is 0.
-- parameters:
--   run [run]: run id (default: the latest run)
-- needs: roles stored
-- notes: sep or eos token
--   else: sep_sep, to_itself and to_other_sep are empty, rest_sep is 0
-- notes: SELECT count(*) FROM examples WHERE run_id = $run AND n_sentences = 2
--   else: run {run} has no two-segment inputs, so every input has one [SEP] (the paper's inputs are
--   [CLS] a [SEP] b [SEP]: ingest with --pack pair)
-- plot: layers sep_sep rest_sep
-- figure: per column (`sep_sep`, `rest_sep`), every head as a point over its layer and the layer mean as a line
-- axis: avg. attention
-- labels:
--   sep_sep: [SEP] → [SEP]
--   rest_sep: other tokens → [SEP]

WITH seps AS (
    SELECT example_id, tok_idx, count(*) OVER (PARTITION BY example_id) AS n_seps
    FROM tokens
    WHERE run_id = $run AND role IN ('sep', 'eos')
),
per_input AS (
    SELECT r.layer, r.head, r.example_id, any_value(s.n_seps) FILTER (WHERE s.tok_idx IS NOT NULL) AS n_seps,
           avg(r.to_sep) FILTER (WHERE s.tok_idx IS NOT NULL) AS sep_sep,
           avg(r.to_sep) FILTER (WHERE s.tok_idx IS NULL) AS rest_sep,
           avg(r.to_self) FILTER (WHERE s.tok_idx IS NOT NULL) AS to_itself,
           avg(r.to_sep - r.to_self) FILTER (WHERE s.tok_idx IS NOT NULL) AS to_other_sep
    FROM attn_rows r
    LEFT JOIN seps s ON s.example_id = r.example_id AND s.tok_idx = r.src_tok
    WHERE r.run_id = $run
    GROUP BY r.layer, r.head, r.example_id
)
SELECT
    layer + 1 AS layer,
    CASE WHEN grouping(head) = 0 THEN head + 1 END AS head,
    avg(sep_sep) AS sep_sep,
    avg(rest_sep) AS rest_sep,
    avg(to_itself) AS to_itself,
    avg(to_other_sep) AS to_other_sep,
    count(DISTINCT example_id) AS n_inputs,
    count(DISTINCT example_id) FILTER (WHERE n_seps = 1) AS one_sep_inputs
FROM per_input
GROUP BY GROUPING SETS ((layer, head), (layer))
ORDER BY layer, head NULLS LAST
