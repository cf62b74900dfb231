-- name: norm-based attention
-- aliases: attention is not only a weight, kobayashi, norm based analysis, vector norms, weight vs norm, kobayashi figure 2
-- paper: Kobayashi et al. 2020, "Attention is Not Only a Weight: Analyzing Transformers with Vector Norms", Section 4, Figures 2 and 3
-- description: Per head and kind of key ([CLS], [SEP], the pieces '.' and ',', every other token), what a
--   token draws from that kind: by weight, the attention weight alpha summed over the kind's keys; by norm,
--   ||alpha f(x)|| summed over them, where f(x) is what the head passes on from a key (its value vector
--   through the head's slice of the output projection: attn_rows.value_norm). Averaged as their released
--   re-examine.py does: per input, the mean over its rows (every token, [CLS] and [SEP] included), then the
--   mean over inputs, each weighing the same whatever its length. weight: the weight-based mass (alpha);
--   norm: the norm-based one (||alpha f(x)||, in the model's hidden units); share: the project's own, the
--   norm-based mass as a share of the row's whole (sum over every key of ||alpha f(x)||), averaged as weight is,
--   so that it reads beside weight (both sum to 1 over the kinds). Rows with head NULL are a layer's: the
--   mean over its heads. Kobayashi et al. find BERT-base's heavy attention to [SEP] (Clark et al.) carrying
--   little by norm. Exact on any run ingested with --norms (head_norms: sums over each input's rows).
--   Kinds by role (tokens.role), as 'special tokens' takes them: cls is cls or bos, sep is sep or eos.
-- parameters:
--   run [run]: run id (default: the latest run)
-- needs: SELECT count(*) FROM runs WHERE run_id = $run AND value_norms
--   else: run {run} holds no value norms: ingest again with --norms
-- keys: layer, head, kind
-- plot: shares kind weight share
-- figure: per layer, the mean over heads of each kind's part of a token's attention, stacked: by weight (alpha)
--   beside by norm (||alpha f(x)||, as a share of the row's whole)
-- axis: share of a token's attention
-- percent: weight share
-- labels:
--   weight: by weight (alpha)
--   share: by norm (||alpha f(x)||)

WITH per_input AS (
    SELECT r.example_id, r.layer, r.head, count(*) AS n,
           avg(r.to_cls) AS w_cls, avg(r.to_sep) AS w_sep, avg(r.to_dot_comma) AS w_dot_comma
    FROM attn_rows r
    WHERE r.run_id = $run
    GROUP BY r.example_id, r.layer, r.head
),
both_ AS (
    SELECT p.example_id, p.layer, p.head, p.w_cls, p.w_sep, p.w_dot_comma,
           CAST(h.norm_cls AS DOUBLE) / p.n AS n_cls, CAST(h.norm_sep AS DOUBLE) / p.n AS n_sep,
           CAST(h.norm_dot_comma AS DOUBLE) / p.n AS n_dot_comma, CAST(h.norm_total AS DOUBLE) / p.n AS n_total,
           CAST(h.share_cls AS DOUBLE) / p.n AS s_cls, CAST(h.share_sep AS DOUBLE) / p.n AS s_sep,
           CAST(h.share_dot_comma AS DOUBLE) / p.n AS s_dot_comma
    FROM per_input p
    JOIN head_norms h ON h.example_id = p.example_id AND h.layer = p.layer AND h.head = p.head
    WHERE h.run_id = $run
),
kinds AS (
    SELECT layer, head, 1 AS k, 'cls' AS kind, w_cls AS weight, n_cls AS norm, s_cls AS share FROM both_
    UNION ALL
    SELECT layer, head, 2, 'sep', w_sep, n_sep, s_sep FROM both_
    UNION ALL
    SELECT layer, head, 3, 'dot_comma', w_dot_comma, n_dot_comma, s_dot_comma FROM both_
    UNION ALL
    SELECT layer, head, 4, 'other', 1 - w_cls - w_sep - w_dot_comma, n_total - n_cls - n_sep - n_dot_comma,
           1 - s_cls - s_sep - s_dot_comma
    FROM both_
)
SELECT
    layer + 1 AS layer,
    CASE WHEN grouping(head) = 0 THEN head + 1 END AS head,
    kind,
    avg(weight) AS weight,
    avg(norm) AS norm,
    avg(share) AS share
FROM kinds
GROUP BY GROUPING SETS ((layer, head, k, kind), (layer, k, kind))
ORDER BY layer, head NULLS LAST, k
