-- name: head importance
-- aliases: michel importance, importance scores, gate gradients, michel et al
-- paper: Michel et al. 2019, "Are Sixteen Heads Really Better than One?", Section 4.1
-- description: Per head of a task model, as Michel et al.'s released code computes it over the training
--   examples (n_train_examples of them, batches of 32): the sum over examples and tokens of
--   |<d loss / d ctx_t, ctx_t>|, ctx_t the head's context vector at token t and the loss the batch mean,
--   divided by the number of real tokens (last layer: by the number of examples); and that score divided
--   by the l2 norm of its layer's scores (the normalisation used for pruning). Run 'atlas importance' first.
-- parameters:
--   task: GLUE task, empty for the task of the newest task model with importance scores (default: )
--   model_run [any run]: task model run id, empty for the newest one of the task with importance scores (default: )
-- needs: SELECT count(*) FROM head_scores WHERE analysis = 'head importance'
--   else: no head importance in the store: run 'atlas importance' first
-- needs: SELECT count(*) FROM head_scores WHERE analysis = 'head importance'
--     AND upper(split_part(run_id, '__', 1)) = upper(coalesce(nullif($task, ''), split_part(run_id, '__', 1)))
--   else: no head importance of task '{task}' in the store: run 'atlas importance --task {task}' first
-- needs: SELECT count(*) FROM head_scores WHERE analysis = 'head importance'
--     AND (nullif($model_run, '') IS NULL OR run_id = $model_run)
--   else: model run '{model_run}' has no head importance
-- needs: SELECT count(*) FROM head_scores WHERE analysis = 'head importance'
--     AND upper(split_part(run_id, '__', 1)) = upper(coalesce(nullif($task, ''), split_part(run_id, '__', 1)))
--     AND (nullif($model_run, '') IS NULL OR run_id = $model_run)
--   else: model run '{model_run}' is not a model of task '{task}'
-- plot: heatmap importance_normalised importance
-- figure: a layer x head heat map of each of `importance_normalised`, `importance`
-- labels:
--   importance_normalised: importance (normalised per layer)

WITH chosen AS (
    SELECT s.run_id FROM head_scores s
    LEFT JOIN (SELECT run_id, max(created_at) AS created_at FROM task_models GROUP BY run_id) t ON t.run_id = s.run_id
    WHERE s.analysis = 'head importance' AND upper(split_part(s.run_id, '__', 1)) = upper(coalesce(nullif($task, ''), split_part(s.run_id, '__', 1)))
      AND (nullif($model_run, '') IS NULL OR s.run_id = $model_run)
    ORDER BY t.created_at DESC NULLS LAST, s.run_id
    LIMIT 1
)
SELECT run_id AS model_run, layer + 1 AS layer, head + 1 AS head,
       max(value) FILTER (WHERE metric = 'importance') AS importance,
       max(value) FILTER (WHERE metric = 'importance_normalised') AS importance_normalised,
       max(value) FILTER (WHERE metric = 'n_train_examples')::INTEGER AS n_train_examples
FROM head_scores
WHERE analysis = 'head importance' AND run_id = (SELECT run_id FROM chosen)
GROUP BY run_id, layer, head
ORDER BY layer, head
