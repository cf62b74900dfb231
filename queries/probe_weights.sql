-- name: probe weights
-- aliases: attention probe weights, attn only weights, which heads does the probe use
-- paper: Clark et al. 2019, "What Does BERT Look At?", Section 5
-- description: Per head, the weights the attention-only probe learned on a train run: for attention
--   from the dependent to its candidate head, and from the candidate head to the dependent (the ROOT
--   candidate's weights are these times the learned [CLS] and [SEP] shares). The largest weights mark the
--   heads whose attention the probe relies on to find syntactic heads. Run 'atlas probe' first; pass
--   the train run.
--   [CLS] and [SEP] are by role (tokens.role): the cls or bos token, and the other special tokens.
-- parameters:
--   run [run]: the run the probe was trained on (default: the latest run)
-- needs: SELECT count(*) FROM head_scores WHERE run_id = $run AND analysis = 'attention probe'
--   else: no probe was trained on run {run}: run 'atlas probe --train {run} --eval RUN' first
-- plot: heatmap dep_to_head head_to_dep
-- figure: a layer x head heat map of each of `dep_to_head`, `head_to_dep`
-- labels:
--   dep_to_head: dependent → head
--   head_to_dep: head → dependent

SELECT layer + 1 AS layer, head + 1 AS head,
       max(value) FILTER (WHERE metric = 'weight_dep_to_head') AS dep_to_head,
       max(value) FILTER (WHERE metric = 'weight_head_to_dep') AS head_to_dep
FROM head_scores
WHERE run_id = $run AND analysis = 'attention probe'
GROUP BY layer, head
ORDER BY layer, head
