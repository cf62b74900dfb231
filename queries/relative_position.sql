-- name: relative position
-- aliases: relative position heads, previous and next token, positional heads, attention to previous token
-- paper: Clark et al. 2019, "What Does BERT Look At?", Section 3.1
-- description: Per head, the mean attention a token puts on the previous token, on the next token and
--   on itself, over every token of every input ([CLS]/[SEP] included, token-level maps as in the
--   paper). Heads that put more than the threshold on one of them are named in 'specialised'.
--   Exact: computed from the dense rows at ingest (attn_rows.to_prev / to_next / to_self).
-- parameters:
--   run: run id (default: the latest run)
--   threshold: mean attention above which a head is called specialised (default: 0.5)
-- plot: heatmap prev next self

SELECT
    layer + 1 AS layer,
    head + 1 AS head,
    avg(to_prev) AS prev,
    avg(to_next) AS next,
    avg(to_self) AS self,
    CASE
        WHEN avg(to_prev) > $threshold THEN 'previous'
        WHEN avg(to_next) > $threshold THEN 'next'
        WHEN avg(to_self) > $threshold THEN 'self'
    END AS specialised
FROM attn_rows
WHERE run_id = $run
GROUP BY layer, head
ORDER BY layer, head
