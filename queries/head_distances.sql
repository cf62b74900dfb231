-- name: head distances
-- aliases: head clustering, jensen shannon, js divergence, mds of heads, clark figure 6
-- paper: Clark et al. 2019, "What Does BERT Look At?", Section 6, Figure 6
-- description: Per head: its 2-D multidimensional-scaling coordinates from the Jensen-Shannon
--   divergences between the attention distributions of every pair of heads, its cluster (average-linkage
--   clustering of the same distances, the project's own), the closest other head and that divergence,
--   and its mean divergence to the heads of its own layer and of the other layers. The divergence is
--   Clark et al.'s released head_distances.py: every row of every input (all tokens) smoothed to
--   0.999 a + 0.001 / n, JS in nats summed over the rows; the released code keeps the sum, here it is
--   divided by the rows summed (head_pairs.n_rows), so js is the mean per token and js * n_rows the
--   released number (one constant for every pair: the MDS only scales, the clusters are the same).
--   Run 'atlas distances --run RUN' first: it recomputes the run's dense maps and writes the tables.
-- parameters:
--   run [run]: run id (default: the latest run)
-- needs: SELECT count(*) FROM head_pairs WHERE run_id = $run
--   else: 'head distances' of run {run} are not computed yet: run 'atlas distances --run {run}' first
-- plot: mds mds_x mds_y cluster
-- figure: every head as a point at (`mds_x`, `mds_y`), coloured by `cluster`

WITH scores AS (
    SELECT layer, head,
           max(value) FILTER (WHERE metric = 'mds_x') AS mds_x,
           max(value) FILTER (WHERE metric = 'mds_y') AS mds_y,
           max(value) FILTER (WHERE metric = 'cluster')::INTEGER AS cluster
    FROM head_scores
    WHERE run_id = $run AND analysis = 'head distances'
    GROUP BY layer, head
),
others AS (
    SELECT layer_a AS layer, head_a AS head,
           arg_min(concat(layer_b + 1, '-', head_b + 1), (js, layer_b, head_b)) AS closest_head,
           min(js) AS closest_js,
           avg(js) FILTER (WHERE layer_b = layer_a) AS mean_js_same_layer,
           avg(js) FILTER (WHERE layer_b <> layer_a) AS mean_js_other_layers
    FROM head_pairs
    WHERE run_id = $run AND NOT (layer_a = layer_b AND head_a = head_b)
    GROUP BY layer_a, head_a
)
SELECT s.layer + 1 AS layer, s.head + 1 AS head, s.mds_x, s.mds_y, s.cluster,
       o.closest_head, o.closest_js, o.mean_js_same_layer, o.mean_js_other_layers
FROM scores s JOIN others o USING (layer, head)
ORDER BY layer, head
