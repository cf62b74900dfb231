-- name: entropy
-- aliases: attention entropy, broad attention, focused vs broad attention, clark figure 4
-- paper: Clark et al. 2019, "What Does BERT Look At?", Section 3.3, Figure 4
-- description: Per head, the mean entropy (nats) of the attention distributions of all tokens and of
--   [CLS] only, each beside its uniform baseline (the entropy of uniform attention over the same
--   input, ln n). Exact: entropy is computed from the dense rows at ingest.
-- parameters:
--   run: run id (default: the latest run)
-- plot: heatmap entropy cls_entropy

SELECT
    r.layer + 1 AS layer,
    r.head + 1 AS head,
    avg(r.entropy) AS entropy,
    avg(ln(e.n_tokens)) AS uniform_entropy,
    avg(r.entropy) FILTER (WHERE t.special = '[CLS]') AS cls_entropy,
    avg(ln(e.n_tokens)) FILTER (WHERE t.special = '[CLS]') AS cls_uniform_entropy
FROM attn_rows r
JOIN tokens t ON t.run_id = r.run_id AND t.example_id = r.example_id AND t.tok_idx = r.src_tok
JOIN examples e ON e.run_id = r.run_id AND e.example_id = r.example_id
WHERE r.run_id = $run
GROUP BY r.layer, r.head
ORDER BY layer, head
