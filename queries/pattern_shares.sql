-- name: pattern shares
-- aliases: pattern taxonomy, attention patterns, vertical diagonal block heterogeneous, kovaleva figure 2
-- paper: Kovaleva et al. 2019, "Revealing the Dark Secrets of BERT", Section 4.1, Figure 2
-- description: Shares (percent) of the (input, head) maps of each class: Vertical (attention to [CLS]
--   and [SEP]), Diagonal (previous / next token), Vertical+Diagonal, Block (inside the own segment of
--   a pair input), Heterogeneous. One row per run (layer and head empty), per run and layer, and per
--   run, layer and head; per method: 'rule' from 'atlas patterns --run RUN' (thresholds in
--   atlas/patterns.py), 'cnn' from 'atlas patterns --labels FILE' (a CNN trained on hand labels).
--   [CLS] and [SEP] are the special tokens of role cls, bos, sep or eos (tokens.role; attn_rows.to_cls +
--   to_sep): a model without them (GPT-2) has no Vertical map, and a Llama-style decoder's Vertical is
--   its attention to the BOS.
-- parameters:
-- needs: SELECT count(*) FROM patterns
--   else: no attention patterns in the store: run 'atlas patterns --run RUN' first
-- plot: stacked label vertical diagonal vertical_diagonal block heterogeneous
-- figure: one bar per `label`, stacked by `vertical`, `diagonal`, `vertical_diagonal`, `block`, `heterogeneous`
-- axis: share of maps (%)
-- labels:
--   vertical_diagonal: vertical + diagonal

SELECT p.run_id, p.method, any_value(r.corpus) AS corpus, any_value(r.model) AS model,
       concat_ws(' ', any_value(r.corpus), regexp_extract(any_value(r.model), '[^/]+$'), p.method) AS label,
       p.layer + 1 AS layer, p.head + 1 AS head,
       100 * avg((p.pattern = 'Vertical')::INTEGER) AS vertical,
       100 * avg((p.pattern = 'Diagonal')::INTEGER) AS diagonal,
       100 * avg((p.pattern = 'Vertical+Diagonal')::INTEGER) AS vertical_diagonal,
       100 * avg((p.pattern = 'Block')::INTEGER) AS block,
       100 * avg((p.pattern = 'Heterogeneous')::INTEGER) AS heterogeneous,
       count(*) AS n_maps
FROM patterns p JOIN runs r USING (run_id)
GROUP BY GROUPING SETS ((p.run_id, p.method), (p.run_id, p.method, p.layer), (p.run_id, p.method, p.layer, p.head))
ORDER BY p.run_id, p.method DESC, layer NULLS FIRST, head NULLS FIRST
