-- name: gradient importance
-- aliases: attention gradients, sep gradient, gradient of loss wrt attention, clark figure 5
-- paper: Clark et al. 2019, "What Does BERT Look At?", Section 3.2, Figure 5
-- description: Per layer, the mean |d loss / d attention weight| over heads and (query, key) pairs of
--   real tokens, for attention to [SEP], to '.' and ',', and to other tokens. The loss is the MLM loss
--   for a model with an MLM head, else the fine-tuned task loss on the task's dev data (column loss).
--   Run 'atlas grads' first.
-- parameters:
--   model_run: run id of the gradients, empty for the first one in the store (default: )
-- plot: curve layer mean_abs_grad target

SELECT run_id AS model_run, loss, layer + 1 AS layer, target, mean_abs_grad, n_weights
FROM attention_gradients
WHERE run_id = coalesce(nullif($model_run, ''), (SELECT min(run_id) FROM attention_gradients))
ORDER BY layer, list_position(['sep', 'dot_comma', 'other'], target)
