-- name: layer ablation
-- aliases: layer disabling, disable layers, kovaleva figure 9
-- paper: Kovaleva et al. 2019, "Revealing the Dark Secrets of BERT", Section 4.6, Figure 9
-- description: The task metric on the dev set with one whole layer (all its heads) disabled at a
--   time, against the baseline with nothing disabled. Disabled = attention replaced by 1/L over the
--   real tokens (method uniform, Kovaleva et al.) or the heads' outputs multiplied by 0 (method mask,
--   Michel et al.). Metric: the task's headline metric (accuracy; F1 for MRPC/QQP; Pearson for
--   STS-B) unless given. Run 'atlas ablate' first.
-- parameters:
--   task: GLUE task, empty for the task of the newest task model with such ablations (default: )
--   method: uniform or mask (default: uniform)
--   metric: metric name, empty for the task's first; the task left out, of a task model with it (default: )
--   model_run [any run]: task model run id, empty for the newest one of the task with such ablations (default: )
-- needs: SELECT count(*) FROM ablations
--   else: no ablations in the store: run 'atlas ablate' first
-- needs: SELECT count(*) FROM ablations WHERE method = $method AND kind = 'layer'
--   else: no layer ablations by method '{method}' in the store (the methods: uniform, mask)
-- needs: SELECT count(*) FROM ablations WHERE method = $method AND kind = 'layer'
--     AND upper(task) = upper(coalesce(nullif($task, ''), task))
--   else: no layer ablations of task '{task}' by method '{method}' in the store:
--     run 'atlas ablate --task {task} --method {method}' first
-- needs: SELECT count(*) FROM ablations WHERE method = $method AND kind = 'layer'
--     AND (nullif($model_run, '') IS NULL OR run_id = $model_run)
--   else: model run '{model_run}' has no layer ablations by method '{method}'
-- needs: SELECT count(*) FROM ablations WHERE method = $method AND kind = 'layer'
--     AND upper(task) = upper(coalesce(nullif($task, ''), task)) AND (nullif($model_run, '') IS NULL OR run_id = $model_run)
--   else: model run '{model_run}' is not a model of task '{task}'
-- needs: SELECT count(*) FROM ablations WHERE method = $method AND kind = 'layer'
--     AND upper(task) = upper(coalesce(nullif($task, ''), task)) AND (nullif($model_run, '') IS NULL OR run_id = $model_run)
--     AND metric = coalesce(nullif($metric, ''), primary_metric)
--   else: the layer ablations asked for have no metric '{metric}'
-- notes: SELECT (count(*) = 0)::INTEGER FROM ablations o WHERE o.method <> $method AND o.kind = 'layer'
--     AND o.run_id = (SELECT s.run_id FROM ablations s
--       LEFT JOIN (SELECT run_id, max(created_at) AS created_at FROM task_models GROUP BY run_id) t ON t.run_id = s.run_id
--       WHERE upper(s.task) = upper(coalesce(nullif($task, ''), s.task)) AND s.method = $method AND s.kind = 'layer'
--         AND (nullif($model_run, '') IS NULL OR s.run_id = $model_run)
--         AND s.metric = coalesce(nullif($metric, ''), s.primary_metric)
--       ORDER BY t.created_at DESC NULLS LAST, s.run_id LIMIT 1)
--   else: these are the ablations by $method; the model run shown also has layer ablations by the other
--     method (uniform or mask)
-- plot: bars layer value baseline
-- figure: one bar of `value` per `layer`, with `baseline` as a line
-- axis: {metric}
-- labels:
--   layer: layer disabled
--   baseline: nothing disabled

WITH chosen AS (
    SELECT s.run_id FROM ablations s
    LEFT JOIN (SELECT run_id, max(created_at) AS created_at FROM task_models GROUP BY run_id) t ON t.run_id = s.run_id
    WHERE upper(s.task) = upper(coalesce(nullif($task, ''), s.task)) AND s.method = $method AND s.kind = 'layer'
      AND (nullif($model_run, '') IS NULL OR s.run_id = $model_run)
      AND s.metric = coalesce(nullif($metric, ''), s.primary_metric)
    ORDER BY t.created_at DESC NULLS LAST, s.run_id
    LIMIT 1
)
SELECT a.task, a.run_id AS model_run, a.layer + 1 AS layer, a.metric,
       a.value, a.baseline, a.delta
FROM ablations a
WHERE a.run_id = (SELECT run_id FROM chosen) AND a.method = $method AND a.kind = 'layer'
  AND a.metric = coalesce(nullif($metric, ''), a.primary_metric)
ORDER BY layer
