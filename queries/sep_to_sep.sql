-- name: sep to sep
-- aliases: sep to sep attention, attention from sep, sep attends to itself, clark figure 3
-- paper: Clark et al. 2019, "What Does BERT Look At?", Section 3.2, Figure 3
-- description: Attention from [SEP] tokens: the mean share each [SEP] puts on itself and on the other
--   [SEP] of its input, per head and per layer (rows with head NULL). The other [SEP] exists in
--   two-segment inputs only (ingest with --pack pair, as the paper's [CLS] a [SEP] b [SEP]).
-- parameters:
--   run: run id (default: the latest run)
-- plot: layers to_itself to_other_sep

SELECT
    r.layer + 1 AS layer,
    CASE WHEN grouping(r.head) = 0 THEN r.head + 1 END AS head,
    avg(r.to_self) AS to_itself,
    avg(r.to_sep - r.to_self) AS to_other_sep,
    count(*) AS n_rows
FROM attn_rows r
JOIN tokens t ON t.run_id = r.run_id AND t.example_id = r.example_id AND t.tok_idx = r.src_tok
WHERE r.run_id = $run AND t.special = '[SEP]'
GROUP BY GROUPING SETS ((r.layer, r.head), (r.layer))
ORDER BY layer, head NULLS LAST
