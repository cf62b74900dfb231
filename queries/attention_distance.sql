-- name: attention distance
-- aliases: mean attention distance, attention span, distance profile, how far heads look, local and global heads, vit figure 7
-- paper: Dosovitskiy et al. 2021, "An Image is Worth 16x16 Words", Appendix D.7 and Figure 7 (mean attention distance per head against layer)
-- description: Per head, how far its attention reaches: mean_distance, the mean over a token's keys of
--   |query - key| in tokens weighted by attention (ViT's "attention distance", the analogue of a CNN's
--   receptive field), averaged over the input's rows (every token's) and then over inputs, each weighing the
--   same; median_from and median_to: the distances of the bucket where the head's attention, pooled over
--   every row, passes half its mass (buckets in powers of two: 0, 1, 2-3, 4-7, ...); local: the share of its
--   attention within distance 1 (the token itself and its neighbours). In a decoder a key is never after its
--   query. From table attn_distance (the dense maps summed at ingest, for every input, whole or read by
--   rows): exact on a dense run; on a sparse run each bucket's share is stored to 1/2048 and its distance to
--   11 significant bits. Dosovitskiy et al. find some heads attending globally from the lowest layers and
--   the mean distance growing with depth.
-- parameters:
--   run [run]: run id (default: the latest run)
-- needs: SELECT count(*) FROM attn_distance WHERE run_id = $run
--   else: run {run} holds no attention-distance profile (ingested before the atlas kept them): ingest it
--   again into another store
-- keys: layer, head
-- plot: layers mean_distance
-- figure: every head's mean attention distance over its layer, and the layer mean as a line (ViT's Figure 7)
-- axis: mean attention distance (tokens)

WITH per_input AS (
    SELECT example_id, layer, head, sum(distance::DOUBLE) AS mean_distance
    FROM attn_distance
    WHERE run_id = $run
    GROUP BY example_id, layer, head
),
pooled AS (  -- every row of every input: each input's shares weighed by its rows
    SELECT d.layer, d.head, d.bucket, sum(d.mass::DOUBLE * e.n_tokens) AS mass
    FROM attn_distance d
    JOIN examples e ON e.run_id = $run AND e.example_id = d.example_id
    WHERE d.run_id = $run
    GROUP BY d.layer, d.head, d.bucket
),
cumulative AS (
    SELECT layer, head, bucket, mass,
           sum(mass) OVER (PARTITION BY layer, head ORDER BY bucket) AS below,
           sum(mass) OVER (PARTITION BY layer, head) AS total
    FROM pooled
),
median AS (
    SELECT layer, head, min(bucket) AS bucket,
           any_value(total) AS total
    FROM cumulative
    WHERE below >= total / 2
    GROUP BY layer, head
),
local_ AS (
    SELECT layer, head, sum(mass) FILTER (WHERE bucket <= 1) / sum(mass) AS local
    FROM pooled
    GROUP BY layer, head
)
SELECT p.layer + 1 AS layer, p.head + 1 AS head, avg(p.mean_distance) AS mean_distance,
       CASE WHEN any_value(m.bucket) = 0 THEN 0 ELSE 2 ** (any_value(m.bucket) - 1) END::BIGINT AS median_from,
       (2 ** any_value(m.bucket) - 1)::BIGINT AS median_to,
       any_value(l.local) AS local
FROM per_input p
JOIN median m ON m.layer = p.layer AND m.head = p.head
JOIN local_ l ON l.layer = p.layer AND l.head = p.head
GROUP BY p.layer, p.head
ORDER BY p.layer, p.head
