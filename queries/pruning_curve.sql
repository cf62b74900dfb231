-- name: pruning curve
-- aliases: head pruning, prune heads, michel figure 3, all heads but one
-- paper: Michel et al. 2019, "Are Sixteen Heads Really Better than One?", Section 4, Figure 3; Table 2
-- description: The task metric as heads are masked in order of normalised importance, least
--   important first, in steps of 5 % of all heads (kind 'pruned'); and, per layer, the best and worst
--   result when all heads of that layer but one are masked (kind 'all_but_one', Table 2), against the
--   baseline. Headline metric of each task. Run 'atlas importance' first.
-- parameters:
-- plot: curve pruned_share value task

SELECT task, run_id AS model_run, kind, pruned_share,
       NULL::INTEGER AS layer, NULL::VARCHAR AS best_kept_head, metric, value, baseline, delta
FROM ablations
WHERE kind = 'pruned' AND metric = primary_metric
UNION ALL
SELECT task, run_id, kind, NULL, layer + 1, arg_max(concat(layer + 1, '-', head + 1), value), metric,
       max(value), any_value(baseline), max(value) - any_value(baseline)
FROM ablations
WHERE kind = 'all_but_one' AND metric = primary_metric
GROUP BY ALL
ORDER BY task, model_run, kind DESC, pruned_share, layer
