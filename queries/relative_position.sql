-- name: relative position
-- aliases: relative position heads, previous and next token, positional heads, attention to previous token
-- paper: Clark et al. 2019, "What Does BERT Look At?", Section 3.1
-- description: Per head, the average attention a token puts on the previous token, on the next token
--   and on itself, averaged as Clark et al.'s released code does (General_Analysis.ipynb cell 5, keys
--   'left', 'right', 'self'): per input, the mean over its rows (every token, special tokens included,
--   token-level maps; the first token has no previous, the last no next: 0), then the mean over inputs,
--   each input weighing the same whatever its length. Heads whose average exceeds the threshold for
--   one of them are named in 'specialised' (the notebook's cell 18 uses 0.5 for previous and next).
--   Exact: from the dense rows at ingest (attn_rows.to_prev / to_next / to_self).
--   In a decoder no token attends to a later one (causal attention): next is 0 for every head (with a note
--   saying so), and the first row's self is 1.
-- parameters:
--   run [run]: run id (default: the latest run)
--   threshold: mean attention above which a head is called specialised (default: 0.5)
-- needs: SELECT ($threshold BETWEEN 0 AND 1)::INTEGER
--   else: $threshold: expected a share from 0 to 1
-- notes: SELECT (NOT EXISTS (SELECT 1 FROM attn_rows WHERE run_id = $run)
--     OR EXISTS (SELECT 1 FROM attn_rows WHERE run_id = $run AND to_next > 0))::INTEGER
--   else: next is 0 in every head, a structural zero: no token of run {run} attends to a later one, as in a
--   decoder (causal attention: a token sees only itself and the tokens before it)
-- plot: heatmap prev next self
-- figure: a layer x head heat map of each of `prev`, `next`, `self`
-- labels:
--   prev: previous token
--   next: next token
--   self: the token itself

WITH per_input AS (
    SELECT layer, head, example_id,
           avg(to_prev) AS prev, avg(to_next) AS next, avg(to_self) AS self
    FROM attn_rows
    WHERE run_id = $run
    GROUP BY layer, head, example_id
)
SELECT
    layer + 1 AS layer,
    head + 1 AS head,
    avg(prev) AS prev,
    avg(next) AS next,
    avg(self) AS self,
    CASE
        WHEN avg(prev) > $threshold THEN 'previous'
        WHEN avg(next) > $threshold THEN 'next'
        WHEN avg(self) > $threshold THEN 'self'
    END AS specialised
FROM per_input
GROUP BY layer, head
ORDER BY layer, head
