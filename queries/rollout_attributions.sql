-- name: rollout attributions
-- aliases: rollout of an input, rollout map, rollout heat map, joint attention of an input, abnar zuidema figure 3
-- paper: Abnar & Zuidema 2020, "Quantifying Attention Flow in Transformers", Section 3, Figures 3 and 4
-- description: One input's attention rollout row, token by token and layer by layer: how much of the asked
--   token's representation at each layer draws on each input token (see 'attention rollout' for the
--   recurrence and which rows a run keeps). token: cls (the input's [CLS]), last (its last token), a position
--   (0 the first, -1 the last; a run of --rollout all), or empty for the run's own row. A run that keeps every row as the
--   edges are (--rollout all, sparse) lists the kept tokens only. example: the input's example_id (from 0).
-- parameters:
--   run [run]: run id (default: the latest run)
--   example: the input, by its example_id (default: 0)
--   token: whose rollout row: cls, last, a position (0 the first, -1 the last), or empty for the run's own (default: )
-- needs: SELECT count(*) FROM runs WHERE run_id = $run AND rollout <> 'none'
--   else: run {run} keeps no attention rollout: ingest again with --rollout cls (or last, or all)
-- needs: SELECT ($token IN ('', 'cls', 'last') OR TRY_CAST($token AS INTEGER) IS NOT NULL)::INTEGER
--   else: $token: expected cls, last, a position (0 the first, -1 the last) or nothing
-- needs: SELECT count(*) FROM runs WHERE run_id = $run AND rollout IN ('all', CASE WHEN $token = '' THEN rollout ELSE $token END)
--   else: run {run} keeps other rollout rows than those $token asks for: ingest again with --rollout all
-- needs: SELECT ($token <> 'cls' OR EXISTS (SELECT 1 FROM tokens WHERE run_id = $run AND role = 'cls'))::INTEGER
--   else: run {run}'s inputs have no [CLS] (a decoder's first token, its BOS, attends only to itself): ask $token
--   as last or a position
-- needs: SELECT count(*) FROM examples WHERE run_id = $run AND example_id = $example AND NOT skipped
--   else: $example: run {run} has no input of that example_id that ran
-- keys: layer, src_tok, tok_idx
-- plot: tokens tok_idx piece weight
-- figure: a layer x token heat map of the input's rollout row
-- axis: share of the rollout row

WITH firsts AS (
    SELECT min(tok_idx) AS cls FROM tokens WHERE run_id = $run AND example_id = $example AND role = 'cls'
),
asked AS (
    SELECT CASE
               WHEN $token = 'last' OR ($token = '' AND r.rollout = 'last') THEN x.n_tokens - 1
               WHEN $token = 'cls' THEN f.cls
               WHEN $token = '' THEN coalesce(f.cls, x.n_tokens - 1)
               WHEN TRY_CAST($token AS INTEGER) < 0 THEN x.n_tokens + TRY_CAST($token AS INTEGER)
               ELSE TRY_CAST($token AS INTEGER)
           END AS src
    FROM examples x
    JOIN runs r ON r.run_id = x.run_id
    CROSS JOIN firsts f
    WHERE x.run_id = $run AND x.example_id = $example
)
SELECT
    o.layer + 1 AS layer,
    o.src_tok,
    o.dst_tok AS tok_idx,
    t.piece,
    o.weight
FROM rollout o
JOIN asked a ON a.src = o.src_tok
JOIN tokens t ON t.run_id = $run AND t.example_id = $example AND t.tok_idx = o.dst_tok
WHERE o.run_id = $run AND o.example_id = $example
ORDER BY layer, tok_idx
