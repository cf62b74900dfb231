-- name: pruning curve
-- aliases: head pruning, prune heads, michel figure 3, all heads but one
-- paper: Michel et al. 2019, "Are Sixteen Heads Really Better than One?", Section 4, Figure 3; Table 2
-- description: The dev-set metric (n_dev examples) as heads are masked in order of normalised importance
--   (computed once, on the training set), least important first: int(K p / 100) of the K heads at
--   p = 5, 10, ..., 100 % (kind 'pruned'); and, per layer, the best and worst result when all heads of
--   that layer but one are masked (kind 'all_but_one', Table 2), against the baseline. Headline metric
--   of each task. Run 'atlas importance' first. With several models of one task in the store, name one
--   with model_run (the figure draws one line per task).
-- parameters:
--   model_run [any run]: task model run id, empty for every model (default: )
-- needs: SELECT count(*) FROM ablations WHERE kind = 'pruned'
--   else: no pruning results in the store: run 'atlas importance' first
-- plot: curve pruned_share value task
-- figure: `value` over `pruned_share`, one line per `task`
-- percent: pruned_share
-- labels:
--   pruned_share: heads pruned (%)
--   value: dev-set metric

WITH a AS (
    SELECT * FROM ablations
    WHERE metric = primary_metric AND (nullif($model_run, '') IS NULL OR run_id = $model_run)
)
SELECT task, run_id AS model_run, kind, pruned_share, NULL::INTEGER AS layer,
       NULL::VARCHAR AS best_kept_head, value, NULL::DOUBLE AS worst_value, NULL::VARCHAR AS worst_kept_head,
       metric, baseline, delta, n_examples AS n_dev
FROM a
WHERE kind = 'pruned'
UNION ALL
SELECT task, run_id, kind, NULL, layer + 1,
       arg_max(concat(layer + 1, '-', head + 1), (value, -head)), max(value),
       min(value), arg_min(concat(layer + 1, '-', head + 1), (value, head)),
       metric, any_value(baseline), max(value) - any_value(baseline), any_value(n_examples)
FROM a
WHERE kind = 'all_but_one'
GROUP BY task, run_id, kind, layer, metric
ORDER BY task, model_run, kind DESC, pruned_share, layer
