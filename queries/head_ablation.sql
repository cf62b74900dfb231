-- name: head ablation
-- aliases: head disabling, disable heads, single head ablation, kovaleva figure 8
-- paper: Kovaleva et al. 2019, "Revealing the Dark Secrets of BERT", Section 4.6, Figure 8
-- description: The task metric on the dev set with one head disabled at a time, against the baseline
--   with nothing disabled. Disabled = attention replaced by 1/L over the real tokens (method uniform,
--   Kovaleva et al.) or the head's output multiplied by 0 (method mask, Michel et al.). Metric: the
--   task's headline metric (accuracy; F1 for MRPC/QQP; Pearson for STS-B) unless given. Run 'atlas ablate' first.
-- parameters:
--   task: GLUE task, empty for the task of the newest task model with such ablations (default: )
--   method: uniform or mask (default: uniform)
--   metric: metric name, empty for the task's first; the task left out, of a task model with it (default: )
--   model_run [any run]: task model run id, empty for the newest one of the task with such ablations (default: )
-- needs: SELECT count(*) FROM ablations
--   else: no ablations in the store: run 'atlas ablate' first
-- needs: SELECT count(*) FROM ablations WHERE method = $method AND kind = 'head'
--   else: no head ablations by method '{method}' in the store (the methods: uniform, mask)
-- needs: SELECT count(*) FROM ablations WHERE method = $method AND kind = 'head'
--     AND upper(task) = upper(coalesce(nullif($task, ''), task))
--   else: no head ablations of task '{task}' by method '{method}' in the store:
--     run 'atlas ablate --task {task} --method {method}' first
-- needs: SELECT count(*) FROM ablations WHERE method = $method AND kind = 'head'
--     AND (nullif($model_run, '') IS NULL OR run_id = $model_run)
--   else: model run '{model_run}' has no head ablations by method '{method}'
-- needs: SELECT count(*) FROM ablations WHERE method = $method AND kind = 'head'
--     AND upper(task) = upper(coalesce(nullif($task, ''), task)) AND (nullif($model_run, '') IS NULL OR run_id = $model_run)
--   else: model run '{model_run}' is not a model of task '{task}'
-- needs: SELECT count(*) FROM ablations WHERE method = $method AND kind = 'head'
--     AND upper(task) = upper(coalesce(nullif($task, ''), task)) AND (nullif($model_run, '') IS NULL OR run_id = $model_run)
--     AND metric = coalesce(nullif($metric, ''), primary_metric)
--   else: the head ablations asked for have no metric '{metric}'
-- notes: SELECT (count(*) = 0)::INTEGER FROM ablations o WHERE o.method <> $method AND o.kind = 'head'
--     AND o.run_id = (SELECT s.run_id FROM ablations s
--       LEFT JOIN (SELECT run_id, max(created_at) AS created_at FROM task_models GROUP BY run_id) t ON t.run_id = s.run_id
--       WHERE upper(s.task) = upper(coalesce(nullif($task, ''), s.task)) AND s.method = $method AND s.kind = 'head'
--         AND (nullif($model_run, '') IS NULL OR s.run_id = $model_run)
--         AND s.metric = coalesce(nullif($metric, ''), s.primary_metric)
--       ORDER BY t.created_at DESC NULLS LAST, s.run_id LIMIT 1)
--   else: these are the ablations by $method; the model run shown also has head ablations by the other
--     method (uniform or mask)
-- plot: heatmap delta value
-- figure: a layer x head heat map of each of `delta`, `value`
-- labels:
--   delta: metric change (head disabled)
--   value: metric with the head disabled

WITH chosen AS (
    SELECT s.run_id FROM ablations s
    LEFT JOIN (SELECT run_id, max(created_at) AS created_at FROM task_models GROUP BY run_id) t ON t.run_id = s.run_id
    WHERE upper(s.task) = upper(coalesce(nullif($task, ''), s.task)) AND s.method = $method AND s.kind = 'head'
      AND (nullif($model_run, '') IS NULL OR s.run_id = $model_run)
      AND s.metric = coalesce(nullif($metric, ''), s.primary_metric)
    ORDER BY t.created_at DESC NULLS LAST, s.run_id
    LIMIT 1
)
SELECT a.task, a.run_id AS model_run, a.layer + 1 AS layer, a.head + 1 AS head, a.metric,
       a.value, a.baseline, a.delta
FROM ablations a
WHERE a.run_id = (SELECT run_id FROM chosen) AND a.method = $method AND a.kind = 'head'
  AND a.metric = coalesce(nullif($metric, ''), a.primary_metric)
ORDER BY layer, head
