-- name: duplicate-token heads
-- aliases: duplicate token heads, duplicate token head, duplicate_token_head, repeated token heads
-- paper: Olsson et al. 2022, "In-context Learning and Induction Heads"; the score of TransformerLens's head_detector.py (detect_head, 'duplicate_token_head')
-- description: Per head, the share of its attention that goes to earlier copies of the token itself:
--   TransformerLens's detect_head with its defaults (error_measure 'mul', exclude_bos and
--   exclude_current_token False), whose detection pattern for 'duplicate_token_head' marks, for query i,
--   every earlier key j < i holding the same vocabulary id (tokens.piece_id; the token itself is not its
--   own duplicate). Per input, the attention on the pattern's positions over the attention in the whole
--   map (the sum of its rows: the input's number of tokens, every row counted, special tokens included),
--   then the mean over inputs, as detect_head averages a list of texts; an input without a repeated id
--   counts 0. The pattern is lower-triangular: in an encoder, attention to a later copy is not counted.
--   The input's tokens are those the run stores (the tokenizer's own template; TransformerLens's to_tokens
--   prepends a BOS to every text). Inputs of one token are left out (detect_head refuses them). ceiling:
--   the score of a head whose rows with a copy before them attend only to their copies (the mean over
--   inputs of the share of such rows): what the input allows (on repeated random tokens with a BOS, about
--   1/2). From the run's edges: exact on a dense run; on a sparse run only kept edges count, a lower bound
--   of the dense score (up to the rounding of each kept weight, at most 1/512).
-- parameters:
--   run [run]: run id (default: the latest run)
-- notes: SELECT count(*) FROM runs WHERE run_id = $run AND kept_mass IS NULL
--   else: run {run} is sparse: the scores count its kept edges only, a lower bound of the dense scores
--   (ingest with --dense for exact ones)
-- plot: heatmap score
-- figure: a layer x head heat map of each of `score`

WITH toks AS (
    SELECT example_id, tok_idx, piece_id FROM tokens WHERE run_id = $run
),
inputs AS (
    SELECT example_id, count(*) AS n FROM toks GROUP BY example_id HAVING count(*) > 1
),
pattern AS (  -- query i, key j < i of the same vocabulary id
    SELECT a.example_id, a.tok_idx AS src_tok, b.tok_idx AS dst_tok
    FROM toks a JOIN toks b ON a.example_id = b.example_id AND a.piece_id = b.piece_id AND b.tok_idx < a.tok_idx
),
mass AS (
    SELECT e.layer, e.head, sum(e.weight::DOUBLE / i.n) AS total
    FROM attn_edges e
    JOIN pattern p ON e.example_id = p.example_id AND e.src_tok = p.src_tok AND e.dst_tok = p.dst_tok
    JOIN inputs i ON e.example_id = i.example_id
    WHERE e.run_id = $run
    GROUP BY e.layer, e.head
),
ceiling AS (
    SELECT sum(coalesce(rows_with, 0)::DOUBLE / n) / count(*) AS ceiling, count(*) AS n_inputs
    FROM inputs
    LEFT JOIN (
        SELECT example_id, count(DISTINCT src_tok) AS rows_with FROM pattern GROUP BY example_id
    ) USING (example_id)
),
heads AS (
    SELECT l.layer, h.head
    FROM (SELECT unnest(range(n_layers))::SMALLINT AS layer FROM runs WHERE run_id = $run) l,
         (SELECT unnest(range(n_heads))::SMALLINT AS head FROM runs WHERE run_id = $run) h
)
SELECT
    heads.layer + 1 AS layer,
    heads.head + 1 AS head,
    coalesce(mass.total, 0) / ceiling.n_inputs AS score,
    ceiling.ceiling,
    ceiling.n_inputs
FROM heads
CROSS JOIN ceiling
LEFT JOIN mass ON mass.layer = heads.layer AND mass.head = heads.head
ORDER BY score DESC, layer, head
