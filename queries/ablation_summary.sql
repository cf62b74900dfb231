-- name: ablation summary
-- aliases: disabling summary, best head gain, random head effect, kovaleva section 4.6
-- paper: Kovaleva et al. 2019, "Revealing the Dark Secrets of BERT", Section 4.6
-- description: Per task model and method: the baseline metric, the best single-head gain (which head),
--   the mean effect of disabling a random head (mean delta over all heads), the share of heads whose
--   disabling helps, and the best and worst whole-layer gains (which layer). Headline metric of each
--   task (accuracy; F1 for MRPC/QQP; Pearson for STS-B). Run 'atlas ablate' first.
-- parameters:
-- needs: SELECT count(*) FROM ablations
--   else: no ablations in the store: run 'atlas ablate' first
-- plot:

WITH a AS (SELECT * FROM ablations WHERE metric = primary_metric AND kind IN ('head', 'layer'))
SELECT task, run_id AS model_run, method, metric,
       any_value(baseline) AS baseline,
       max(delta) FILTER (WHERE kind = 'head') AS best_head_gain,
       arg_max(concat(layer + 1, '-', head + 1), (delta, -layer, -head)) FILTER (WHERE kind = 'head') AS best_head,
       avg(delta) FILTER (WHERE kind = 'head') AS mean_random_head_delta,
       avg((delta > 0)::INTEGER) FILTER (WHERE kind = 'head') AS share_heads_helping,
       max(delta) FILTER (WHERE kind = 'layer') AS best_layer_gain,
       arg_max(layer + 1, (delta, -layer)) FILTER (WHERE kind = 'layer') AS best_layer,
       min(delta) FILTER (WHERE kind = 'layer') AS worst_layer_delta,
       any_value(n_examples) AS n_examples
FROM a
GROUP BY task, run_id, method, metric
ORDER BY task, method, model_run
