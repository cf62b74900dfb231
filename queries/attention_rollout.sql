-- name: attention rollout
-- aliases: rollout, joint attention, abnar zuidema, attention flow, quantifying attention flow, rollout shares
-- paper: Abnar & Zuidema 2020, "Quantifying Attention Flow in Transformers", Section 3, attention rollout
-- description: Per layer, where a token's attention rollout lands, the mean over inputs: on the token itself
--   (self), on the input's [CLS]/BOS (cls) and [SEP]/EOS (sep) tokens other than itself, and on every other
--   token (words: a sparse run's shares are those of the kept weights). The rollout of layer l is row q of the joint attention through layers 1 to l, as their
--   released compute_joint_attention computes it: each layer's heads averaged, the residual added (A + I, rows
--   renormalised), joint_l = aug_l joint_(l-1); it says how much of token q's representation at layer l
--   draws on each input token. token: whose row: cls (the input's [CLS]; a decoder has none: its BOS row
--   attends only to itself), last (its last token), a position (0 the first, -1 the last; a run of --rollout
--   all), or empty for the rows the run keeps (--rollout cls or last; a run that keeps every row: cls where
--   the input has one, else last). Computed at ingest from the dense maps (table rollout): rows of --rollout
--   cls and last are whole; --rollout all keeps each row as the edges are, its largest weights up to the
--   run's kept mass and at most its max_edges, so on a sparse run these shares are lower bounds (the cap
--   binds first: a rollout row is spread wider than an attention row). words: every other token. 'rollout
--   attributions' gives one input's rows token by token. Attention flow (the paper's max-flow variant) is not
--   computed: one maximum flow per (token, input token) pair over a graph of n x (layers + 1) nodes.
-- parameters:
--   run [run]: run id (default: the latest run)
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
-- plot: lines layer self cls sep words
-- figure: per layer, where a token's rollout row lands, the mean over inputs
-- axis: share of the rollout row
-- percent: self cls sep words
-- labels:
--   self: the token itself
--   cls: [CLS]/BOS
--   sep: [SEP]/EOS
--   words: other tokens

WITH kept AS (
    SELECT rollout FROM runs WHERE run_id = $run
),
firsts AS (  -- each input's first cls/bos token
    SELECT example_id, min(tok_idx) AS cls
    FROM tokens
    WHERE run_id = $run AND role = 'cls'
    GROUP BY example_id
),
asked AS (  -- each input's asked row
    SELECT x.example_id,
           CASE
               WHEN $token = 'last' OR ($token = '' AND k.rollout = 'last') THEN x.n_tokens - 1
               WHEN $token = 'cls' THEN f.cls
               WHEN $token = '' THEN coalesce(f.cls, x.n_tokens - 1)
               WHEN TRY_CAST($token AS INTEGER) < 0 THEN x.n_tokens + TRY_CAST($token AS INTEGER)
               ELSE TRY_CAST($token AS INTEGER)
           END AS src
    FROM examples x
    CROSS JOIN kept k
    LEFT JOIN firsts f ON f.example_id = x.example_id
    WHERE x.run_id = $run AND NOT x.skipped
),
landing AS (
    SELECT r.example_id, r.layer,
           sum(CASE WHEN r.dst_tok = r.src_tok THEN r.weight ELSE 0 END) AS self,
           sum(CASE WHEN r.dst_tok <> r.src_tok AND t.role IN ('cls', 'bos') THEN r.weight ELSE 0 END) AS cls,
           sum(CASE WHEN r.dst_tok <> r.src_tok AND t.role IN ('sep', 'eos') THEN r.weight ELSE 0 END) AS sep,
           sum(CASE WHEN r.dst_tok <> r.src_tok AND (t.role IS NULL OR t.role NOT IN ('cls', 'bos', 'sep', 'eos'))
                    THEN r.weight ELSE 0 END) AS words
    FROM rollout r
    JOIN asked a ON a.example_id = r.example_id AND a.src = r.src_tok
    JOIN tokens t ON t.run_id = $run AND t.example_id = r.example_id AND t.tok_idx = r.dst_tok
    WHERE r.run_id = $run
    GROUP BY r.example_id, r.layer
)
SELECT
    layer + 1 AS layer,
    count(*) AS inputs,
    avg(self) AS self,
    avg(cls) AS cls,
    avg(sep) AS sep,
    avg(words) AS words
FROM landing
GROUP BY layer
ORDER BY layer
