-- name: special tokens
-- aliases: attention to special tokens, cls sep punctuation, attention to sep, clark figure 2
-- paper: Clark et al. 2019, "What Does BERT Look At?", Section 3.2, Figure 2
-- description: Per head and per layer (rows with head NULL), the mean attention a token puts on
--   [CLS], on [SEP], on periods and commas ('.' and ','), and on every other token, over every token
--   of every input. Exact: from the dense rows at ingest (attn_rows.to_cls / to_sep / to_dot_comma).
-- parameters:
--   run: run id (default: the latest run)
-- plot: layers cls sep dot_comma

SELECT
    layer + 1 AS layer,
    CASE WHEN grouping(head) = 0 THEN head + 1 END AS head,
    avg(to_cls) AS cls,
    avg(to_sep) AS sep,
    avg(to_dot_comma) AS dot_comma,
    1 - avg(to_cls + to_sep + to_dot_comma) AS other
FROM attn_rows
WHERE run_id = $run
GROUP BY GROUPING SETS ((layer, head), (layer))
ORDER BY layer, head NULLS LAST
