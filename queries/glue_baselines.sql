-- name: glue baselines
-- aliases: task models, fine-tuning baselines, kovaleva table 1, glue scores
-- paper: Kovaleva et al. 2019, "Revealing the Dark Secrets of BERT", Section 4.3, Table 1
-- description: Dev-set metrics of each task model recorded by 'atlas finetune': pre-trained without
--   fine-tuning (epochs 0: the task head keeps its seeded initial weights), random init + fine-tuning,
--   pre-trained + fine-tuning; with the training examples and epochs used (by default the whole training
--   set, 3 epochs, learning rate 2e-5 with 10 % warm-up, batch 32: Michel et al.'s prepare_task.sh). One row
--   per model and metric.
-- parameters:
-- needs: SELECT count(*) FROM task_models
--   else: no task models in the store: run 'atlas finetune' first
-- plot:

SELECT task,
       CASE WHEN epochs = 0 THEN init || ', not fine-tuned' ELSE init || ' + fine-tuned' END AS model_kind,
       metric, value, metric = primary_metric AS headline, n_train, epochs, learning_rate, n_examples AS n_dev,
       model, run_id AS model_run
FROM task_models
ORDER BY task,
         CASE model_kind WHEN 'pretrained, not fine-tuned' THEN 1 WHEN 'random + fine-tuned' THEN 2
             WHEN 'pretrained + fine-tuned' THEN 3 END,
         metric
