-- name: gradient importance
-- aliases: attention gradients, sep gradient, gradient of loss wrt attention, clark figure 5
-- paper: Clark et al. 2019, "What Does BERT Look At?", Section 3.2, Figure 5
-- description: Per layer, the mean |d loss / d attention weight| over heads and (query, key) pairs of
--   real tokens, for attention to [SEP], to '.' and ',', and to other tokens. Column loss says which
--   loss: Clark et al. use the masked-LM loss ('atlas grads --corpus FILE', only for a model with an MLM
--   head); a fine-tuned model's task loss on its dev data ('atlas grads --task T --data DIR', asked for
--   explicitly, e.g. for the embedded model, which has no MLM head) is not the paper's. Run 'atlas grads'
--   first.
--   [SEP] is the tokenizer's sep token (by its id, not its string).
-- parameters:
--   model_run [any run]: run id of the gradients, empty for the first one in the store (default: )
-- needs: SELECT count(*) FROM attention_gradients
--   else: no attention gradients in the store: run 'atlas grads' first
-- plot: curve layer mean_abs_grad target
-- figure: `mean_abs_grad` over `layer`, one line per `target`
-- labels:
--   mean_abs_grad: mean |gradient of the loss|
--   target: attention to

SELECT run_id AS model_run,
       CASE WHEN loss = 'mlm' THEN 'masked-LM loss, as Clark et al.'
            ELSE replace(loss, 'task:', '') || ' task loss, not Clark et al.''s masked-LM loss' END AS loss,
       layer + 1 AS layer, target, mean_abs_grad, n_weights
FROM attention_gradients
WHERE run_id = coalesce(nullif($model_run, ''), (SELECT min(run_id) FROM attention_gradients))
ORDER BY layer, CASE target WHEN 'sep' THEN 1 WHEN 'dot_comma' THEN 2 WHEN 'other' THEN 3 END
