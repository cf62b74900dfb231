-- name: entropy
-- aliases: attention entropy, broad attention, focused vs broad attention, clark figure 4
-- paper: Clark et al. 2019, "What Does BERT Look At?", Section 3.3, Figure 4
-- description: Per head, the average entropy (nats) of the attention rows of all tokens and of the
--   [CLS] row, beside the uniform baseline, as Clark et al.'s released code computes them
--   (General_Analysis.ipynb cell 7): each row is first smoothed to 0.9999 a + 1e-4 / n (n: the input's
--   tokens; attn_rows.entropy holds that entropy, from the dense row at ingest); entropy is the mean
--   over the input's rows (every token, [CLS]/[SEP] included), then the mean over inputs, each input
--   weighing the same whatever its length; cls_entropy is the mean over inputs of the [CLS] row's
--   entropy; uniform_entropy, the baseline of both, is the mean over inputs of ln n (the entropy of
--   uniform attention over the input). The same over every head: a constant of the run. [CLS] stands
--   for the input's first special token of role cls or bos (tokens.role: RoBERTa's <s>, Llama's BOS). In a
--   decoder a BOS at position 0 attends only to itself, so its entropy is the smoothing's alone (about
--   0.001 nats); a model whose inputs have no cls or bos token (GPT-2) has no cls_entropy: empty, with a
--   note saying so.
-- parameters:
--   run [run]: run id (default: the latest run)
-- needs: roles stored
-- notes: cls or bos token
--   else: cls_entropy is empty
-- notes: no bos row
--   else: cls_entropy is the smoothing's alone (about 0.001 nats)
-- plot: layers entropy cls_entropy
-- figure: per column (`entropy`, `cls_entropy`), every head as a point over its layer and the layer mean as a line
-- baseline: uniform_entropy
-- axis: entropy (nats)
-- labels:
--   entropy: every token's attention
--   cls_entropy: [CLS]'s attention

WITH per_input AS (
    SELECT r.layer, r.head, r.example_id,
           avg(r.entropy) AS entropy,
           any_value(r.entropy) FILTER (WHERE c.tok_idx IS NOT NULL) AS cls_entropy,
           ln(count(*)) AS uniform_entropy
    FROM attn_rows r
    LEFT JOIN (SELECT example_id, min(tok_idx) AS tok_idx FROM tokens
               WHERE run_id = $run AND role IN ('cls', 'bos') GROUP BY example_id) c
        ON c.example_id = r.example_id AND c.tok_idx = r.src_tok
    WHERE r.run_id = $run
    GROUP BY r.layer, r.head, r.example_id
)
SELECT
    layer + 1 AS layer,
    head + 1 AS head,
    avg(entropy) AS entropy,
    avg(cls_entropy) AS cls_entropy,
    avg(uniform_entropy) AS uniform_entropy
FROM per_input
GROUP BY layer, head
ORDER BY layer, head
